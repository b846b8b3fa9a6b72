"""The UDP serve loop on the compiled fast path over real loopback sockets: a question
asked again is answered by C with the bytes Python gave, a swap is seen at once however
much C has learnt, a flood of random names is answered and counted, and a build without
the helper serves on the pure-Python path and says so once; the metrics say which path
serves and how many responses C built. On a node signing one of its zones, C answers the
other zone and the signed zone's DO=0 questions, and Python the DO=1 ones, which
validate; a zone turned signed is answered with its keys from the next question on; a swap
changing one zone leaves the other zone's answers in C."""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import time
from collections.abc import AsyncIterator

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest
import trio

from tests.property.dnssec_check import validate_sections
from tests.property.two_zones import PLAIN, SIGNED, TWO_ZONES
from tests.scenario.loopback_serve import (
    LIMIT,
    counted,
    index_with_www,
    serving,
    tcp_receive_frame,
    www_query,
)
from tests.scenario.operator_state_helpers import addresses
from valis_core.dns import dnssec
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats, serve_udp
from valis_core.dns.wire import from_text
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.zone_source import ZoneSourceStats
from valis_core.resident.views import NodeViews

ROUNDS = 5
ATTEMPTS = 5
NEEDS_C = pytest.mark.usefixtures("compiled")
"""A test that counts what C answered (skipped where the extension is not built)."""


async def ask_raw(address: tuple[str, int], wires: list[bytes]) -> list[bytes]:
    """Send ``wires`` from one socket, one at a time, and return the raw responses."""
    responses = []
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        for wire in wires:
            await client.sendto(wire, address)
            with trio.fail_after(LIMIT):
                responses.append(await client.recv(65535))
    return responses


@NEEDS_C
def test_this_build_serves_udp_on_the_compiled_path() -> None:
    assert fastpath.COMPILED


@NEEDS_C
async def test_a_question_asked_again_gets_the_bytes_python_gave() -> None:
    async with serving() as loop:
        wires = []
        for qid in range(ROUNDS):
            query = dns.message.make_query("WwW.example.com.", "A", use_edns=0)
            query.id = qid
            wires.append(query.to_wire())
        responses = await ask_raw(loop.udp_address, wires)
        snapshot = loop.holder.snapshot
        assert responses == [answer(snapshot, wire, transport=Transport.UDP) for wire in wires]
        await counted(loop.stats, ROUNDS)
        assert loop.stats.snapshot().responses == {("udp", "NOERROR"): ROUNDS}
        assert loop.stats.udp_compiled == ROUNDS - 1


@NEEDS_C
async def test_a_socket_on_its_own_answers_what_c_holds_while_the_trio_thread_is_held() -> None:
    """One socket (one worker, ``valis serve``) is drained on a worker thread too: a
    question C has learnt is answered while the trio thread is held in a blocking call of
    its own. An attempt can meet the worker just back from its budget (it then waits for
    the trio thread), so a few attempts are allowed; on the trio thread none is answered."""
    async with serving() as loop:
        wire = www_query().to_wire()
        await ask_raw(loop.udp_address, [wire])  # Python answers it, C learns it
        expected = answer(loop.holder.snapshot, wire, transport=Transport.UDP)
        answered = None
        for _ in range(ATTEMPTS):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
                client.settimeout(1.0)
                client.sendto(wire, loop.udp_address)
                try:
                    answered = client.recv(65535)  # holds the trio thread
                except TimeoutError:
                    await trio.sleep(0.05)  # the trio thread calls the worker again
                    continue
            break
        assert answered == expected


async def test_after_a_swap_the_next_answer_comes_from_the_new_index() -> None:
    async with serving() as loop:
        for _ in range(ROUNDS):  # learnt by C after the first
            before = await ask_raw(loop.udp_address, [www_query().to_wire()])
        loop.holder.swap(index_with_www("198.51.100.80"))
        after = await ask_raw(loop.udp_address, [www_query().to_wire()])
    assert addresses(dns.message.from_wire(before[0])) == {"192.0.2.80"}
    assert addresses(dns.message.from_wire(after[0])) == {"198.51.100.80"}


@NEEDS_C
async def test_a_flood_of_random_names_is_answered_nxdomain_and_counted() -> None:
    names = [f"r{i:x}.example.com." for i in range(4096, 4096 + 40)]
    async with serving() as loop:
        wires = [dns.message.make_query(name, "A", use_edns=False).to_wire() for name in names]
        responses = await ask_raw(loop.udp_address, wires)
        snapshot = loop.holder.snapshot
        assert responses == [answer(snapshot, wire, transport=Transport.UDP) for wire in wires]
        await counted(loop.stats, len(names))
        counts = loop.stats.snapshot()
    assert {dns.message.from_wire(r).rcode() for r in responses} == {dns.rcode.NXDOMAIN}
    assert counts.responses == {("udp", "NXDOMAIN"): len(names)}
    assert loop.stats.udp_compiled == len(names) - 1  # one learns the zone's NXDOMAIN


async def test_without_the_helper_udp_is_served_on_the_pure_path_and_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fastpath, "COMPILED", False)
    fastpath.tell_once.cache_clear()
    caplog.set_level(logging.WARNING, logger="valis_core.dns.fastpath")
    try:
        for _ in range(2):
            async with serving() as loop:
                responses = await ask_raw(loop.udp_address, [www_query().to_wire()] * 2)
                assert addresses(dns.message.from_wire(responses[1])) == {"192.0.2.80"}
                assert loop.stats.udp_compiled == 0
    finally:
        fastpath.tell_once.cache_clear()
    told = [record for record in caplog.records if "pure-Python path" in record.getMessage()]
    assert len(told) == 1


@NEEDS_C
async def test_the_metrics_say_which_path_serves_udp_and_what_c_answered() -> None:
    async with serving() as loop:
        await ask_raw(loop.udp_address, [www_query().to_wire()] * 3)
        await counted(loop.stats, 3)
        # Over TCP, one query after another on one connection, from the table UDP taught.
        wire = www_query().to_wire()
        async with await trio.open_tcp_stream(*loop.tcp_address) as stream:
            for _ in range(3):
                await stream.send_all(len(wire).to_bytes(2, "big") + wire)
                await tcp_receive_frame(stream)
        node = NodeViews(
            node="node-a",
            location="rack-1",
            owner_public_key="00" * 32,
            store_generation=0,
            zones=("example.com.",),
            holder=loop.holder,
            serve_stats=loop.stats,
            zone_stats=ZoneSourceStats(),
            fence_generation=lambda: 0,
            heartbeats=lambda: 1,
        )
        samples = {
            family.name: [sample.value for sample in family.samples]
            for family in node.metric_families()
        }
    assert samples["valis_dns_udp_fast_path"] == [1]
    assert samples["valis_dns_udp_compiled_total"] == [2]
    assert samples["valis_dns_tcp_compiled_total"] == [3]


def signer_of_one_zone() -> Signer:
    return Signer({from_text(SIGNED): dnssec.ZoneKey(dnssec.generate_key(13))}, clock=time.time)


@contextlib.asynccontextmanager
async def serving_udp(holder: IndexHolder) -> AsyncIterator[tuple[tuple[str, int], ServeStats]]:
    """The UDP loop over a fresh loopback socket, serving ``holder``."""
    stats = ServeStats()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        await udp.bind(("127.0.0.1", 0))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(serve_udp, udp, holder, stats=stats))
            yield udp.getsockname(), stats
            nursery.cancel_scope.cancel()


def queries(name: str, rtype: str, *, do: bool) -> list[bytes]:
    wires = []
    for qid in range(ROUNDS):
        query = dns.message.make_query(name, rtype, want_dnssec=do, use_edns=0)
        query.id = qid
        wires.append(query.to_wire())
    return wires


@NEEDS_C
async def test_a_node_signing_one_zone_answers_do0_and_the_other_zone_in_c() -> None:
    holder = IndexHolder(ZoneIndex.from_records(TWO_ZONES), signer_of_one_zone())
    async with serving_udp(holder) as (address, stats):
        # the first of each question teaches C; the same question with the other DO
        # bit is then C's from the start
        sent = 0
        for name, do, compiled in ((f"www.{SIGNED}", False, ROUNDS - 1),
                                   (f"www.{PLAIN}", True, ROUNDS - 1),
                                   (f"www.{PLAIN}", False, ROUNDS),
                                   (f"nope.{SIGNED}", False, ROUNDS - 1)):
            before = stats.udp_compiled
            wires = queries(name, "A", do=do)
            responses = await ask_raw(address, wires)
            expected = [answer(holder.snapshot, wire, transport=Transport.UDP) for wire in wires]
            assert responses == expected
            await counted(stats, sent := sent + ROUNDS)
            assert stats.udp_compiled - before == compiled, (name, do)
    nxdomain = dns.message.from_wire(responses[-1])
    assert nxdomain.rcode() == dns.rcode.NXDOMAIN  # DO=0: the unsigned denial
    assert not nxdomain.authority[1:]


@NEEDS_C
async def test_a_signed_zones_do1_answers_are_pythons_and_validate() -> None:
    holder = IndexHolder(ZoneIndex.from_records(TWO_ZONES), signer_of_one_zone())
    async with serving_udp(holder) as (address, stats):
        (keys,) = await ask_raw(address, queries(SIGNED, "DNSKEY", do=True)[:1])
        dnskey = dns.message.from_wire(keys).find_rrset(
            dns.message.ANSWER, dns.name.from_text(SIGNED), dns.rdataclass.IN,
            dns.rdatatype.DNSKEY)
        names = (f"www.{SIGNED}", f"nope.{SIGNED}", SIGNED)
        await counted(stats, 1)
        before = stats.udp_compiled
        for name in names:  # DO=0 first: C learns each question and answers it
            await ask_raw(address, queries(name, "A", do=False))
        await counted(stats, 1 + len(names) * ROUNDS)
        assert stats.udp_compiled - before == len(names) * (ROUNDS - 1)
        before = stats.udp_compiled
        for name in names:
            for response in await ask_raw(address, queries(name, "A", do=True)):
                message = dns.message.from_wire(response)
                assert message.ednsflags & dns.flags.DO
                checked = validate_sections(message, {dnskey.name: dnskey}, now=time.time())
                assert checked >= 1
        await counted(stats, 1 + 2 * len(names) * ROUNDS)
        assert stats.udp_compiled == before


@NEEDS_C
async def test_a_zone_turned_signed_is_answered_with_its_keys_at_once() -> None:
    holder = IndexHolder(ZoneIndex.from_records(TWO_ZONES))
    async with serving_udp(holder) as (address, stats):
        unsigned = await ask_raw(address, queries(SIGNED, "DNSKEY", do=False))
        await counted(stats, ROUNDS)
        assert stats.udp_compiled == ROUNDS - 1  # NODATA, learnt
        holder.sign_with(signer_of_one_zone())
        await ask_raw(address, queries(SIGNED, "TXT", do=False))  # the apex's NODATA, C's
        await counted(stats, 2 * ROUNDS)
        assert stats.udp_compiled == 2 * (ROUNDS - 1)
        signed = await ask_raw(address, queries(SIGNED, "DNSKEY", do=False))
        await counted(stats, 3 * ROUNDS)
        assert stats.udp_compiled == 2 * (ROUNDS - 1)  # the signer's keys: Python's
    assert not dns.message.from_wire(unsigned[-1]).answer
    for response in signed:
        (rrset,) = dns.message.from_wire(response).answer
        assert rrset.rdtype == dns.rdatatype.DNSKEY


@NEEDS_C
async def test_a_swap_changing_one_zone_leaves_the_others_answered_in_c() -> None:
    """Issue 27: the swap moves the table on by the zone it changed; the other zone's
    answers, learnt before it, stay answered in C, and the changed one's is the new
    version's from the first question after the swap."""
    holder = IndexHolder(ZoneIndex.from_records(TWO_ZONES))
    plain = queries(f"www.{PLAIN}", "A", do=False)
    changed = queries(f"www.{SIGNED}", "A", do=False)
    async with serving_udp(holder) as (address, stats):
        await ask_raw(address, [plain[0], changed[0]])  # Python answers, C learns both
        await counted(stats, 2)
        new = RecordRow(SIGNED, f"www.{SIGNED}", "A", 3600, "198.51.100.80")
        holder.swap(holder.current.with_owners_replaced(SIGNED, [f"www.{SIGNED}"], [new]))
        before = stats.udp_compiled
        kept = await ask_raw(address, plain[1:])
        await counted(stats, 2 + len(plain) - 1)
        assert stats.udp_compiled - before == len(plain) - 1  # every one in C
        fresh = await ask_raw(address, changed[1:])
    assert kept == [answer(holder.snapshot, wire, transport=Transport.UDP) for wire in plain[1:]]
    assert {addresses(dns.message.from_wire(raw)) == {"198.51.100.80"} for raw in fresh} == {True}

"""UDP workers against their oracle, ``answer`` (issue 29): over generated zones (with
wildcards, delegations, DNAMEs, child zones, CNAME chains) and queries, and a flood of
names beneath them, every response each worker gives (from the table without the GIL,
from the zones' negative answers, or from Python for a miss) is byte for byte what
``answer`` gives for the same snapshot; the workers sharing one port as fulcrum binds
them each answer in C what the table holds; a table the writer empties over and over
while the workers read it still gives ``answer``'s bytes; and on a node signing one zone
the workers' answers are ``answer``'s with the signer, DO=0 and DO=1."""

from __future__ import annotations

import socket

import dns.message
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.property.random_zones import queries_and_floods, zones
from tests.property.two_zones import EXAMPLE_ROWS, PLAIN, SIGNED, TWO_ZONES
from tests.scenario.udp_workers import LIMIT, ask, workers
from valis_core.dns import dnssec
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.wire import from_text
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

pytestmark = pytest.mark.usefixtures("compiled")  # the workers are the compiled path's

UDP = Transport.UDP
ROUNDS = 3
"""Each query asked this often of each worker: the first teaches the table, the others
are the worker's own (C, without the GIL)."""



async def asked_of_every_worker(holder: IndexHolder, wires: list[bytes]) -> list[list[bytes]]:
    """Each worker's responses to ``wires``, each asked ``ROUNDS`` times, in order."""
    answered: list[list[bytes]] = []
    async with workers(holder, 2, shared=False) as served:
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            await client.bind(("127.0.0.1", 0))
            for address in served.addresses:
                responses = []
                for _ in range(ROUNDS):
                    for wire in wires:
                        responses.append(await ask(client, address, wire))
                answered.append(responses)
    return answered


@settings(max_examples=scaled(0.3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_workers_answer_is_byte_for_byte_what_answer_gives(data: st.DataObject) -> None:
    rows = data.draw(zones())
    wires = data.draw(queries_and_floods(rows, 6))
    oracle = Snapshot(ZoneIndex.from_records(rows))  # a snapshot of its own: its cache too
    expected = [answer(oracle, wire, transport=UDP) for wire in wires]
    wires = [wire for wire, response in zip(wires, expected, strict=True) if response is not None]
    expected = [response for response in expected if response is not None]
    if not wires:
        return
    holder = IndexHolder(ZoneIndex.from_records(rows))
    for responses in trio.run(asked_of_every_worker, holder, wires):
        assert responses == expected * ROUNDS


async def test_workers_sharing_a_port_each_answer_in_c_what_the_table_holds() -> None:
    rows = EXAMPLE_ROWS
    holder = IndexHolder(ZoneIndex.from_records(rows))
    wire = dns.message.make_query("www.example.com.", "A", use_edns=0).to_wire()
    expected = answer(Snapshot(ZoneIndex.from_records(rows)), wire, transport=UDP)
    async with workers(holder, 2, shared=True) as served:
        # many source ports: the kernel spreads them over both sockets by their hash
        for _ in range(32):
            with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
                await client.bind(("127.0.0.1", 0))
                for _ in range(ROUNDS):
                    assert await ask(client, served.addresses[0], wire) == expected
    assert all(stats.udp_compiled > 0 for stats in served.stats)
    assert sum(stats.udp_rcodes[0] for stats in served.stats) == 32 * ROUNDS


async def test_a_table_emptied_again_and_again_under_the_workers_answers_as_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table of four entries, asked many questions by clients on both workers at once:
    the writer empties it over and over (freeing the entries) while the workers read it
    without the GIL; every response is still ``answer``'s, byte for byte."""
    monkeypatch.setattr(fastpath, "CACHE_ENTRIES", 4)
    rows = [*EXAMPLE_ROWS, *(RecordRow("example.com.", f"h{i}.example.com.", "A", 300,
                                       f"192.0.2.{i}") for i in range(1, 40))]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    oracle = Snapshot(ZoneIndex.from_records(rows))
    wires = [dns.message.make_query(f"h{i}.example.com.", "A").to_wire() for i in range(1, 40)]
    answered: list[tuple[bytes, bytes]] = []

    async def client(address: tuple[str, int]) -> None:
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            await sock.bind(("127.0.0.1", 0))
            for _ in range(ROUNDS * 4):
                for wire in wires:
                    answered.append((wire, await ask(sock, address, wire)))

    async with workers(holder, 2, shared=False) as served, trio.open_nursery() as nursery:
        for address in served.addresses:
            for _ in range(2):
                nursery.start_soon(client, address)
    for wire, response in answered:
        assert response == answer(oracle, wire, transport=UDP)
    assert sum(stats.udp_compiled for stats in served.stats) > 0


async def test_a_batch_mixing_c_answers_and_misses_answers_each_once_as_answer() -> None:
    """Datagrams sent in a burst, so that a worker receives them in batches: the hosts'
    A records taught to the table first (C answers them without the GIL), fresh names and
    types between them (misses: the negative answers and Python). A worker sends a
    batch's C answers before it takes the GIL for the rest; every datagram is still
    answered exactly once, byte for byte as ``answer`` answers it, and counted once."""
    rows = [*EXAMPLE_ROWS, *(RecordRow("example.com.", f"h{i}.example.com.", "A", 300,
                                       f"192.0.2.{i}") for i in range(1, 33))]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    oracle = Snapshot(ZoneIndex.from_records(rows))
    taught = [dns.message.make_query(f"h{i}.example.com.", "A").to_wire() for i in range(1, 33)]
    burst = []
    for i in range(1, 33):
        burst.append(taught[i - 1])
        burst.append(dns.message.make_query(f"n{i}.example.com.", "A").to_wire())
        burst.append(dns.message.make_query(f"h{i}.example.com.", "TXT").to_wire())
    by_id: dict[bytes, bytes] = {}
    for n, wire in enumerate(burst):  # distinct IDs: responses are matched by them
        burst[n] = n.to_bytes(2, "big") + wire[2:]
        by_id[burst[n][:2]] = burst[n]
    async with workers(holder, 1, shared=False) as served:
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            await client.bind(("127.0.0.1", 0))
            for wire in taught:
                await ask(client, served.addresses[0], wire)
            for wire in burst:
                await client.sendto(wire, served.addresses[0])
            responses: dict[bytes, bytes] = {}
            with trio.fail_after(LIMIT):
                while len(responses) < len(burst):
                    response = await client.recv(65535)
                    assert response[:2] not in responses, "a datagram answered twice"
                    responses[response[:2]] = response
            with trio.move_on_after(0.2):  # nothing more comes
                extra = await client.recv(65535)
                raise AssertionError(f"a datagram answered twice: {extra[:2]!r}")
    for ident, response in responses.items():
        assert response == answer(oracle, by_id[ident], transport=UDP)
    assert sum(served.stats[0].udp_rcodes) == len(taught) + len(burst)


async def test_on_a_node_signing_a_zone_every_workers_answer_is_answers() -> None:
    """One zone signed online here (Ed25519, a fixed clock: signatures are the same bytes
    from any signer with the key), one plain: DO=0 questions and the plain zone's are
    the workers' own in C, DO=1 questions to the signed zone go to Python (the signer's),
    and every response is what ``answer`` gives with a signer of the same key."""
    key = dnssec.ZoneKey(dnssec.generate_key(dnssec.ED25519))

    def signer() -> Signer:
        return Signer({from_text(SIGNED): key}, clock=lambda: 1_800_000_000)

    holder = IndexHolder(ZoneIndex.from_records(TWO_ZONES), signer())
    oracle = Snapshot(ZoneIndex.from_records(TWO_ZONES), signer=signer())
    wires = [dns.message.make_query(name, rtype, want_dnssec=do, use_edns=0).to_wire()
             for name in (f"www.{SIGNED}", f"nope.{SIGNED}", SIGNED, f"www.{PLAIN}")
             for rtype in ("A", "DNSKEY") for do in (False, True)]
    expected = [answer(oracle, wire, transport=UDP) for wire in wires]
    for responses in await asked_of_every_worker(holder, wires):
        assert responses == expected * ROUNDS

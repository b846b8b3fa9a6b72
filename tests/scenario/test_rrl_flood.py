"""Response rate limiting on loopback: a flood of queries from one victim prefix
(several source addresses in 127.0.1.0/24; a spoofed flood looks the same to the
server) is capped at the bucket's burst while a client from another prefix is answered
in full, and the victim's own resolver, told TC by a slipped reply, retries over TCP and
gets its answer. The serve loops run under trio's mock clock, which stands still, so no
bucket refills during a test and every count is exact; clients run in threads with
their own socket timeouts. A flood of random names under one wildcard is one bucket, a
source in the exempt list is never limited, and a new limiter is put in while the loop
serves. Last, the resident (as the run account, its database the private cluster) turns
limiting on from its site facts, counts what it held back, answers its exempt prefix in
full, and turns limiting off and on again on a reload."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import select
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest
import trio
import trio.testing

from tests.scenario.pg import RUN_USER, run_as
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts
from tests.scenario.serve_process import ZONE_FILE, start_server, stop_server, valis_command
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats, listen, serve_tcp, serve_udp
from valis_core.dns.serve.limited_udp import LimitedUdp, LimitedUdpWorkers
from valis_core.dns.serve.listen import bind_dns_pair
from valis_core.dns.serve.rrl import RateLimiter, RrlSettings
from valis_core.dns.zone import ZoneIndex

ZONE_TEXT = (Path(__file__).parent / "data" / "example.com.zone").read_text()
RATE = 10
VICTIMS = ("127.0.1.2", "127.0.1.3", "127.0.1.4", "127.0.1.5")
HONEST = "127.0.2.9"
FLOOD = 60
QUIET = 0.5
"""Seconds without a reply after which a client takes the rest as dropped."""


@attrs.frozen
class Server:
    stats: ServeStats
    port: int


@contextlib.asynccontextmanager
async def serving(slip: int) -> AsyncIterator[Server]:
    """Both loops on 127.0.0.1, the UDP one rate-limited at ``RATE`` with ``slip``."""
    holder = IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, "example.com."))
    stats = ServeStats()
    limiter = RateLimiter(RrlSettings(rate=RATE, slip=slip, table_size=4096), bytes(16))
    # One port for both, chosen so that neither is taken (an ephemeral UDP port may be
    # some client's TCP port at that moment).
    pair = bind_dns_pair(socket.AF_INET, "127.0.0.1", 0)
    with (
        trio.socket.from_stdlib_socket(pair[0]) as udp,
        trio.socket.from_stdlib_socket(pair[1]) as tcp,
    ):
        port = udp.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(serve_udp, udp, holder, stats=stats, limiter=limiter)
            )
            nursery.start_soon(functools.partial(serve_tcp, tcp, holder, stats=stats))
            yield Server(stats, port)
            nursery.cancel_scope.cancel()


def flood(
    port: int, sources: tuple[str, ...], count: int, name: str = "www.example.com."
) -> list[dns.message.Message]:
    """Send ``count`` queries for ``name`` A round the ``sources``, then read every
    reply that comes until none has for ``QUIET`` seconds."""
    sockets = []
    try:
        for source in sources:
            client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sockets.append(client)
            client.bind((source, 0))
        for n in range(count):
            query = dns.message.make_query(name, "A", use_edns=False)
            sockets[n % len(sockets)].sendto(query.to_wire(), ("127.0.0.1", port))
        replies: list[dns.message.Message] = []
        for _ in range(count):
            readable, _, _ = select.select(sockets, [], [], QUIET)
            if not readable:
                break
            replies.extend(dns.message.from_wire(client.recv(65535)) for client in readable)
        return replies
    finally:
        for client in sockets:
            client.close()


def answered(replies: list[dns.message.Message]) -> list[dns.message.Message]:
    return [r for r in replies if not r.flags & dns.flags.TC and r.answer]


def truncated(replies: list[dns.message.Message]) -> list[dns.message.Message]:
    return [r for r in replies if r.flags & dns.flags.TC and not r.answer]


async def test_a_flood_from_one_prefix_is_capped_while_another_prefix_is_answered(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with serving(slip=2) as server:
        replies = await trio.to_thread.run_sync(flood, server.port, VICTIMS, FLOOD)
        honest = await trio.to_thread.run_sync(flood, server.port, (HONEST,), 5)
    # The victim's prefix gets its burst of answers, then every second limited response
    # as a bare truncated reply; the rest are dropped. The other prefix is untouched.
    assert len(answered(replies)) == RATE
    assert len(truncated(replies)) == (FLOOD - RATE) // 2
    assert len(replies) == RATE + (FLOOD - RATE) // 2
    assert len(answered(honest)) == 5
    assert server.stats.snapshot().rate_limited == {
        "dropped": (FLOOD - RATE) - (FLOOD - RATE) // 2,
        "slipped": (FLOOD - RATE) // 2,
    }


async def test_slip_zero_drops_everything_over_the_rate(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with serving(slip=0) as server:
        replies = await trio.to_thread.run_sync(flood, server.port, VICTIMS[:1], FLOOD)
    assert len(replies) == len(answered(replies)) == RATE
    assert server.stats.snapshot().rate_limited == {"dropped": FLOOD - RATE, "slipped": 0}


def ask_with_fallback(port: int, source: str) -> tuple[dns.message.Message, bool]:
    query = dns.message.make_query("www.example.com.", "A")
    return dns.query.udp_with_fallback(
        query, "127.0.0.1", timeout=5, port=port, source=source
    )


def dig(port: int, source: str) -> str:
    dig_program = shutil.which("dig")
    assert dig_program is not None, "dig (bind9-dnsutils) is needed"
    command = [dig_program, "@127.0.0.1", "-p", str(port), "-b", source, "+time=3",
               "+tries=1", "+noedns", "www.example.com", "A"]
    return subprocess.run(command, capture_output=True, text=True, timeout=20, check=True).stdout


async def test_a_limited_client_told_tc_retries_over_tcp_and_is_answered(
    mock_clock: trio.testing.MockClock,
) -> None:
    victim = VICTIMS[0]
    async with serving(slip=1) as server:
        await trio.to_thread.run_sync(flood, server.port, (victim,), RATE)
        response, used_tcp = await trio.to_thread.run_sync(ask_with_fallback, server.port, victim)
        output = await trio.to_thread.run_sync(dig, server.port, victim)
    assert used_tcp
    assert response.rcode() == dns.rcode.NOERROR
    assert [str(rrset.name) for rrset in response.answer] == ["www.example.com."]
    assert "Truncated, retrying in TCP mode." in output
    assert "192.0.2.80" in output
    assert server.stats.snapshot().rate_limited == {"dropped": 0, "slipped": 2}


@pytest.mark.parametrize("slip", [1, 2])
async def test_without_a_flood_nobody_is_limited(
    mock_clock: trio.testing.MockClock, slip: int
) -> None:
    async with serving(slip=slip) as server:
        replies = await trio.to_thread.run_sync(flood, server.port, VICTIMS, RATE)
    assert len(answered(replies)) == RATE
    assert server.stats.snapshot().rate_limited == {"dropped": 0, "slipped": 0}


def test_the_resident_limits_as_its_site_facts_say_and_counts_what_it_held_back(
    resident_harness: Harness, zone_dsn: str
) -> None:
    facts = site_facts(zone_dsn, VALIS_RRL_RATE="5", VALIS_RRL_SLIP="1")
    resident = resident_harness.start(make_state_dir(resident_harness.workdir), facts)
    resident.wait_ready()
    assert "response rate limiting: 5 responses/s per IPv4 /24" in resident.stderr()
    assert resident.port is not None
    replies = flood(resident.port, VICTIMS, 40, "www.example.test.")
    # Slip 1: every response over the rate is a TC reply, so every query gets one; the
    # victim's 40 queries in a moment are far over 5 a second.
    assert len(replies) == 40
    slipped = len(truncated(replies))
    assert slipped >= 1
    assert len(answered(replies)) == 40 - slipped
    # Another prefix (127.0.0.1) is answered.
    assert resident.ask("www.example.test.").answer
    metrics = resident.fabric_get("/metrics")[1].decode()
    assert f'valis_dns_rate_limited_total{{action="slipped"}} {slipped}' in metrics
    assert 'valis_dns_rate_limited_total{action="dropped"} 0' in metrics


WILD_TEXT = ZONE_TEXT + "*.w IN A 192.0.2.99\n"
EXEMPT = ("127.0.3.2", "127.0.3.3")


@attrs.frozen
class Limited:
    stats: ServeStats
    port: int
    udp: LimitedUdp


@contextlib.asynccontextmanager
async def serving_limited(settings: RrlSettings | None) -> AsyncIterator[Limited]:
    """The UDP loop under a replaceable limiter, on 127.0.0.1, serving a zone with a
    wildcard (``*.w.example.com``)."""
    holder = IndexHolder(ZoneIndex.from_zone_text(WILD_TEXT, "example.com."))
    stats = ServeStats()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.bind(("127.0.0.1", 0))
        udp = LimitedUdp(sock, holder, settings, stats=stats)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(udp.run)
            await trio.testing.wait_all_tasks_blocked()
            yield Limited(stats, sock.getsockname()[1], udp)
            nursery.cancel_scope.cancel()


def flood_names(port: int, source: str, names: list[str]) -> list[dns.message.Message]:
    """One query for each of ``names`` from ``source``; every reply that comes."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.bind((source, 0))
        for name in names:
            client.sendto(dns.message.make_query(name, "A", use_edns=False).to_wire(),
                          ("127.0.0.1", port))
        replies = []
        for _ in names:
            readable, _, _ = select.select([client], [], [], QUIET)
            if not readable:
                break
            replies.append(dns.message.from_wire(client.recv(65535)))
        return replies


async def test_random_names_under_one_wildcard_are_one_bucket(
    mock_clock: trio.testing.MockClock,
) -> None:
    names = [f"r{n}x.w.example.com." for n in range(FLOOD)]
    async with serving_limited(RrlSettings(rate=RATE, slip=0, table_size=4096)) as server:
        replies = await trio.to_thread.run_sync(flood_names, server.port, VICTIMS[0], names)
    assert len(replies) == len(answered(replies)) == RATE
    assert all(str(r.answer[0].name).endswith(".w.example.com.") for r in replies)
    assert server.stats.snapshot().rate_limited == {"dropped": FLOOD - RATE, "slipped": 0}


async def test_an_exempt_prefix_is_answered_in_full_while_others_are_limited(
    mock_clock: trio.testing.MockClock,
) -> None:
    settings = RrlSettings(rate=RATE, slip=0, table_size=4096,
                           exempt=(ipaddress.IPv4Network("127.0.3.0/24"),))
    async with serving_limited(settings) as server:
        exempt = await trio.to_thread.run_sync(flood, server.port, EXEMPT, FLOOD)
        victim = await trio.to_thread.run_sync(flood, server.port, VICTIMS, FLOOD)
    assert len(answered(exempt)) == FLOOD
    assert len(answered(victim)) == len(victim) == RATE


async def test_a_new_limiter_applies_to_the_next_query_and_none_turns_limiting_off(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with serving_limited(None) as server:
        unlimited = await trio.to_thread.run_sync(flood, server.port, VICTIMS, FLOOD)
        await server.udp.replace(RrlSettings(rate=RATE, slip=0, table_size=4096))
        limited = await trio.to_thread.run_sync(flood, server.port, VICTIMS, FLOOD)
        await server.udp.replace(None)
        again = await trio.to_thread.run_sync(flood, server.port, VICTIMS, FLOOD)
        assert server.udp.restarts == 2
    assert len(answered(unlimited)) == FLOOD
    assert len(answered(limited)) == len(limited) == RATE
    assert len(answered(again)) == FLOOD
    assert server.stats.snapshot().rate_limited == {"dropped": FLOOD - RATE, "slipped": 0}


def limits_shown(resident: Resident) -> tuple[int, list[str] | None]:
    """The rate the metrics show, and the exempt list the status shows (None: off)."""
    metrics = resident.fabric_get("/metrics")[1].decode()
    rate = next(int(line.split()[1]) for line in metrics.splitlines()
                if line.startswith("valis_dns_rate_limit "))
    shown = resident.status()["dns"]["rate_limiting"]
    return rate, None if shown is None else shown["exempt"]


def set_facts(resident: Resident, dsn: str, *facts: str) -> None:
    done = run_as(RUN_USER, [
        "valis", "site-facts", "set", "node-a", *facts,
        "--state-dir", str(resident.state_dir), "--dsn", dsn,
    ])
    assert done.returncode == 0, done.stderr


def test_the_resident_spares_its_exempt_prefix_and_applies_new_limits_on_a_reload(
    resident_harness: Harness, zone_dsn: str
) -> None:
    facts = site_facts(zone_dsn, VALIS_RRL_RATE="5", VALIS_RRL_SLIP="1",
                       VALIS_RRL_EXEMPT="127.0.3.0/24")
    resident = resident_harness.start(make_state_dir(resident_harness.workdir), facts)
    resident.wait_ready()
    assert "exempt 127.0.3.0/24" in resident.stderr()
    assert limits_shown(resident) == (5, ["127.0.3.0/24"])
    assert resident.port is not None
    # Slip 1: every query gets a reply, limited ones TC. The exempt prefix gets answers.
    exempt = flood(resident.port, EXEMPT, 40, "www.example.test.")
    assert len(answered(exempt)) == 40
    limited = flood(resident.port, VICTIMS, 40, "www.example.test.")
    assert len(limited) == 40
    assert truncated(limited)

    set_facts(resident, zone_dsn, "VALIS_RRL_RATE=0")
    resident.reload("reload: response rate limiting: off")
    assert limits_shown(resident) == (0, None)
    # A prefix with fresh buckets either way, so only the limiter's absence answers all.
    unlimited = flood(resident.port, ("127.0.4.2", "127.0.4.3"), 40, "www.example.test.")
    assert len(answered(unlimited)) == 40

    set_facts(resident, zone_dsn, "VALIS_RRL_RATE=5", "VALIS_RRL_EXEMPT=127.0.4.0/24")
    resident.reload("reload: response rate limiting: 5 responses/s")
    assert "exempt 127.0.4.0/24" in resident.stderr()
    assert limits_shown(resident) == (5, ["127.0.4.0/24"])
    again = flood(resident.port, VICTIMS, 40, "www.example.test.")
    assert len(again) == 40
    assert truncated(again)
    assert len(answered(flood(resident.port, ("127.0.4.2",), 40, "www.example.test."))) == 40
    # The 127.0.3.0/24 prefix is exempt no more.
    assert truncated(flood(resident.port, EXEMPT, 40, "www.example.test."))
    slipped = resident.fabric_get("/metrics")[1].decode()
    assert 'valis_dns_rate_limited_total{action="dropped"} 0' in slipped
    assert resident.proc.poll() is None


def test_valis_serve_limits_as_its_flags_say_and_spares_its_exempt_prefix(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "serve.log", extra=(
        "--rrl-rate", "5", "--rrl-slip", "1", "--rrl-exempt", "127.0.3.0/24,2001:db8::/32"))
    try:
        assert "response rate limiting: 5 responses/s" in server.log_text()
        assert "exempt 127.0.3.0/24, 2001:db8::/32" in server.log_text()
        exempt = flood(server.port, EXEMPT, 40)
        limited = flood(server.port, VICTIMS, 40)
    finally:
        assert stop_server(server) == 0
    assert len(answered(exempt)) == 40
    assert len(limited) == 40
    slipped = len(truncated(limited))
    assert slipped >= 1
    assert f"rate limiting dropped 0 and slipped {slipped}" in server.log_text()


@pytest.mark.parametrize(("flags", "said"), [
    (("--rrl-slip", "1"), "--rrl-slip tunes response rate limiting, which is off without"),
    (("--rrl-rate", "5", "--rrl-exempt", "192.0.2.1/24"), "did you mean 192.0.2.0/24?"),
    (("--rrl-rate", "-3"), "--rrl-rate '-3' is not a whole number from 0 to 1000000"),
])
def test_valis_serve_refuses_a_rate_limit_flag_it_cannot_use_naming_it(
    flags: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        [*valis_command(), "serve", "--zone", str(ZONE_FILE), "--listen", "127.0.0.1:0",
         *flags], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


async def test_a_new_limiter_applies_to_every_dns_worker(
    mock_clock: trio.testing.MockClock,
) -> None:
    # Two workers on one SO_REUSEPORT group, each its own limiter: a replacement restarts
    # both under the new settings, and a flood from one source port (one flow: one
    # socket) is capped at the rate wherever the kernel put it.
    holder = IndexHolder(ZoneIndex.from_zone_text(WILD_TEXT, "example.com."))
    (first, second), tcp = listen.bind_dns_sockets(socket.AF_INET, "127.0.0.1", 0, 2)
    tcp.close()
    with trio.socket.from_stdlib_socket(first) as one, \
            trio.socket.from_stdlib_socket(second) as two:
        workers = LimitedUdpWorkers([LimitedUdp(sock, holder, None, stats=ServeStats())
                                     for sock in (one, two)])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workers.run)
            await trio.testing.wait_all_tasks_blocked()
            new = RrlSettings(rate=RATE, slip=0, table_size=4096)
            await workers.replace(new)
            assert [worker.settings for worker in workers.workers] == [new, new]
            assert [worker.restarts for worker in workers.workers] == [1, 1]
            assert workers.settings == new
            port = one.getsockname()[1]
            limited = await trio.to_thread.run_sync(flood, port, VICTIMS[:1], FLOOD)
            nursery.cancel_scope.cancel()
    assert len(answered(limited)) == RATE
    dropped = sum(stats.snapshot().rate_limited["dropped"] for stats in workers.stats)
    assert dropped == FLOOD - RATE

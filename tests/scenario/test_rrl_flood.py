"""Response rate limiting on loopback: a flood of queries from one victim prefix
(several source addresses in 127.0.1.0/24; a spoofed flood looks the same to the
server) is capped at the bucket's burst while a client from another prefix is answered
in full, and the victim's own resolver, told TC by a slipped reply, retries over TCP and
gets its answer. The serve loops run under trio's mock clock, which stands still, so no
bucket refills during a test and every count is exact; clients run in threads with
their own socket timeouts. Last, the resident (as the run account, its database the
private cluster) turns limiting on from its site facts and counts what it held back."""

from __future__ import annotations

import contextlib
import functools
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

from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from valis_core.dns.rrl import RateLimiter, RrlSettings
from valis_core.dns.serve import ServeStats, serve_tcp, serve_udp
from valis_core.dns.snapshot import IndexHolder
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
    with (
        trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
    ):
        await udp.bind(("127.0.0.1", 0))
        port = udp.getsockname()[1]
        await tcp.bind(("127.0.0.1", port))
        tcp.listen(16)
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
        replies = []
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

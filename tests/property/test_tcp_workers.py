"""TCP's compiled path against its oracle, ``answer`` over TCP (issue 29): a connection's
queries the table holds are answered in C (``stream_serve``, on the trio thread or on
worker threads), and the connection goes back to Python at the first query C cannot
answer. Over generated zones and queries, pipelined on one connection and cut into
segments anywhere, every response is byte for byte what ``answer`` gives, each exactly
once and in order, however hits and misses interleave; a swap under pipelined load gives
each response from one version or the next, never anything else; malformed frames and
random bytes never stop the server; and C does answer what the table holds."""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import AsyncIterator

import attrs
import dns.message
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.property.random_zones import queries_and_floods, zones
from tests.property.two_zones import EXAMPLE_ROWS
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.serve import ServeStats, serve_tcp
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

pytestmark = pytest.mark.usefixtures("compiled")  # the path under test is the compiled one

TCP = Transport.TCP
ROUNDS = 3
"""Each stream is sent this often: the first teaches the table, the others are C's."""
LIMIT = 10.0
"""Seconds a response may take on a loaded machine before a test gives up on it."""


@attrs.frozen
class Served:
    address: tuple[str, int]
    stats: ServeStats


@contextlib.asynccontextmanager
async def tcp_served(
    holder: IndexHolder, workers: int, write_timeout: float = 5.0
) -> AsyncIterator[Served]:
    """``serve_tcp`` over ``holder`` on 127.0.0.1, its compiled path on ``workers``
    worker threads (0: on the trio thread), until the block ends."""
    stats = ServeStats()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(
                serve_tcp, listener, holder, stats=stats, workers=workers,
                write_timeout=write_timeout))
            yield Served(listener.getsockname(), stats)
            nursery.cancel_scope.cancel()


def framed(wires: list[bytes]) -> bytes:
    return b"".join(len(wire).to_bytes(2, "big") + wire for wire in wires)


async def pipelined(
    address: tuple[str, int], stream_bytes: bytes, cuts: list[int], expected: int
) -> list[bytes]:
    """Send ``stream_bytes`` on one connection, in segments cut at ``cuts``, and read
    ``expected`` framed responses; then check nothing more comes before the close."""
    async with await trio.open_tcp_stream(*address) as stream:
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        at = 0
        for cut in [*sorted(set(cuts)), len(stream_bytes)]:
            if cut > at:
                await stream.send_all(stream_bytes[at:cut])
                at = cut
                await trio.sleep(0)
        responses = await read_frames(stream, expected)
        await stream.send_eof()
        with trio.fail_after(LIMIT):
            assert await stream.receive_some(65535) == b""  # nothing answered twice
    return responses


async def read_frames(stream: trio.SocketStream, count: int) -> list[bytes]:
    buffer = bytearray()
    frames: list[bytes] = []
    with trio.fail_after(LIMIT):
        while len(frames) < count:
            while len(buffer) >= 2 and len(buffer) >= 2 + (buffer[0] << 8 | buffer[1]):
                size = buffer[0] << 8 | buffer[1]
                frames.append(bytes(buffer[2:2 + size]))
                del buffer[:2 + size]
            if len(frames) >= count:
                break
            chunk = await stream.receive_some(65535)
            if not chunk:
                raise ConnectionError(f"closed after {len(frames)} of {count} responses")
            buffer += chunk
    assert not buffer
    return frames


@settings(max_examples=scaled(0.3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_response_over_tcp_is_byte_for_byte_what_answer_gives(data: st.DataObject) -> None:
    rows = data.draw(zones())
    wires = data.draw(queries_and_floods(rows, 8))
    wires = data.draw(st.permutations(wires))
    oracle = Snapshot(ZoneIndex.from_records(rows))  # a snapshot of its own: its cache too
    expected = [response for wire in wires
                if (response := answer(oracle, wire, transport=TCP)) is not None]
    stream_bytes = framed(wires)
    cuts = data.draw(st.lists(st.integers(0, len(stream_bytes)), max_size=4))
    workers = data.draw(st.sampled_from([0, 2]))
    holder = IndexHolder(ZoneIndex.from_records(rows))

    async def run() -> list[list[bytes]]:
        async with tcp_served(holder, workers) as served:
            return [await pipelined(served.address, stream_bytes, cuts, len(expected))
                    for _ in range(ROUNDS)]

    for responses in trio.run(run):
        assert responses == expected


@pytest.mark.parametrize("workers", [0, 2])
async def test_a_miss_amid_pipelined_hits_is_answered_once_and_in_order(workers: int) -> None:
    """Hits C answers, then a question never asked (Python's), then hits again, in one
    write: every response once, in order, C answering the hits."""
    rows = [*EXAMPLE_ROWS, *(RecordRow("example.com.", f"h{i}.example.com.", "A", 300,
                                       f"192.0.2.{i}") for i in range(1, 30))]
    oracle = Snapshot(ZoneIndex.from_records(rows))
    hits = [dns.message.make_query(f"h{i}.example.com.", "A").to_wire() for i in range(1, 11)]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    async with tcp_served(holder, workers) as served:
        taught = [answer(oracle, wire, transport=TCP) for wire in hits]
        assert await pipelined(served.address, framed(hits), [], len(hits)) == taught
        before = served.stats.tcp_compiled
        for i in range(11, 30):
            miss = dns.message.make_query(f"h{i}.example.com.", "A").to_wire()
            wires = [*hits[:5], miss, *hits[5:]]
            expected = [answer(oracle, wire, transport=TCP) for wire in wires]
            assert await pipelined(served.address, framed(wires), [], len(wires)) == expected
        assert served.stats.tcp_compiled - before >= 19 * len(hits)


@pytest.mark.parametrize("workers", [0, 2])
async def test_more_pipelined_queries_than_a_turn_are_each_answered_once(workers: int) -> None:
    rows = EXAMPLE_ROWS
    oracle = Snapshot(ZoneIndex.from_records(rows))
    wire = dns.message.make_query("www.example.com.", "A").to_wire()
    wires = [bytes([i >> 8, i & 0xFF]) + wire[2:] for i in range(500)]  # IDs 0..499
    expected = [answer(oracle, query, transport=TCP) for query in wires]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    async with tcp_served(holder, workers) as served:
        for _ in range(ROUNDS):
            assert await pipelined(served.address, framed(wires), [], len(wires)) == expected
        assert served.stats.tcp_compiled > 0


@pytest.mark.parametrize("workers", [0, 2])
async def test_a_swap_under_pipelined_load_never_mixes_versions(workers: int) -> None:
    """Clients pipeline the same questions while the trio thread swaps between two
    versions of the zone: each response is one version's answer, byte for byte."""
    def version(last: int) -> list[RecordRow]:
        return [*EXAMPLE_ROWS, *(RecordRow("example.com.", f"h{i}.example.com.", "A", 300,
                                           f"192.0.2.{last + i}") for i in range(8))]

    indexes = [ZoneIndex.from_records(version(10)), ZoneIndex.from_records(version(100))]
    wires = [dns.message.make_query(f"h{i}.example.com.", "A").to_wire() for i in range(8)]
    allowed = [{answer(Snapshot(index), wire, transport=TCP) for index in indexes}
               for wire in wires]
    holder = IndexHolder(indexes[0])
    answered: list[list[bytes]] = []

    async def client(address: tuple[str, int]) -> None:
        for _ in range(20):
            answered.append(await pipelined(address, framed(wires * 8), [], 8 * len(wires)))

    async with tcp_served(holder, workers) as served:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(client, served.address)
            for swap in range(200):
                holder.swap(indexes[(swap + 1) % 2])
                await trio.sleep(0.001)
        assert served.stats.tcp_compiled > 0
    for responses in answered:
        for at, response in enumerate(responses):
            assert response in allowed[at % len(wires)]


@settings(max_examples=scaled(0.3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.lists(st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=30).map(lambda body: len(body).to_bytes(2, "big") + body),
    st.integers(0, 11).map(lambda size: size.to_bytes(2, "big") + bytes(size)),
), max_size=6), workers=st.sampled_from([0, 2]))
def test_malformed_frames_and_random_bytes_never_stop_the_server(
    garbage: list[bytes], workers: int
) -> None:
    wire = dns.message.make_query("www.example.com.", "A").to_wire()
    expected = answer(Snapshot(ZoneIndex.from_records(EXAMPLE_ROWS)), wire, transport=TCP)
    holder = IndexHolder(ZoneIndex.from_records(EXAMPLE_ROWS))

    async def run() -> None:
        async with tcp_served(holder, workers) as served:
            await pipelined(served.address, framed([wire]), [], 1)  # taught: C's next
            async with await trio.open_tcp_stream(*served.address) as stream:
                for chunk in garbage:
                    try:
                        await stream.send_all(chunk)
                    except trio.BrokenResourceError:
                        break
            assert await pipelined(served.address, framed([wire] * 3), [], 3) == [expected] * 3

    trio.run(run)


@pytest.mark.parametrize("workers", [0, 2])
async def test_a_flood_of_missing_names_is_answered_as_answer_mostly_in_c(workers: int) -> None:
    """Random names beneath a zone, pipelined: each NXDOMAIN is ``answer``'s, and once
    the zone's negative answer is learnt C builds most of them (on the trio thread, with
    the GIL, the call after a query a worker gave back)."""
    rows = EXAMPLE_ROWS
    oracle = Snapshot(ZoneIndex.from_records(rows))
    wires = [dns.message.make_query(f"flood{i}.example.com.", "A").to_wire() for i in range(400)]
    expected = [answer(oracle, wire, transport=TCP) for wire in wires]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    async with tcp_served(holder, workers) as served:
        assert await pipelined(served.address, framed(wires), [], len(wires)) == expected
        assert served.stats.tcp_compiled > len(wires) // 2


@pytest.mark.parametrize("workers", [0, 2])
async def test_a_client_that_never_reads_is_closed_at_the_write_timeout(workers: int) -> None:
    """Hits pipelined by a client that reads nothing: once the socket takes no more, what
    C could not write is Python's to finish, within the write timeout, after which the
    connection is closed (counted) while another client is answered meanwhile."""
    rows = EXAMPLE_ROWS
    wire = dns.message.make_query("www.example.com.", "A").to_wire()
    expected = answer(Snapshot(ZoneIndex.from_records(rows)), wire, transport=TCP)
    holder = IndexHolder(ZoneIndex.from_records(rows))
    async with tcp_served(holder, workers, write_timeout=0.5) as served:
        assert await pipelined(served.address, framed([wire]), [], 1) == [expected]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stuck:
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.connect(served.address)
            stuck.setblocking(False)
            flood = framed([wire] * 2000)
            sent = 0
            with trio.fail_after(LIMIT):
                while not served.stats.tcp_send_failures:
                    assert await pipelined(served.address, framed([wire]), [], 1) == [expected]
                    try:
                        sent += stuck.send(flood[sent % len(flood):])
                    except BlockingIOError:
                        pass
                    except OSError:  # closed by the server: the write timed out
                        break
                    await trio.sleep(0.05)
                while not served.stats.tcp_send_failures:  # the close came first
                    await trio.sleep(0.01)
        assert served.stats.tcp_send_failures == 1
        assert served.stats.tcp_compiled > 0

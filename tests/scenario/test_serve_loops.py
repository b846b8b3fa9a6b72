"""The trio serve loops in-process over real loopback sockets: swapping the index while
serving, TCP idle timeouts, the connection cap closing the longest-idle connection, a
pipelining client yielding to others, an engine failure on one packet, a TCP drain
handing over to a successor on the same socket, and clean cancellation."""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import AsyncIterator

import dns.flags
import dns.message
import dns.rcode
import pytest
import trio
import trio.testing

from tests.scenario.loopback_serve import (
    LIMIT,
    Loopback,
    index_with_www,
    serving,
    tcp_receive_frame,
    www_query,
)
from tests.scenario.operator_state_helpers import addresses
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.serve import (
    TCP_BATCH,
    TCP_TURNS,
    UDP_BATCH,
    ServeStats,
    TcpDrain,
    serve_tcp,
    serve_udp,
)
from valis_core.dns.zone import ZoneIndex


async def udp_ask(address: tuple[str, int], wire: bytes) -> dns.message.Message:
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        await client.sendto(wire, address)
        with trio.fail_after(LIMIT):
            data = await client.recv(65535)
    return dns.message.from_wire(data)


async def receive_eof(stream: trio.SocketStream) -> bytes:
    with trio.fail_after(LIMIT):
        return await stream.receive_some(65535)


@pytest.fixture(params=[0, 2], ids=["tcp-on-trio", "tcp-workers"])
async def loopback(request: pytest.FixtureRequest) -> AsyncIterator[Loopback]:
    """The loops, TCP's compiled path on the trio thread or on two worker threads: the
    TCP limits hold either way."""
    async with serving(idle_timeout=0.3, max_connections=2, tcp_workers=request.param) as loop:
        yield loop


async def test_the_next_answer_after_a_swap_comes_from_the_new_index(loopback: Loopback) -> None:
    before = await udp_ask(loopback.udp_address, www_query().to_wire())
    old = loopback.holder.swap(index_with_www("198.51.100.80"))
    after = await udp_ask(loopback.udp_address, www_query().to_wire())
    async with await trio.open_tcp_stream(*loopback.tcp_address) as stream:
        wire = www_query().to_wire()
        await stream.send_all(len(wire).to_bytes(2, "big") + wire)
        over_tcp = dns.message.from_wire(await tcp_receive_frame(stream))
    assert addresses(before) == {"192.0.2.80"}
    assert addresses(after) == {"198.51.100.80"}
    assert addresses(over_tcp) == {"198.51.100.80"}
    assert old is not loopback.holder.current
    assert loopback.holder.swaps == 1


async def test_responses_are_counted_by_transport_and_rcode(loopback: Loopback) -> None:
    await udp_ask(loopback.udp_address, www_query().to_wire())
    outside = dns.message.make_query("www.example.org.", "A", use_edns=False)
    await udp_ask(loopback.udp_address, outside.to_wire())
    async with await trio.open_tcp_stream(*loopback.tcp_address) as stream:
        wire = www_query().to_wire()
        await stream.send_all(len(wire).to_bytes(2, "big") + wire)
        await tcp_receive_frame(stream)
    expected = {("udp", "NOERROR"): 1, ("udp", "REFUSED"): 1, ("tcp", "NOERROR"): 1}
    # a TCP worker's counts reach the stats when its call returns, just after the send
    with trio.move_on_after(LIMIT):
        while loopback.stats.snapshot().responses != expected:
            await trio.sleep(0.01)
    counts = loopback.stats.snapshot()
    assert counts.responses == expected
    assert counts.tcp_accepted == 1


async def test_a_dropped_datagram_is_counted_and_the_next_is_answered(loopback: Loopback) -> None:
    wire = www_query().to_wire()
    as_response = wire[:2] + bytes([wire[2] | 0x80]) + wire[3:]
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        await client.sendto(as_response, loopback.udp_address)
    response = await udp_ask(loopback.udp_address, wire)
    assert addresses(response) == {"192.0.2.80"}
    assert loopback.stats.snapshot().dropped["udp"] == 1


async def test_a_tcp_client_that_stalls_mid_query_is_closed_after_the_idle_timeout(
    loopback: Loopback,
) -> None:
    async with await trio.open_tcp_stream(*loopback.tcp_address) as stream:
        await stream.send_all(b"\x00")
        assert await receive_eof(stream) == b""
    assert loopback.stats.tcp_idle_closed == 1


async def test_at_the_cap_a_new_client_is_served_and_the_longest_idle_is_closed(
    loopback: Loopback,
) -> None:
    wire = www_query().to_wire()
    framed = len(wire).to_bytes(2, "big") + wire
    first = await trio.open_tcp_stream(*loopback.tcp_address)
    second = await trio.open_tcp_stream(*loopback.tcp_address)
    async with first, second:
        await first.send_all(framed)
        await tcp_receive_frame(first)
        await second.send_all(framed)
        await tcp_receive_frame(second)
        async with await trio.open_tcp_stream(*loopback.tcp_address) as third:
            await third.send_all(framed)
            assert addresses(dns.message.from_wire(await tcp_receive_frame(third))) == {
                "192.0.2.80"
            }
            assert await receive_eof(first) == b""
            await second.send_all(framed)
            assert addresses(dns.message.from_wire(await tcp_receive_frame(second))) == {
                "192.0.2.80"
            }
    assert loopback.stats.tcp_refused == 0
    assert loopback.stats.tcp_accepted == 3


async def test_under_pressure_an_idle_connection_gets_the_shorter_timeout() -> None:
    wire = www_query().to_wire()
    framed = len(wire).to_bytes(2, "big") + wire
    # Far longer than the test may take: only the shorter timeout can close it.
    async with serving(idle_timeout=10 * LIMIT, busy_idle_timeout=0.2, max_connections=4,
                       tcp_workers=2) as loop:
        quiet = await trio.open_tcp_stream(*loop.tcp_address)
        async with quiet:
            await quiet.send_all(framed)
            await tcp_receive_frame(quiet)
            others = [await trio.open_tcp_stream(*loop.tcp_address) for _ in range(2)]
            try:
                assert await receive_eof(quiet) == b""
            finally:
                for stream in others:
                    await stream.aclose()
    assert loop.stats.tcp_idle_closed >= 1
    assert loop.stats.tcp_refused == 0


async def test_a_drain_answers_its_connections_and_leaves_new_ones_to_a_successor() -> None:
    """A stopping (or handing-over) resident drains TCP first: a connection it accepted
    before the drain, whose query comes after the drain began, is answered and then
    closed once idle, not reset; the drain returns then. A connection made after the
    drain began waits in the listening socket's queue, and a successor serving the same
    socket answers it."""
    wire = www_query().to_wire()
    framed = len(wire).to_bytes(2, "big") + wire
    holder = IndexHolder(index_with_www("192.0.2.80"))
    stats = ServeStats()
    drain = TcpDrain()
    drained = trio.Event()

    async def run_drain() -> None:
        await drain()
        drained.set()

    with trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        await tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        address = tcp.getsockname()
        async with trio.open_nursery() as nursery:
            old = trio.CancelScope()

            async def serve_old() -> None:
                with old:
                    await serve_tcp(tcp, holder, stats=stats, drain=drain)

            nursery.start_soon(serve_old)
            early = await trio.open_tcp_stream(*address)
            with trio.fail_after(LIMIT):
                while stats.tcp_accepted < 1:
                    await trio.sleep(0.002)
            nursery.start_soon(run_drain)
            await trio.testing.wait_all_tasks_blocked()  # the drain stopped the accepting
            late = await trio.open_tcp_stream(*address)
            async with early, late:
                await early.send_all(framed)
                assert addresses(dns.message.from_wire(await tcp_receive_frame(early))) == {
                    "192.0.2.80"
                }
                assert await receive_eof(early) == b""
                with trio.fail_after(LIMIT):
                    await drained.wait()
                old.cancel()
                await late.send_all(framed)
                assert stats.tcp_accepted == 1  # the late one was left in the queue
                nursery.start_soon(functools.partial(serve_tcp, tcp, holder))
                assert addresses(dns.message.from_wire(await tcp_receive_frame(late))) == {
                    "192.0.2.80"
                }
            nursery.cancel_scope.cancel()


async def test_a_drain_of_a_loop_already_ended_returns_at_once() -> None:
    """A stop after a failure finds the TCP loop cancelled already: its drain has
    nothing to wait for (else each such stop would wait out the drain's bound), and a
    drain never taken by a loop neither."""
    holder = IndexHolder(index_with_www("192.0.2.80"))
    drain = TcpDrain()
    with trio.fail_after(1.0):
        await TcpDrain()()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        await tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(serve_tcp, tcp, holder, drain=drain))
            async with await trio.open_tcp_stream(*tcp.getsockname()):
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
    with trio.fail_after(1.0):
        await drain()


async def test_one_connection_pipelining_many_queries_yields_to_other_clients() -> None:
    """A client writes 2000 queries in one go; while the server works through them, a
    UDP query and another TCP client's query arrive. Both are answered after a few of
    the pipelined queries, not after the whole read."""
    pipelined = 2000
    flood = dns.message.make_query("flood.example.com.", "A", use_edns=False).to_wire()
    honest = www_query().to_wire()
    order: list[str] = []
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp_client,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp_client,
    ):

        def recording(index: Snapshot | ZoneIndex, query: bytes, *, transport: Transport
                ) -> bytes | None:
            if b"flood" in query:
                if not order:  # the first pipelined query: the others ask now
                    udp_client.sendto(honest, udp_address)
                    tcp_client.sendall(len(honest).to_bytes(2, "big") + honest)
                order.append("flood")
            else:
                order.append(transport.value)
            return answer(index, query, transport=transport)

        async with serving(answer_fn=recording) as loop:
            udp_address = loop.udp_address
            tcp_client.connect(loop.tcp_address)
            other = trio.SocketStream(trio.socket.from_stdlib_socket(tcp_client))
            udp = trio.socket.from_stdlib_socket(udp_client)
            async with await trio.open_tcp_stream(*loop.tcp_address) as flooder:
                await flooder.send_all((len(flood).to_bytes(2, "big") + flood) * pipelined)
                with trio.fail_after(LIMIT):
                    udp_answer = dns.message.from_wire(await udp.recv(65535))
                tcp_answer = dns.message.from_wire(await tcp_receive_frame(other))
                received = 0
                with trio.fail_after(LIMIT):
                    while received < pipelined:
                        chunk = await flooder.receive_some(65535)
                        assert chunk
                        received += chunk.count(b"\x05flood")
    assert addresses(udp_answer) == {"192.0.2.80"}
    assert addresses(tcp_answer) == {"192.0.2.80"}
    assert order.count("flood") == pipelined
    assert order.index("udp") < 300
    assert order.index("tcp") < 300


async def test_many_pipelining_clients_take_turns_so_each_round_stays_small() -> None:
    """Thirty clients each write 320 queries at once. A task passing one checkpoint per
    scheduler round marks the rounds; after its first batch a connection answers only
    when given a turn, so between two marks (the tail of one round and the head of the
    next) at most twice ``TCP_TURNS`` connections answer, not all thirty."""
    clients, each = 30, 320
    order: list[bytes] = []

    def recording(index: Snapshot | ZoneIndex, query: bytes, *, transport: Transport
            ) -> bytes | None:
        order.append(query[13 : 13 + query[12]])  # the client, from the first label
        return answer(index, query, transport=transport)

    async def drain(stream: trio.SocketStream) -> None:
        received = 0
        while received < each:
            chunk = await stream.receive_some(65535)
            assert chunk
            received += chunk.count(b"\x05flood")

    async def mark_rounds() -> None:
        for _ in range(1_000_000):
            if len(order) - order.count(b"") >= clients * each:
                return
            order.append(b"")
            await trio.lowlevel.checkpoint()

    async with serving(answer_fn=recording, max_connections=4 * clients) as loop:
        streams = [await trio.open_tcp_stream(*loop.tcp_address) for _ in range(clients)]
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(drain, stream)
                nursery.start_soon(mark_rounds)
                for number, stream in enumerate(streams):
                    name = f"c{number}.flood.example.com."
                    wire = dns.message.make_query(name, "A", use_edns=False).to_wire()
                    await stream.send_all((len(wire).to_bytes(2, "big") + wire) * each)
        for stream in streams:
            await stream.aclose()
    answered: dict[bytes, int] = {}
    between_marks: list[set[bytes]] = [set()]
    for client in order:
        if not client:
            between_marks.append(set())
            continue
        answered[client] = answered.get(client, 0) + 1
        if answered[client] > TCP_BATCH:  # past the batch answered right after the read
            between_marks[-1].add(client)
    assert sorted(answered.values()) == [each] * clients
    assert len(between_marks) > each // TCP_BATCH
    assert max(len(clients_seen) for clients_seen in between_marks) <= 2 * TCP_TURNS


async def test_an_engine_failure_on_one_query_is_counted_and_serving_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    poison = dns.message.make_query("poison.example.com.", "A", use_edns=False).to_wire()

    def fragile(index: Snapshot | ZoneIndex, query: bytes, *, transport: Transport
            ) -> bytes | None:
        if b"poison" in query:
            raise RuntimeError("engine bug")
        return answer(index, query, transport=transport)

    async with serving(answer_fn=fragile) as loop:
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            await client.sendto(poison, loop.udp_address)
        udp_answer = await udp_ask(loop.udp_address, www_query().to_wire())
        async with await trio.open_tcp_stream(*loop.tcp_address) as stream:
            wire = www_query().to_wire()
            await stream.send_all(
                len(poison).to_bytes(2, "big") + poison + len(wire).to_bytes(2, "big") + wire
            )
            tcp_answer = dns.message.from_wire(await tcp_receive_frame(stream))
    assert addresses(udp_answer) == {"192.0.2.80"}
    assert addresses(tcp_answer) == {"192.0.2.80"}
    assert loop.stats.snapshot().answer_errors == {"udp": 1, "tcp": 1}
    assert "answering a" in caplog.text


async def test_cancelling_the_loops_returns_promptly_and_leaves_the_sockets_to_the_caller(
) -> None:
    udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await udp.bind(("127.0.0.1", 0))
    tcp = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    holder = IndexHolder(index_with_www("192.0.2.80"))
    with udp, tcp:
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_udp, udp, holder)
                nursery.start_soon(serve_tcp, tcp, holder)
                await udp_ask(udp.getsockname(), www_query().to_wire())
                nursery.cancel_scope.cancel()
        response = await udp_ask_after_restart(udp, holder)
    assert response.rcode() == dns.rcode.NOERROR
    assert response.flags & dns.flags.AA


async def udp_ask_after_restart(
    udp: trio.socket.SocketType, holder: IndexHolder
) -> dns.message.Message:
    """The socket a cancelled loop leaves behind still works for a new loop."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_udp, udp, holder)
        response = await udp_ask(udp.getsockname(), www_query().to_wire())
        nursery.cancel_scope.cancel()
    return response


async def test_cancelling_the_udp_loop_during_a_flood_of_datagrams_returns() -> None:
    wire = www_query().to_wire()
    stop = threading.Event()

    def flood(address: tuple[str, int]) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for _ in range(2_000_000):
                if stop.is_set():
                    return
                sender.sendto(wire, address)

    holder = IndexHolder(index_with_www("192.0.2.80"))
    stats = ServeStats()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        await udp.bind(("127.0.0.1", 0))
        async with trio.open_nursery() as outer:
            outer.start_soon(trio.to_thread.run_sync, flood, udp.getsockname())
            try:
                with trio.fail_after(LIMIT):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(functools.partial(serve_udp, udp, holder, stats=stats))
                        while sum(stats.udp_rcodes) < 2 * UDP_BATCH:
                            await trio.sleep(0.01)
                        nursery.cancel_scope.cancel()
            finally:
                stop.set()
    assert stats.snapshot().responses[("udp", "NOERROR")] >= 2 * UDP_BATCH

"""The node's serve loops in-process on loopback, for tests that ask them over real
sockets without standing up a resident: ``serve_loops`` over a holder and transfers on a
port, ``serving`` over the example zone (``index_with_www``) with the TCP limits a test
chooses; ``free_port`` for a server another process binds."""

from __future__ import annotations

import contextlib
import functools
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import dns.message
import trio

from tests.dns_ask import question
from valis_core.dns.answer import answer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import AnswerFn, ServeStats, serve_tcp, serve_udp
from valis_core.dns.serve.transfer_serve import Transfers
from valis_core.dns.zone import ZoneIndex

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A port free on 127.0.0.1 for both UDP and TCP when asked, for a server another
    process binds later on one port for both. Drawn below the kernel's ephemeral range,
    so no client connection (nor any bind to port 0) can take it in the meantime; only
    another such draw could, and the draws are random."""
    low = int(_EPHEMERAL.read_text().split()[0]) if _EPHEMERAL.exists() else 32768
    draw = random.SystemRandom()
    for _ in range(200):
        port = draw.randrange(10000, max(low, 10001))
        with (
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        ):
            try:
                tcp.bind(("127.0.0.1", port))
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free for both UDP and TCP on 127.0.0.1")


@contextlib.asynccontextmanager
async def serve_loops(
    nursery: trio.Nursery, holder: IndexHolder, transfers: Transfers, port: int = 0
) -> AsyncIterator[tuple[int, int]]:
    """``serve_tcp`` and ``serve_udp`` over ``holder`` and ``transfers`` on 127.0.0.1
    ``port`` until the block ends; yields the TCP and the UDP port (with ``port`` 0,
    each one the system chose)."""
    listener = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await listener.bind(("127.0.0.1", port))
    listener.listen(16)
    udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await udp.bind(("127.0.0.1", port))
    scope = trio.CancelScope()

    async def serve() -> None:
        with listener, udp, scope:
            async with trio.open_nursery() as loops:
                loops.start_soon(lambda: serve_tcp(listener, holder, transfers=transfers))
                loops.start_soon(lambda: serve_udp(udp, holder, transfers=transfers))

    nursery.start_soon(serve)
    try:
        yield int(listener.getsockname()[1]), int(udp.getsockname()[1])
    finally:
        scope.cancel()


ZONE_TEXT = (Path(__file__).parent / "data" / "example.com.zone").read_text()
LIMIT = 10.0


def index_with_www(address: str) -> ZoneIndex:
    return ZoneIndex.from_zone_text(ZONE_TEXT.replace("192.0.2.80", address), "example.com.")


def www_query() -> dns.message.Message:
    return question("www.example.com.", "A")


async def tcp_receive_frame(stream: trio.SocketStream) -> bytes:
    """One DNS message off ``stream`` (the first of a reply, not pipelined ones)."""
    buffer = b""
    with trio.fail_after(LIMIT):
        while len(buffer) < 2 or len(buffer) < 2 + int.from_bytes(buffer[:2], "big"):
            chunk = await stream.receive_some(65535)
            if not chunk:
                raise ConnectionError("closed mid-message")
            buffer += chunk
    return buffer[2:]


async def counted(stats: ServeStats, responses: int) -> None:
    """Wait (at most ``LIMIT``) until ``stats`` counts ``responses`` UDP responses sent:
    the trio thread takes what the UDP loop's worker thread answered from its pump
    (every ``WORKER_COUNTS_S``), a moment after the answers went, with its count of C's
    answers (``udp_compiled``)."""
    with trio.fail_after(LIMIT):
        while sum(stats.udp_rcodes) < responses:
            await trio.sleep(0.002)


@attrs.frozen
class Loopback:
    holder: IndexHolder
    stats: ServeStats
    udp_address: tuple[str, int]
    tcp_address: tuple[str, int]


@contextlib.asynccontextmanager
async def serving(
    *,
    answer_fn: AnswerFn = answer,
    idle_timeout: float = 10.0,
    busy_idle_timeout: float = 1.0,
    max_connections: int = 16,
    tcp_workers: int = 0,
) -> AsyncIterator[Loopback]:
    """Both loops over fresh loopback sockets, cancelled and closed on exit; TCP's
    compiled path on ``tcp_workers`` worker threads (0: on the trio thread)."""
    holder = IndexHolder(index_with_www("192.0.2.80"))
    stats = ServeStats()
    with (
        trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
    ):
        await udp.bind(("127.0.0.1", 0))
        await tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(serve_udp, udp, holder, stats=stats, answer_fn=answer_fn)
            )
            nursery.start_soon(
                functools.partial(
                    serve_tcp,
                    tcp,
                    holder,
                    stats=stats,
                    answer_fn=answer_fn,
                    idle_timeout=idle_timeout,
                    busy_idle_timeout=busy_idle_timeout,
                    max_connections=max_connections,
                    workers=tcp_workers,
                )
            )
            yield Loopback(holder, stats, udp.getsockname(), tcp.getsockname())
            nursery.cancel_scope.cancel()

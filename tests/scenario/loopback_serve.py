"""The node's serve loops in-process on loopback, for tests that ask them over real
sockets without standing up a resident."""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import serve_tcp, serve_udp
from valis_core.dns.serve.transfer_serve import Transfers

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

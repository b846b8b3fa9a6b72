"""UDP workers in-process on loopback, for the tests of the worker drain: ``workers``
serves one holder on N sockets, each drained on a worker thread (``serve_udp`` with
``threaded``), sharing one port with ``SO_REUSEPORT`` as fulcrum binds them or each on a
port of its own (so a test reaches every worker for certain)."""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import AsyncIterator

import attrs
import trio

from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats, serve_udp

LIMIT = 10.0
"""Seconds a response may take on a loaded machine before a test gives up on it."""


@attrs.frozen
class Workers:
    addresses: tuple[tuple[str, int], ...]
    """Each worker's socket address (one address N times when they share a port)."""
    stats: tuple[ServeStats, ...]
    """Each worker's counts (complete once the block has ended)."""


def _bound(port: int, *, shared: bool) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
    return sock


@contextlib.asynccontextmanager
async def workers(holder: IndexHolder, count: int, *, shared: bool) -> AsyncIterator[Workers]:
    """``count`` worker drains over ``holder`` on 127.0.0.1 until the block ends:
    ``shared``, on one port with ``SO_REUSEPORT`` (as the resident's are); else each on
    a port of its own (as one worker's is); threaded either way, as ``serve_udp`` is."""
    socks: list[trio.socket.SocketType] = []
    stats = tuple(ServeStats() for _ in range(count))
    try:
        port = 0
        for _ in range(count):
            sock = _bound(port, shared=shared)
            socks.append(sock)
            await sock.bind(("127.0.0.1", port))
            if shared:
                port = sock.getsockname()[1]
        async with trio.open_nursery() as nursery:
            for sock, counts in zip(socks, stats, strict=True):
                nursery.start_soon(functools.partial(serve_udp, sock, holder, stats=counts))
            yield Workers(tuple(sock.getsockname() for sock in socks), stats)
            nursery.cancel_scope.cancel()
    finally:
        for sock in socks:
            sock.close()


async def ask(client: trio.socket.SocketType, address: tuple[str, int], wire: bytes) -> bytes:
    """Send ``wire`` to ``address`` from ``client`` and return the response to it (by
    its ID and question), waiting at most ``LIMIT``."""
    await client.sendto(wire, address)
    with trio.fail_after(LIMIT):
        while True:
            response = await client.recv(65535)
            if response[:2] == wire[:2]:
                return response

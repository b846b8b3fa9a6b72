"""TCP for DNS-shaped protocols: RFC 1035 section 4.2.2 framing and a bounded accept
loop. Shared by the DNS serve loop and the owner terminus."""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("valis_core.dns.serve")

_ACCEPT_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


async def accept_bounded(
    listener: trio.SocketListener,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    room: Callable[[], bool],
    *,
    accepted: Callable[[], None] = lambda: None,
    refused: Callable[[], None] = lambda: None,
    what: str = "a TCP connection",
) -> None:
    """Accept connections until cancelled, each handled by its own task: when ``room()``
    is false a new connection is accepted and closed at once (see the module docstring);
    running out of descriptors or memory is retried shortly rather than fatal."""
    async with trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_RESOURCE_ERRNOS:
                    raise
                log.warning("accepting %s failed (%s); retrying shortly", what, exc)
                await trio.sleep(0.1)
                continue
            if not room():
                refused()
                stream.socket.close()
                continue
            accepted()
            nursery.start_soon(handler, stream)


def take_frames(pending: bytearray, limit: int | None = None) -> list[bytes]:
    """Remove every complete message (at most ``limit`` of them) from the front of
    ``pending``, a TCP stream's unread bytes in RFC 1035 §4.2.2 framing (a 2-byte length
    before each message)."""
    frames: list[bytes] = []
    while len(pending) >= 2 and (limit is None or len(frames) < limit):
        size = (pending[0] << 8) | pending[1]
        if len(pending) < 2 + size:
            break
        frames.append(bytes(pending[2 : 2 + size]))
        del pending[: 2 + size]
    return frames


def framed(message: bytes) -> bytes:
    """``message`` with its RFC 1035 §4.2.2 length prefix."""
    return len(message).to_bytes(2, "big") + message

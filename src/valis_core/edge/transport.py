"""Bounded reads and writes on an edge connection: every wait ends at a deadline."""

from __future__ import annotations

import trio

RECEIVE_SIZE = 16384


async def receive_until(
    stream: trio.abc.Stream, deadline: float, size: int = RECEIVE_SIZE
) -> bytes | None:
    """The next bytes from ``stream`` (at most ``size``); ``None`` at its end, at
    ``deadline``, or when it broke."""
    with trio.move_on_at(deadline):
        try:
            data = await stream.receive_some(size)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        return bytes(data) if data else None
    return None


async def send_all(stream: trio.abc.Stream, data: bytes, timeout: float) -> bool:
    """Send ``data`` within ``timeout``; False when the client did not take it."""
    if not data:
        return True
    with trio.move_on_after(timeout):
        try:
            await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True
    return False

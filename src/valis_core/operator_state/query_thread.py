"""A blocking read on a psycopg connection, run in a worker thread under trio and
cancelled safely (the zone source's loads and whole-zone reads)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import trio

_T = TypeVar("_T")


async def in_thread(
    conn: psycopg.Connection[Any], fn: Callable[[psycopg.Connection[Any]], _T]
) -> _T:
    """Run ``fn(conn)`` in a worker thread; on cancellation ask the server to cancel the
    running statement and wait for the thread to hand the connection back, so the
    connection is never used by two threads at once."""
    box: list[_T] = []
    failed: list[Exception] = []

    async def canceller() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if not box and not failed:
                with contextlib.suppress(psycopg.Error):
                    conn.cancel_safe(timeout=2.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(canceller)
        try:
            box.append(await trio.to_thread.run_sync(fn, conn))
        except Exception as exc:  # re-raised below, outside the nursery's group
            failed.append(exc)
        nursery.cancel_scope.cancel()
    # Reached only when not cancelled: the thread's own result or its error, bare.
    if failed:
        raise failed[0]
    return box[0]

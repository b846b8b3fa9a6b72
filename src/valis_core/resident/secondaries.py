"""The resident's reader of the listed secondaries (``operator_state.secondaries``), for
zone transfers and NOTIFY.

One database session of its own, used from a worker thread under a lock and reopened
when it is lost. Transfers read through ``listed``: when the database cannot be reached
the last list read stands (secondaries keep transferring the zone served meanwhile), and
before any list has been read every transfer is refused. NOTIFY reads through
``listed_fenced``, which also reads the fence after the secondaries and raises
``FencedOut`` unless it is still this instance's: a superseded node notifies no one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg
import trio

from valis_core.dns.transfer import Listed
from valis_core.fence import FenceState, assert_fence_touch
from valis_core.operator_state.connection import OperatorStateError, connect, kept_session
from valis_core.operator_state.fence import UnseededFence, read_instance_fence
from valis_core.operator_state.secondaries import list_secondaries

log = logging.getLogger("valis.secondaries")

STATEMENT_TIMEOUT_MS = 5000
REFRESH = 10.0
"""Seconds between reads of the secondaries while nothing else asks for them."""


class SecondaryReader:
    """The listed secondaries of every zone, read from operator state over connections
    ``connect`` opens (``from_dsn``: the usual one)."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], standing: FenceState | None = None
    ) -> None:
        self._connect = connect
        self._standing = standing
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = trio.Lock()
        self._last: tuple[Listed, ...] = ()
        self._failing = False

    @classmethod
    def from_dsn(cls, dsn: str, standing: FenceState | None = None) -> SecondaryReader:
        return cls(lambda: connect(dsn, autocommit=True), standing)

    async def listed(self) -> tuple[Listed, ...]:
        """The secondaries now, or the last ones read while the database is away."""
        try:
            return await self._read(fenced=False)
        except (psycopg.Error, OperatorStateError) as exc:
            if not self._failing:
                log.warning("secondaries: cannot read them (%s); using the %d read last",
                            " ".join(str(exc).split()), len(self._last))
            self._failing = True
            return self._last

    def known(self) -> tuple[Listed, ...]:
        """The secondaries read last (for the serving thread, which cannot wait)."""
        return self._last

    async def follow(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the secondaries every ``REFRESH`` seconds until cancelled, so ``known``
        follows the operator's changes between transfers."""
        task_status.started()
        while True:
            await trio.sleep(REFRESH)
            await self.listed()

    async def listed_fenced(self) -> tuple[Listed, ...]:
        """The secondaries now, read while the fence is this instance's; raises
        ``FencedOut`` when it is not, and the database's error when it cannot be read."""
        return await self._read(fenced=True)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    async def _read(self, *, fenced: bool) -> tuple[Listed, ...]:
        async with self._lock:
            try:
                found = await trio.to_thread.run_sync(self._read_sync, fenced)
            except (psycopg.Error, OperatorStateError):
                self.close()
                raise
        if self._failing:
            log.info("secondaries: read again (%d listed)", len(found))
        self._failing = False
        self._last = found
        return found

    def _read_sync(self, fenced: bool) -> tuple[Listed, ...]:
        conn = self._connection()
        found = tuple(
            Listed(s.zone, s.address, s.key_name, s.algorithm, s.secret)
            for s in list_secondaries(conn)
        )
        if fenced and self._standing is not None:
            current = read_instance_fence(conn)
            if current is None:
                raise UnseededFence("send NOTIFY as a fenced instance")
            assert_fence_touch(current, self._standing)
        return found

    def _connection(self) -> psycopg.Connection[Any]:
        self._conn = kept_session(self._conn, self._connect, STATEMENT_TIMEOUT_MS)
        return self._conn

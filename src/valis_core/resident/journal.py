"""The resident's side of the zone change journal (``operator_state.journal``): the
difference an IXFR sends, and pruning.

One database session of its own, used from a worker thread under a lock and reopened
when it is lost. ``difference`` answers ``None`` whenever the journal cannot say (no
chain back to the secondary's serial, or the database away): the transfer then sends the
whole zone, which is always correct. ``prune_forever`` cuts the journal back to the site
facts' age and size every ``PRUNE_EVERY`` seconds, a bounded batch at a time, and only
while the fence is this instance's: a superseded node writes nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import psycopg
import trio

from valis_core.dns.transfer.journal import Difference
from valis_core.errors import ValisError
from valis_core.fence import FenceState, assert_fence_touch
from valis_core.operator_state.connection import OperatorStateError, connect, kept_session
from valis_core.operator_state.fence import WRITE_TURN, UnseededFence, read_instance_fence
from valis_core.operator_state.journal import (
    DEFAULT_HOLD_MAX_AGE,
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_RECORDS,
    PRUNE_BATCH,
    commit_times,
    prune,
    read_difference,
)
from valis_core.operator_state.site_facts import (
    JOURNAL_HOLD_MAX_AGE_KEY,
    JOURNAL_MAX_AGE_KEY,
    JOURNAL_MAX_RECORDS_KEY,
)

log = logging.getLogger("valis.journal")
_T = TypeVar("_T")

STATEMENT_TIMEOUT_MS = 5000
PRUNE_EVERY = 60.0
PRUNE_ROUNDS = 20
"""Batches of ``PRUNE_BATCH`` entries at most per pass; the rest wait for the next."""


@attrs.frozen
class JournalLimits:
    """How long and how large each zone's journal may grow (site facts)."""

    max_age: int = DEFAULT_MAX_AGE
    max_records: int = DEFAULT_MAX_RECORDS
    hold_max_age: int = DEFAULT_HOLD_MAX_AGE
    """How long a change a listed secondary still needs outlives ``max_age``."""

    @classmethod
    def from_facts(cls, facts: Mapping[str, str]) -> JournalLimits:
        return cls(
            int(facts.get(JOURNAL_MAX_AGE_KEY, DEFAULT_MAX_AGE)),
            int(facts.get(JOURNAL_MAX_RECORDS_KEY, DEFAULT_MAX_RECORDS)),
            int(facts.get(JOURNAL_HOLD_MAX_AGE_KEY, DEFAULT_HOLD_MAX_AGE)),
        )


class JournalReader:
    """Reads and prunes the journal over connections ``connect`` opens."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        limits: JournalLimits,
        standing: FenceState | None = None,
        *,
        prune_every: float = PRUNE_EVERY,
    ) -> None:
        self._connect = connect
        self._prune_every = prune_every
        self._limits = limits
        self._standing = standing
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = trio.Lock()
        self.pruned = 0

    @classmethod
    def from_dsn(
        cls, dsn: str, limits: JournalLimits, standing: FenceState | None = None
    ) -> JournalReader:
        return cls(lambda: connect(dsn, autocommit=True), limits, standing)

    async def difference(self, zone: str, old: int, new: int) -> Difference | None:
        """The condensed change of ``zone`` from ``old`` to ``new``, when the journal
        reaches; ``None`` otherwise (the database's trouble is logged)."""
        try:
            return await self._run(lambda conn: read_difference(conn, zone, old, new))
        except (psycopg.Error, OperatorStateError) as exc:
            log.warning("journal: cannot read %s from serial %d (%s); sending the whole zone",
                        zone, old, " ".join(str(exc).split()))
            return None

    async def commit_times(
        self, versions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], float]:
        """When the changes that made ``versions`` (zone, serial) were sealed
        (``operator_state.journal.commit_times``). Raises ``psycopg.Error`` when the
        database cannot be read."""
        return await self._run(lambda conn: commit_times(conn, versions))

    async def prune_forever(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Prune every ``prune_every`` seconds until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(self._prune_every)
            if not WRITE_TURN.may_write():
                continue  # a successor not yet given the write turn deletes nothing
            try:
                gone = await self._run(self._prune_sync)
            except (psycopg.Error, ValisError) as exc:
                log.warning("journal: not pruned (%s)", " ".join(str(exc).split()))
                continue
            self.pruned += gone
            if gone:
                log.info("journal: %d change(s) pruned", gone)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _prune_sync(self, conn: psycopg.Connection[Any]) -> int:
        if self._standing is not None:
            current = read_instance_fence(conn)
            if current is None:
                raise UnseededFence("prune the zone journal as a fenced instance")
            assert_fence_touch(current, self._standing)
        gone = 0
        for _ in range(PRUNE_ROUNDS):
            batch = prune(conn, max_age=self._limits.max_age,
                          max_records=self._limits.max_records,
                          hold_max_age=self._limits.hold_max_age, batch=PRUNE_BATCH)
            gone += batch
            if batch < PRUNE_BATCH:
                break
        return gone

    async def _run(self, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        async with self._lock:
            try:
                return await trio.to_thread.run_sync(lambda: work(self._connection()))
            except (psycopg.Error, OperatorStateError):
                self.close()
                raise

    def _connection(self) -> psycopg.Connection[Any]:
        self._conn = kept_session(self._conn, self._connect, STATEMENT_TIMEOUT_MS)
        return self._conn

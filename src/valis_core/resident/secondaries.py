"""The resident's reader of the listed secondaries (``operator_state.secondaries``), for
zone transfers and NOTIFY.

One database session of its own, used from a worker thread under a lock and reopened
when it is lost. ``follow`` keeps ``known``, the list in memory that decides who may
transfer, up to date: it reads the secondaries every ``REFRESH`` seconds and at once
when a change is announced on ``CHANNEL`` (``valis zone secondary add|remove``, a
catalog's membership: a member is transferred by its catalogs' secondaries), which it
listens on over a second session (reopened at the next refresh when it is lost).
Transfers the list in memory grants are confirmed through ``listed``: when the database
cannot be reached the last list read stands (secondaries keep transferring the zone
served meanwhile), and before any list has been read every transfer is refused. NOTIFY
reads through
``listed_fenced``, which also reads the fence after the secondaries and raises
``FencedOut`` unless it is still this instance's: a superseded node notifies no one.

``current`` is the list in memory when it is known to be the database's: read after
the listening session opened and after the last announcement it heard, with no
announcement waiting on its socket. NOTIFY asks it first (``NotifySender``): a change
to a zone no secondary lists then costs no read (issue 27: 50 changes a second each
read the list and the fence on a worker thread before).

``keep_progress`` writes how far each secondary has followed (``Progress.unsaved``) to
operator state every ``SAVE_EVERY`` seconds over the same session, only while the fence
is this instance's and the write turn is its own; ``read_progress`` reads it back when
the resident starts, so the lag ``valis status`` shows survives a restart.
"""

from __future__ import annotations

import contextlib
import logging
import select
from collections.abc import Callable
from typing import Any

import psycopg
import trio

from valis_core.dns.transfer import Listed
from valis_core.dns.transfer.secondary_progress import Progress, Seen
from valis_core.errors import ValisError
from valis_core.fence import FenceState, assert_fence_touch
from valis_core.operator_state.connection import OperatorStateError, connect, kept_session
from valis_core.operator_state.fence import (
    WRITE_TURN,
    UnseededFence,
    fenced_transaction,
    read_instance_fence,
)
from valis_core.operator_state.secondaries import CHANNEL, serving_secondaries
from valis_core.operator_state.secondary_progress import read_progress, save_progress

log = logging.getLogger("valis.secondaries")

STATEMENT_TIMEOUT_MS = 5000
REFRESH = 10.0
"""Seconds between reads of the secondaries while nothing else asks for them."""
SAVE_EVERY = 5.0
"""Seconds between writes of the secondaries' progress (when there is any to write)."""


class SecondaryReader:
    """The listed secondaries of every zone, read from operator state over connections
    ``connect`` opens (``from_dsn``: the usual one)."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], standing: FenceState | None = None,
        *, refresh: float = REFRESH,
    ) -> None:
        self._connect = connect
        self._standing = standing
        self._refresh = refresh
        self._listen: psycopg.Connection[Any] | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = trio.Lock()
        self._last: tuple[Listed, ...] = ()
        self._failing = False
        self._heard = 0
        """Moved on whenever the list may have changed unread: the listening session
        opened or closed, or an announcement taken from it."""
        self._read_at: int | None = None
        """``_heard`` when the last read that succeeded began (``current``)."""

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

    def current(self) -> tuple[Listed, ...] | None:
        """The secondaries read last if that list is the database's now (``None`` when
        it may not be): read since the listening session opened and since the last
        announcement it took, and no announcement waits unread on its socket."""
        listen = self._listen
        if listen is None or self._read_at != self._heard or _waiting(listen):
            return None
        return self._last

    async def follow(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the secondaries when a change is announced and every ``refresh`` seconds
        until cancelled, so ``known`` follows the operator's changes. Started once it
        listens (or has tried to)."""
        try:
            await self._open_listen()
            task_status.started()
            while True:
                if self._listen is None:
                    await self._open_listen()
                with trio.move_on_after(self._refresh):
                    if self._listen is None:
                        await trio.sleep_forever()
                    await trio.lowlevel.wait_readable(self._listen.fileno())
                    self._heard += 1
                    if not _announced(self._listen):
                        self._close_listen()
                await self.listed()
        finally:
            self._close_listen()

    async def _open_listen(self) -> None:
        try:
            conn = await trio.to_thread.run_sync(self._connect, abandon_on_cancel=True)
        except (psycopg.Error, OperatorStateError):
            return  # the refresh goes on; the next round tries again
        try:
            await trio.to_thread.run_sync(conn.execute, f"LISTEN {CHANNEL}",
                                          abandon_on_cancel=True)
        except psycopg.Error:
            with contextlib.suppress(psycopg.Error):
                conn.close()
            return
        self._listen = conn
        self._heard += 1

    def _close_listen(self) -> None:
        conn, self._listen = self._listen, None
        self._heard += 1
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    async def listed_fenced(self) -> tuple[Listed, ...]:
        """The secondaries now, read while the fence is this instance's; raises
        ``FencedOut`` when it is not, and the database's error when it cannot be read."""
        return await self._read(fenced=True)

    async def read_progress(self) -> tuple[Seen, ...]:
        """The secondaries' progress operator state holds (none when it cannot be read:
        the lag then shows from the next transfer on)."""
        try:
            async with self._lock:
                return await trio.to_thread.run_sync(
                    lambda: read_progress(self._connection()))
        except (psycopg.Error, OperatorStateError) as exc:
            self.close()
            log.warning("secondaries: their progress cannot be read (%s); it shows again "
                        "from each one's next transfer", " ".join(str(exc).split()))
            return ()

    async def keep_progress(
        self, progress: Progress, *, every: float = SAVE_EVERY,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Write ``progress``'s new sightings every ``every`` seconds until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(every)
            if not WRITE_TURN.may_write():
                continue  # a successor not yet given the write turn writes nothing
            seen = progress.unsaved()
            if not seen:
                continue
            try:
                async with self._lock:
                    await trio.to_thread.run_sync(self._save_sync, seen)
            except (psycopg.Error, ValisError) as exc:
                if isinstance(exc, (psycopg.Error, OperatorStateError)):
                    self.close()
                progress.keep(seen)
                log.warning("secondaries: their progress not written (%s); tried again "
                            "in %.0fs", " ".join(str(exc).split()), every)

    def _save_sync(self, seen: tuple[Seen, ...]) -> None:
        conn = self._connection()
        if self._standing is None:
            with conn.transaction():
                save_progress(conn, seen)
            return
        with fenced_transaction(conn, self._standing):
            save_progress(conn, seen)

    def close(self) -> None:
        self._close_listen()
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    async def _read(self, *, fenced: bool) -> tuple[Listed, ...]:
        async with self._lock:
            began = self._heard
            try:
                found = await trio.to_thread.run_sync(self._read_sync, fenced)
            except (psycopg.Error, OperatorStateError):
                self.close()
                raise
        if self._failing:
            log.info("secondaries: read again (%d listed)", len(found))
        self._failing = False
        self._last = found
        self._read_at = began
        return found

    def _read_sync(self, fenced: bool) -> tuple[Listed, ...]:
        conn = self._connection()
        found = tuple(
            Listed(s.zone, s.address, s.key_name, s.algorithm, s.secret, s.notify_port)
            for s in serving_secondaries(conn)
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


def _waiting(listen: psycopg.Connection[Any]) -> bool:
    """Whether the listening session's socket holds something not taken yet (an
    announcement, or its end)."""
    try:
        readable, _, _ = select.select([listen.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def _announced(listen: psycopg.Connection[Any]) -> bool:
    """Take what the listening session's socket holds (announcements); false when the
    session is gone."""
    pgconn = listen.pgconn
    try:
        pgconn.consume_input()
    except psycopg.Error:
        return False
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        return False
    while pgconn.notifies() is not None:
        pass
    return True

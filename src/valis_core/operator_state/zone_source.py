"""The pg-zone-source: the served zones, read from operator state and followed live.

``load`` builds the zone index eagerly from every served zone; a zone that is missing
from the database, or that the index cannot serve, is an error naming it (the boot fails
closed). ``run`` then follows changes and swaps each rebuilt index into the serve loop's
``IndexHolder`` in one assignment.

How it talks to PostgreSQL under trio. Two connections:

- the *listen* connection only ever holds ``LISTEN valis_zone_changed``. It is driven with
  libpq's non-blocking input: ``trio.lowlevel.wait_readable`` on its socket, then
  ``consume_input`` and ``notifies``. Waiting costs no thread and is cancelled like any
  trio sleep; a lost connection shows up as a read failure at once.
- the *query* connection reads rows with ordinary (blocking) psycopg calls inside
  ``trio.to_thread.run_sync``. A cancelled read sends PostgreSQL a cancel request, so the
  thread returns promptly and the connection is never used by two threads at once.

What a change costs. The trigger's payload is the changed zone's name, and notifications
arriving while a rebuild runs are folded into the next one. Only the changed zones are
re-read and re-indexed; the others' indexed zones are reused, so a change costs in
proportion to the zone it touches, not to everything served. A rebuild that fails (the
zone became unservable, or vanished) is logged and the previous version of that zone
keeps being served.

A lost connection (server restart, ``pg_terminate_backend``) is retried with exponential
backoff bounded at ``max_backoff``; after reconnecting, the source listens again *before*
reading, then reloads every zone in full, so no change made while it was away is missed.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import psycopg
import trio

from valis_core.dns import wire
from valis_core.dns.serve import IndexHolder
from valis_core.dns.zone import RecordRow, ServedZone, ZoneError, ZoneIndex
from valis_core.operator_state.connection import OperatorStateError, connect
from valis_core.operator_state.zones import (
    canonical_zone_name,
    fetch_zone_rows,
    missing_zones_error,
)

log = logging.getLogger("valis.zone_source")

CHANNEL = "valis_zone_changed"
"""The NOTIFY channel the records and zones triggers signal on (payload: zone name)."""

Connect = Callable[[], "psycopg.Connection[Any]"]
_T = TypeVar("_T")
_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


@attrs.define
class ZoneSourceStats:
    """Counters for the status view and metrics."""

    loads: int = 0
    reloads: int = 0
    failed_reloads: int = 0
    reconnects: int = 0
    last_load_seconds: float = 0.0


class PgZoneSource:
    """Serve ``zones`` (names as in ``VALIS_SERVED_ZONES``) from operator state.

    ``connect`` opens a new connection as the run account (``from_dsn`` gives the usual
    one); it is called again on every reconnect.
    """

    def __init__(
        self,
        connect: Connect,
        zones: Iterable[str],
        *,
        initial_backoff: float = 0.05,
        max_backoff: float = 5.0,
    ) -> None:
        self._connect = connect
        self.zones: tuple[str, ...] = tuple(dict.fromkeys(canonical_zone_name(z) for z in zones))
        if not self.zones:
            raise OperatorStateError(
                "zone source: no served zones given; set VALIS_SERVED_ZONES"
            )
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._listen: psycopg.Connection[Any] | None = None
        self._query: psycopg.Connection[Any] | None = None
        self._built: dict[str, ZoneIndex] = {}
        self.stats = ZoneSourceStats()

    @classmethod
    def from_dsn(cls, dsn: str, zones: Iterable[str], **kwargs: float) -> PgZoneSource:
        return cls(lambda: connect(dsn, autocommit=True), zones, **kwargs)

    # -- public ------------------------------------------------------------------------

    async def load(self) -> ZoneIndex:
        """Connect, start listening, and index every served zone; raise on any problem.

        Raises ``OperatorStateError`` (unreachable database, zones missing from it) or
        ``ZoneError`` (a zone that cannot be served), each naming what failed.
        """
        try:
            await self._open()
            return await self._load_all(strict=True)
        except BaseException:
            self.close()
            raise

    async def run(
        self,
        holder: IndexHolder,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Follow changes until cancelled, swapping rebuilt indexes into ``holder``.

        If ``load`` has not run, the first load happens here, and until ``task_status``
        is reported started its errors propagate (a boot fails closed); afterwards every
        failure is logged and retried.
        """
        try:
            if self._listen is None:
                await self._open()
                holder.swap(await self._load_all(strict=True))
            task_status.started()
            delay = self._initial_backoff
            while True:
                try:
                    if self._listen is None:
                        await self._open()
                        await self._reload(self.zones, holder)
                    delay = self._initial_backoff
                    await self._follow(holder)
                except (*_LOST, OperatorStateError) as exc:
                    # OperatorStateError here can only be a failed reconnect.
                    log.warning(
                        "zone source: operator-state connection lost (%s); reconnecting "
                        "in %.2fs",
                        _one_line(exc),
                        delay,
                    )
                    self.close()
                    self.stats.reconnects += 1
                    await trio.sleep(delay)
                    delay = min(delay * 2, self._max_backoff)
        finally:
            self.close()

    def close(self) -> None:
        """Close both connections (idempotent)."""
        for conn in (self._listen, self._query):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
        self._listen = self._query = None

    # -- connections -------------------------------------------------------------------

    async def _open(self) -> None:
        self.close()
        listen = await trio.to_thread.run_sync(self._connect)
        try:
            listen.autocommit = True
            await trio.to_thread.run_sync(listen.execute, f"LISTEN {CHANNEL}")
            query = await trio.to_thread.run_sync(self._connect)
        except BaseException:
            listen.close()
            raise
        query.autocommit = True
        self._listen, self._query = listen, query

    async def _in_thread(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``fn(query connection)`` in a worker thread; on cancellation ask the server
        to cancel the running statement and wait for the thread to hand the connection
        back, so the connection is never used by two threads at once."""
        conn = self._query
        if conn is None:
            raise psycopg.InterfaceError("zone source: not connected")
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

    # -- loading -----------------------------------------------------------------------

    async def _load_all(self, *, strict: bool) -> ZoneIndex:
        started = time.monotonic()
        zones = self.zones
        found, missing = await self._in_thread(lambda conn: fetch_zone_rows(conn, zones))
        if missing and strict:
            raise missing_zones_error(missing)
        built = {}
        for zone in zones:
            if zone in found:
                built[zone] = await _build(found[zone])
        self._built = built
        self.stats.loads += 1
        self.stats.last_load_seconds = time.monotonic() - started
        log.info(
            "zone source: loaded %d zone(s), %d records in %.3fs",
            len(built),
            sum(index.record_count for index in built.values()),
            self.stats.last_load_seconds,
        )
        return self._combine()

    async def _reload(self, zones: Sequence[str], holder: IndexHolder) -> None:
        """Re-read ``zones`` and swap in an index with them rebuilt; a zone that fails
        keeps its previous version."""
        started = time.monotonic()
        found, missing = await self._in_thread(lambda conn: fetch_zone_rows(conn, zones))
        changed = False
        for zone in missing:
            self.stats.failed_reloads += 1
            log.error(
                "zone source: served zone %s is no longer in the database; still serving "
                "its last good version (import it again, or stop serving it)",
                zone,
            )
        for zone, rows in found.items():
            try:
                self._built[zone] = await _build(rows)
                changed = True
            except ZoneError as exc:
                self.stats.failed_reloads += 1
                log.error("zone source: %s; still serving its last good version", exc)
        if changed:
            holder.swap(self._combine())
            self.stats.reloads += 1
            self.stats.last_load_seconds = time.monotonic() - started
            log.info(
                "zone source: reloaded %s in %.3fs", ", ".join(sorted(found)),
                self.stats.last_load_seconds,
            )

    def _combine(self) -> ZoneIndex:
        """One index over every built zone. Each zone object is copied so that linking
        parents in the new index never touches an index still being served."""
        served: list[ServedZone] = []
        count = 0
        for zone, index in self._built.items():
            found = index.zone_for(wire.from_text(zone))
            assert found is not None  # a one-zone index serves its own apex
            served.append(copy.copy(found))
            count += index.record_count
        return ZoneIndex(served, count)

    # -- following ---------------------------------------------------------------------

    async def _follow(self, holder: IndexHolder) -> None:
        """Wait for notifications and rebuild what they name; returns only by raising."""
        listen = self._listen
        assert listen is not None
        served = set(self.zones)
        while True:
            await trio.lowlevel.wait_readable(listen.fileno())
            full, changed = _drain(listen, served)
            if full:
                await self._reload(self.zones, holder)
            elif changed:
                await self._reload(sorted(changed), holder)


async def _build(rows: Sequence[RecordRow]) -> ZoneIndex:
    """Index one zone's rows off the event loop. Building touches nothing shared, so a
    cancelled build is simply abandoned."""
    return await trio.to_thread.run_sync(ZoneIndex.from_records, rows, abandon_on_cancel=True)


def _drain(listen: psycopg.Connection[Any], served: set[str]) -> tuple[bool, set[str]]:
    """Read what the socket holds; return (reload everything?, changed served zones)."""
    pgconn = listen.pgconn
    pgconn.consume_input()  # raises OperationalError when the connection is gone
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("zone source: listen connection is broken")
    full = False
    changed: set[str] = set()
    while (note := pgconn.notifies()) is not None:
        payload = note.extra.decode("utf-8", "replace")
        if payload == "":
            full = True
        elif payload in served:
            changed.add(payload)
    return full, changed


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__

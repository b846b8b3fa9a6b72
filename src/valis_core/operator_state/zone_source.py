"""The pg-zone-source: the served zones, read from operator state and followed live.

``load`` builds the zone index eagerly from every served zone; a zone that is missing
from the database, or that the index cannot serve, is an error naming it (the boot fails
closed). ``run`` then follows changes and swaps each rebuilt index into the serve loop's
``IndexHolder`` in one assignment.

How it talks to PostgreSQL under trio. Two connections:

- the *listen* connection only ever holds ``LISTEN`` of ``zone_notes.CHANNELS``. It is
  driven with libpq's non-blocking input: ``trio.lowlevel.wait_readable`` on its socket, then
  ``consume_input`` and ``notifies``. Waiting costs no thread and is cancelled like any
  trio sleep; a lost connection shows up as a read failure at once.
- the *query* connection reads rows. A zone's whole rows (a load, a whole re-read) are
  read with ordinary (blocking) psycopg calls inside ``trio.to_thread.run_sync``; a
  cancelled read sends PostgreSQL a cancel request, so the thread returns promptly and
  the connection is never used by two threads at once. A few changed owners' rows are
  read on the trio thread itself, in one round trip with libpq's non-blocking API
  (``owner_read``): no thread hop on the path from a commit to its answer.

What a change costs. The triggers (migration 0003) name the changed owners of a zone
when a statement changed a few, and only the zone otherwise (see ``zone_notes.parse_note``);
notifications arriving while one batch is applied are folded into the next. Named owners
are re-read (their current rows, not a delta) and replaced in the zone's index with
``ZoneIndex.with_owners_replaced``, so a change costs in proportion to the owners it
touches, not to the zone's size. The whole zone is re-read and re-indexed instead when the
note names only the zone, when a batch names more than ``max_patch_owners`` owners of it,
when its last update failed (so owners named in a failed batch are not left stale),
and while any of its rows' owner text is not plain (printable ASCII, no escapes): such a
spelling could name the same DNS name as another row's, which a read by text would miss.
The other zones' indexed data is reused either way. An update that fails (the zone became
unservable, or vanished) is logged and the zone's previous version is still served.

Most changes need no read at all: the change's rows come with its notes. Why what is
applied converges on what a full reload gives: ``zone_notes``.

Every zone (``VALIS_SERVED_ZONES=*``, ``every_zone``): the load serves every zone the
database holds (none at all fails the boot, as a missing one does), a note of a zone not
served yet reads it whole and adds it, and a zone deleted is dropped from the index (the
operator's delete is the only way it stops being served), where a zone named in the list
keeps its last good version. A zone that cannot be served fails the boot either way.

A lost connection (server restart or outage, ``pg_terminate_backend``) is retried with
jittered exponential backoff bounded at ``max_backoff`` (``backoff_delay``); the last good
index keeps being served meanwhile. A source given the instance's fence ``standing`` (the
resident's) reads the fence first on every connection it opens, before it listens or
reads a row: while the database was out of reach another instance may have claimed the
fence, and then the data it would read is that instance's to serve, not this one's, so
the source raises ``FencedOut`` and the resident fails closed. After the check, it listens
again *before* reading, then reloads every zone in full (notifications sent while it was
away are lost), so no change made while it was away is missed.

Such a source also reads the fence again after every read of rows, before anything
indexed from them is served (a load indexes rows as they stream in): the fence only
moves forward, so finding it still the instance's own proves that no claim had committed
when the rows were read, and nothing a successor wrote is among them. Rows carried by
notes are not read, but every change of the fence is noted too, in commit order with
them: a claim committed before a carried change is noted before its rows, and a batch
holding a fence note reads the fence before it applies anything (the source listens
before the read of the fence after every connect). A superseded instance therefore never
serves its successor's data, even in the moments before its heartbeat finds it out.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import psycopg
import trio

from valis_core.clock import Clock, monotonic
from valis_core.dns import wire
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex
from valis_core.errors import one_line
from valis_core.fence import FencedOut, FenceState, assert_fence_touch
from valis_core.heap import PLAIN_HEAP, HeapPolicy
from valis_core.log_throttle import LogThrottle
from valis_core.operator_state.connection import OperatorStateError, connect
from valis_core.operator_state.fence import UnseededFence, read_instance_fence
from valis_core.operator_state.owner_read import read_owner_rows
from valis_core.operator_state.query_thread import in_thread
from valis_core.operator_state.site_facts import serves_every_zone
from valis_core.operator_state.zone_load import LoadReport, build_zones, no_records, plain_owner
from valis_core.operator_state.zone_notes import CHANNELS, Batch, drain, plan
from valis_core.operator_state.zones import (
    canonical_zone_name,
    fetch_zone_rows,
    missing_zones_error,
    zone_names,
)

log = logging.getLogger("valis.zone_source")

MAX_PATCH_OWNERS = 1000
"""Above this many changed owners of one zone in one batch, the zone is re-read whole."""

_INLINE_PATCH = 64
"""Owners plus rows up to which a patch runs on the trio thread rather than a worker."""

UPDATE_LINE_EVERY = 1.0
"""Seconds between "updated" lines at INFO (each is at DEBUG): not a line per change."""

INITIAL_BACKOFF = 0.2
MAX_BACKOFF = 5.0

Connect = Callable[[], "psycopg.Connection[Any]"]
_T = TypeVar("_T")
_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


@attrs.define
class ZoneSourceStats:
    """Counters for the status view and metrics."""

    loads: int = 0
    reloads: int = 0
    """Indexes swapped in after the first load, whatever they changed."""
    failed_reloads: int = 0
    reconnects: int = 0
    """Connections lost or refused since the first load (each followed by a wait)."""
    fence_checks: int = 0
    """Times the fence was read and found to be this instance's (on connecting, and
    after every read of rows)."""
    patched_zones: int = 0
    """Zones updated by replacing a few owners rather than re-read whole."""
    carried_owners: int = 0
    """Changed owners whose rows came with the change's rows note, not read back."""
    owner_reads: int = 0
    """Reads of some changed owners' rows (each one round trip)."""
    rebuilt_zones: int = 0
    """Zones re-read and re-indexed whole after the first load."""
    last_load_seconds: float = 0.0
    following: bool = False
    """Whether the source is connected and following changes: set once every served
    zone was read (the first load, and on reconnecting, the re-read that catches up on
    what changed while it was away), cleared when the connection is lost. A heartbeat
    that reconnected says nothing about it: until this holds, changes are not served."""
    gone: set[str] = attrs.Factory(set)
    """Served zones the database no longer holds (their last good version is served
    until they are imported again)."""


class PgZoneSource:
    """Serve ``zones`` (names as in ``VALIS_SERVED_ZONES``; ``*`` alone: every zone) from
    operator state.

    ``connect`` opens a new connection as the run account (``from_dsn`` gives the usual
    one); it is called again on every reconnect. ``standing`` is the instance's standing
    at the fence (a resident's); without one (condense proving a zone, ``valis serve``)
    nothing is checked. ``sleep`` and ``draw`` (a uniform number in [0, 1)) pace the
    reconnects, ``ticks`` times the loads; tests may pass their own. ``heap``: what a full
    load does with Python's garbage collector (``valis_core.heap``).
    """

    def __init__(
        self,
        connect: Connect,
        zones: Iterable[str],
        *,
        standing: FenceState | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        max_patch_owners: int = MAX_PATCH_OWNERS,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
        draw: Callable[[], float] = random.random,
        ticks: Clock = monotonic,
        heap: HeapPolicy = PLAIN_HEAP,
    ) -> None:
        self._connect = connect
        self._heap = heap
        self.standing = standing
        given = tuple(zones)
        self.every_zone = bool(given) and serves_every_zone(given)
        """Whether the source serves every zone of operator state (``VALIS_SERVED_ZONES=*``):
        ``zones`` is then what it found, and follows zones added and deleted there."""
        self.zones: tuple[str, ...] = () if self.every_zone else tuple(
            dict.fromkeys(canonical_zone_name(z) for z in given)
        )
        if not self.zones and not self.every_zone:
            raise OperatorStateError(
                "zone source: no served zones given; set VALIS_SERVED_ZONES"
            )
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_patch_owners = max_patch_owners
        self._sleep = sleep
        self._draw = draw
        self._ticks = ticks
        self._listen: psycopg.Connection[Any] | None = None
        self._query: psycopg.Connection[Any] | None = None
        self._built: dict[str, ZoneIndex] = {}
        self._index: ZoneIndex | None = None  # the last combined: ``_combine(changed)``
        self._patchable: set[str] = set()
        """Zones whose built version may be updated owner by owner (see the module doc)."""
        self._update_lines = LogThrottle(UPDATE_LINE_EVERY)
        self.stats = ZoneSourceStats()

    @classmethod
    def from_dsn(
        cls, dsn: str, zones: Iterable[str], *, standing: FenceState | None = None,
        heap: HeapPolicy = PLAIN_HEAP,
    ) -> PgZoneSource:
        return cls(lambda: connect(dsn, autocommit=True), zones, standing=standing, heap=heap)

    # -- public ------------------------------------------------------------------------

    async def load(self, progress: Callable[[str], None] | None = None) -> ZoneIndex:
        """Connect, start listening, and index every served zone; raise on any problem.

        How far it got is logged as it goes (``loading zones: N of M, R records``), at most
        every ``zone_load.PROGRESS_EVERY`` s, and handed to ``progress`` (``STATUS=``).

        Raises ``OperatorStateError`` (unreachable database, zones missing from it),
        ``ZoneError`` (a zone that cannot be served), each naming what failed, or
        ``FencedOut`` (the fence is not ``standing``).
        """
        try:
            await self._open()
            with self._heap.bulk():
                return await self._load_all(strict=True, progress=progress)
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
        is reported started its errors propagate (a boot fails closed); afterwards a lost
        or refused connection is logged and retried with backoff, the last good index
        still served. ``FencedOut`` (found on reconnecting, or after a read) and
        ``UnseededFence`` always propagate: the instance must stop.
        """
        try:
            if self._listen is None:
                await self._open()
                with self._heap.bulk():
                    holder.swap(await self._load_all(strict=True))
            self.stats.following = True
            task_status.started()
            failures = 0
            while True:
                try:
                    if self._listen is None:
                        await self._open()
                        with self._heap.bulk():
                            await self._reload(await self._all_zones(), holder)
                        self.stats.following = True
                        log.info(
                            "zone source: reconnected after %d failed attempt(s); every "
                            "served zone re-read", failures,
                        )
                    failures = 0
                    await self._follow(holder)
                except FencedOut:
                    log.error(
                        "zone source: another instance holds the fence now; nothing read "
                        "under it is served, and the instance stops"
                    )
                    raise
                except UnseededFence:
                    raise
                except (*_LOST, OperatorStateError) as exc:
                    # OperatorStateError here can only be a failed reconnect.
                    self.stats.following = False
                    delay = backoff_delay(
                        failures, self._initial_backoff, self._max_backoff, self._draw()
                    )
                    if failures == 0:
                        log.warning(
                            "zone source: operator-state connection lost (%s); serving the "
                            "last good index, reconnecting in %.2fs", one_line(exc), delay,
                        )
                    else:
                        log.info("zone source: reconnect attempt %d failed; next in %.2fs",
                                 failures, delay)
                    self.close()
                    failures += 1
                    self.stats.reconnects += 1
                    await self._sleep(delay)
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
        """Open both connections: the fence checked first (when there is a standing),
        then ``LISTEN``, then the query connection."""
        self.close()
        listen = await trio.to_thread.run_sync(self._connect)
        try:
            listen.autocommit = True
            if self.standing is not None:
                await trio.to_thread.run_sync(self._check_fence, listen)
            for channel in CHANNELS:
                await trio.to_thread.run_sync(listen.execute, f"LISTEN {channel}")
            query = await trio.to_thread.run_sync(self._connect)
        except BaseException:
            listen.close()
            raise
        query.autocommit = True
        self._listen, self._query = listen, query

    def _check_fence(self, conn: psycopg.Connection[Any]) -> None:
        """Raise ``FencedOut`` unless the fence is still this instance's standing."""
        self._check_standing(read_instance_fence(conn))

    def _check_standing(self, current: FenceState | None) -> None:
        """Raise ``FencedOut`` unless ``current`` (the fence as read) is this instance's
        standing."""
        assert self.standing is not None
        if current is None:
            raise UnseededFence("serve zones as a fenced instance")
        assert_fence_touch(current, self.standing)
        self.stats.fence_checks += 1

    def _then_fence(
        self, fn: Callable[[psycopg.Connection[Any]], _T]
    ) -> Callable[[psycopg.Connection[Any]], _T]:
        def read(conn: psycopg.Connection[Any]) -> _T:
            result = fn(conn)
            self._check_fence(conn)  # a later snapshot than the rows' (see the module doc)
            return result

        return read

    async def _in_thread(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``fn(query connection)`` in a worker thread (``query_thread.in_thread``),
        followed by the fence check when there is a standing."""
        conn = self._query
        if conn is None:
            raise psycopg.InterfaceError("zone source: not connected")
        if self.standing is not None:
            fn = self._then_fence(fn)
        return await in_thread(conn, fn)

    async def _read_owners(
        self, owners: Mapping[str, set[str]]
    ) -> tuple[dict[str, tuple[RecordRow, ...]], tuple[str, ...]]:
        """The rows of some owners of some zones and the zones that do not exist, read on
        the trio thread in one round trip (``owner_read``), the fence checked after them
        when there is a standing."""
        conn = self._query
        if conn is None:
            raise psycopg.InterfaceError("zone source: not connected")
        read = await read_owner_rows(conn, owners, fence=self.standing is not None)
        self.stats.owner_reads += 1
        if self.standing is not None:
            self._check_standing(read.fence)  # a later snapshot than the rows'
        return read.rows, read.missing

    # -- loading -----------------------------------------------------------------------

    async def _load_all(
        self, *, strict: bool, progress: Callable[[str], None] | None = None
    ) -> ZoneIndex:
        """Read every served zone in one ``COPY`` and build each once as its rows stream
        in (``zone_load.build_zones``); raise the first served zone's refusal."""
        started = self._ticks()
        zones = self.zones
        if self.every_zone:
            zones = await self._in_thread(zone_names)
            if not zones:
                raise OperatorStateError(
                    "zone source: VALIS_SERVED_ZONES is * (every zone of operator state) "
                    "and operator state holds no zone; import one (valis zone import FILE)"
                )
        report = LoadReport(self._ticks, progress)
        loaded = await self._in_thread(lambda conn: build_zones(conn, zones, report))
        if self.every_zone:  # deleted since listed: not among every zone any more
            zones = tuple(zone for zone in zones if zone not in loaded.missing)
            self.zones = zones
        elif loaded.missing and strict:
            raise missing_zones_error(loaded.missing)
        for zone in zones:
            if zone in loaded.refused:
                raise loaded.refused[zone]
        built = loaded.built
        self._built = built
        self._patchable = set(loaded.plain)
        self.stats.loads += 1
        self.stats.last_load_seconds = self._ticks() - started
        log.info(
            "zone source: loaded %d zone(s), %d records in %.3fs",
            len(built),
            sum(index.record_count for index in built.values()),
            self.stats.last_load_seconds,
        )
        return self._combine()

    async def _reload(
        self, zones: Sequence[str], holder: IndexHolder, batch: Batch | None = None
    ) -> None:
        """Re-read ``zones`` whole and replace the owners ``batch`` patches (read back or
        carried), and swap in one index with all of them updated; a zone that fails keeps
        its previous version."""
        started = self._ticks()
        patches = batch.patches if batch is not None else {}
        whole = list(zones)
        found: dict[str, tuple[RecordRow, ...]] = {}
        missing: tuple[str, ...] = ()
        if whole:
            found, missing = await self._in_thread(lambda conn: fetch_zone_rows(conn, whole))
        found_owners: dict[str, tuple[RecordRow, ...]] = {}
        if batch is not None:
            if batch.reads:
                found_owners, missing_too = await self._read_owners(batch.reads)
                missing += missing_too
            found_owners = batch.rows(found_owners)
            self.stats.carried_owners += sum(
                len(patches[zone]) - len(batch.reads.get(zone, ())) for zone in found_owners
            )
        updated: list[str] = []
        changed: list[str] = []
        dropped = False
        for zone in missing:
            self._patchable.discard(zone)
            if self.every_zone:
                dropped = self._drop(zone) or dropped
                continue
            self.stats.failed_reloads += 1
            self.stats.gone.add(zone)
            log.error(
                "zone source: served zone %s is no longer in the database; still serving "
                "its last good version (import it again, or stop serving it)",
                zone,
            )
        for zone, rows in found.items():
            if await self._rebuild(zone, rows):
                updated.append(zone)
                changed.append(zone)
        for zone, rows in found_owners.items():
            if await self._patch(zone, patches[zone], rows):
                updated.append(f"{len(patches[zone])} owner(s) of {zone}")
                changed.append(zone)
        if dropped:
            holder.swap(self._combine())
            self.stats.reloads += 1
        elif updated:
            holder.swap(self._combine(changed))
            self.stats.reloads += 1
            self.stats.last_load_seconds = self._ticks() - started
            held = self._update_lines.admit(self._ticks())
            log.log(logging.DEBUG if held is None else logging.INFO, "zone source: updated %s "
                    "in %.3fs%s", ", ".join(sorted(updated)), self.stats.last_load_seconds,
                    f" ({held} more update(s) since the last line)" if held else "")

    async def _rebuild(self, zone: str, rows: Sequence[RecordRow]) -> bool:
        """Index one zone whole into ``_built``; log and keep the old version on failure."""
        added = self.every_zone and zone not in self._built  # a zone new to operator state
        try:
            self._built[zone] = await _build(zone, rows)
        except ZoneError as exc:
            self.stats.failed_reloads += 1
            self._patchable.discard(zone)
            log.error("zone source: %s; still serving its last good version", exc)
            return False
        self.stats.rebuilt_zones += 1
        self.stats.gone.discard(zone)
        if added and zone not in self.zones:
            self.zones = (*self.zones, zone)
            log.info("zone source: zone %s is in operator state now; serving it", zone)
        if all(plain_owner(row.owner) for row in rows):
            self._patchable.add(zone)
        else:
            self._patchable.discard(zone)
        return True

    async def _patch(self, zone: str, owners: set[str], rows: Sequence[RecordRow]) -> bool:
        """Replace ``owners`` of one built zone with ``rows`` (all they hold now); log and
        keep the old version on failure, and re-read the zone whole next time, since the
        owners of this batch are not reflected in it."""
        built = self._built.get(zone)
        if built is None:  # the first load did not find it; only a whole read can add it
            return await self._rebuild_now(zone)
        try:
            if len(owners) + len(rows) <= _INLINE_PATCH:
                # A few owners take a millisecond or two: cheaper on the trio thread than
                # waiting for a worker thread to win the interpreter from a busy loop.
                self._built[zone] = built.with_owners_replaced(zone, owners, rows)
            else:
                self._built[zone] = await trio.to_thread.run_sync(
                    built.with_owners_replaced, zone, owners, rows, abandon_on_cancel=True
                )
        except ZoneError as exc:
            self.stats.failed_reloads += 1
            self._patchable.discard(zone)
            log.error("zone source: %s; still serving its last good version", exc)
            return False
        except ValueError as exc:  # rows that do not match the owners asked for
            log.warning("zone source: %s: %s; re-reading the zone whole", zone, exc)
            return await self._rebuild_now(zone)
        self.stats.patched_zones += 1
        return True

    async def _rebuild_now(self, zone: str) -> bool:
        found, missing = await self._in_thread(lambda conn: fetch_zone_rows(conn, [zone]))
        if missing:
            self.stats.failed_reloads += 1
            self.stats.gone.add(zone)
            self._patchable.discard(zone)
            log.error("zone source: served zone %s is not in the database", zone)
            return False
        return await self._rebuild(zone, found[zone])

    def _drop(self, zone: str) -> bool:
        """Stop serving ``zone``, deleted from operator state while every zone is served;
        whether it was served."""
        self.zones = tuple(z for z in self.zones if z != zone)
        if self._built.pop(zone, None) is None:
            return False
        log.info("zone source: zone %s was deleted from operator state; no longer served",
                 zone)
        return True

    async def _all_zones(self) -> Sequence[str]:
        """Every served zone, to be re-read whole: when every zone of operator state is
        served, those it holds now and those served until now (a deleted one is found
        missing, and dropped)."""
        if not self.every_zone:
            return self.zones
        held = await self._in_thread(zone_names)
        return tuple(dict.fromkeys((*held, *self.zones)))

    def _combine(self, changed: Iterable[str] | None = None) -> ZoneIndex:
        """One index over every built zone, sharing them (zones know no index): the last
        one with the ``changed`` zones replaced (``with_zone``: O(changed)), or anew."""
        index = self._index
        if index is None or changed is None:
            served = [_served_zone(zone, built) for zone, built in self._built.items()]
            index = ZoneIndex(served, sum(built.record_count for built in self._built.values()))
        for zone in changed or ():
            index = index.with_zone(_served_zone(zone, self._built[zone]))
        self._index = index
        return index

    # -- following ---------------------------------------------------------------------

    async def _follow(self, holder: IndexHolder) -> None:
        """Wait for notifications and apply what they name; returns only by raising."""
        listen = self._listen
        assert listen is not None
        served = None if self.every_zone else set(self.zones)  # a list never changes
        while True:
            await trio.lowlevel.wait_readable(listen.fileno())
            changes = drain(listen, served)
            if changes.everything:
                with self._heap.bulk():
                    await self._reload(await self._all_zones(), holder)
                continue
            if changes.fence and self.standing is not None:
                # Nothing noted after a change of the fence is applied before it is read
                # (reading nothing, ``_in_thread`` reads the fence).
                await self._in_thread(lambda conn: None)
            batch = plan(changes, self._patchable, self._max_patch_owners)
            if batch.whole or batch.patches:
                await self._reload(batch.whole, holder, batch)


async def _build(zone: str, rows: Sequence[RecordRow]) -> ZoneIndex:
    """Index one zone's rows off the event loop. Building touches nothing shared, so a
    cancelled build is simply abandoned."""
    index = await trio.to_thread.run_sync(ZoneIndex.from_records, rows, abandon_on_cancel=True)
    if zone not in index.zones:
        raise no_records(zone)
    return index


def _served_zone(zone: str, index: ZoneIndex) -> ServedZone:
    found = index.zone_for(wire.from_text(zone))
    assert found is not None  # a one-zone index serves its own apex
    return found


def backoff_delay(failures: int, initial: float, maximum: float, draw: float) -> float:
    """Seconds to wait after ``failures`` earlier failed attempts (0 for the first loss):
    ``initial`` doubling up to ``maximum``, jittered down by up to half with ``draw`` in
    [0, 1), so sources cut off together do not all come back in the same instant."""
    ceiling = maximum if failures >= 64 else min(maximum, initial * 2.0**failures)
    return ceiling * (1.0 - draw / 2.0)

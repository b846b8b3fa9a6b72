"""Commit → wire latency, watched in production (issue 31): for each zone version the
zone source swaps in, the time from the commit of the change that made it (its change
journal entry's ``committed_at``) to the swap that serves it, observed into the
Prometheus histogram ``valis_commit_to_wire_seconds``.

The swap is the clock's second reading, so it is taken where the swap happens
(``ChangeWatch.versions``: each zone's serial and since when it is served); the commit's
time is read afterwards, off the path from a commit to its answer: versions swapped in
wait in a bounded queue (``QUEUE``; past it the oldest are dropped and counted), and
every ``INTERVAL`` seconds the ones waiting are looked up in the journal in one query
(``JournalReader.commit_times``), so PostgreSQL pays at most one small read a second
however many changes arrive. A version the journal has no entry for (a zone's first
version, a whole-zone reload after an outage that found no change, an entry pruned) is
not observed. PostgreSQL's clock and the node's are the same host's (the database is
reached over a local socket); a negative difference (a clock stepped back) counts as 0.

``committed_at`` is the time the journal's seal wrote as the change's transaction
committed (migration 0014: PostgreSQL's ``clock_timestamp()`` at the seal, the commit
within the seal's own work; before 0014 it was ``now()``, the transaction's start).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import psycopg
import trio

from valis_core.dns.zone import ServedZone
from valis_core.resident.metrics import Family, Histogram

log = logging.getLogger("valis.resident")

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
           5.0, 10.0)
"""Seconds: half a millisecond (a change patched at once) to 10 s (a large import)."""
INTERVAL = 1.0
"""Seconds between the journal reads of the versions waiting."""
QUEUE = 4096
"""Versions waiting for their commit time at most; past it the oldest are dropped."""
NAME = "valis_commit_to_wire_seconds"

CommitTimes = Callable[[Sequence[tuple[str, int]]], Awaitable[Mapping[tuple[str, int], float]]]


class CommitLatency:
    """The histogram and the versions waiting to be observed into it."""

    def __init__(
        self, commit_times: CommitTimes, versions: Mapping[str, tuple[int, float]],
        *, interval: float = INTERVAL, queue: int = QUEUE,
    ) -> None:
        self._commit_times = commit_times
        self._versions = versions
        self._interval = interval
        self._waiting: collections.deque[tuple[str, int, float]] = collections.deque(
            maxlen=queue)
        self.histogram = Histogram(BUCKETS)
        self.dropped = 0
        """Versions dropped from a full queue, never observed."""
        self._failing = False

    def swapped(self, zones: Sequence[ServedZone]) -> None:
        """``zones`` were swapped in (``ChangeWatch.changed``, on the trio thread): their
        serials and swap times, from ``versions``, wait for their commit times."""
        for zone in zones:
            found = self._versions.get(zone.origin)
            if found is None:
                continue
            if len(self._waiting) == self._waiting.maxlen:
                self.dropped += 1
            self._waiting.append((zone.origin, found[0], found[1]))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Observe the versions waiting every ``interval`` seconds until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(self._interval)
            await self.observe_waiting()

    async def observe_waiting(self) -> None:
        """Read the commit times of the versions waiting and observe each found; when the
        database cannot be read they are dropped (logged once until it can)."""
        if not self._waiting:
            return
        waiting = list(self._waiting)
        self._waiting.clear()
        try:
            found = await self._commit_times([(zone, serial) for zone, serial, _ in waiting])
        except (psycopg.Error, OSError) as exc:
            if not self._failing:
                log.warning("commit latency: the journal cannot be read (%s); %d version(s) "
                            "not observed", " ".join(str(exc).split()), len(waiting))
            self._failing = True
            return
        self._failing = False
        for zone, serial, swapped_at in waiting:
            committed = found.get((zone, serial))
            if committed is not None:
                self.histogram.observe(max(0.0, swapped_at - committed))

    def family(self) -> Family:
        return self.histogram.family(
            NAME,
            "Seconds from the commit of a change (its journal entry) to the swap that "
            "serves the zone version it made.",
        )

"""How far each listed secondary has followed its zone: the serial it last had (from the
transfers it was sent and the serials its IXFR requests carried), how many serials and
seconds it is behind the version served. Plain values; no IO. The transfer service
records what it sees (``Progress.saw``); the status view and the metrics read
``Progress.report``. What was seen since the last write to operator state is taken by
``Progress.unsaved`` (and handed back by ``keep`` when the write failed); what operator
state holds is merged in at start by ``Progress.restore``, so a restart keeps the lag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from valis_core.dns.transfer._transfer import Listed
from valis_core.dns.zone.serial import serial_gt


@attrs.frozen
class SecondaryState:
    """One listed secondary of one zone, as last seen."""

    zone: str
    address: str
    serial: int | None
    """The serial it last had; ``None`` before its first transfer or IXFR."""
    seen_at: float | None
    lag_serials: int | None
    """How many serials the served version is ahead of it (0: up to date)."""
    lag_seconds: float | None
    """For how long it has been behind: since the version it lacks was served."""

    def document(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Seen:
    """One sighting: ``address`` had ``serial`` of ``zone`` at ``at`` (epoch seconds)."""

    zone: str
    address: str
    serial: int
    at: float


class Progress:
    """The last serial each (zone, address) had, and when it was seen."""

    __slots__ = ("_seen", "_unsaved")

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], tuple[int, float]] = {}
        self._unsaved: set[tuple[str, str]] = set()

    def saw(self, zone: str, address: str, serial: int, at: float) -> None:
        self._seen[(zone, address)] = (serial, at)
        self._unsaved.add((zone, address))

    def unsaved(self) -> tuple[Seen, ...]:
        """The sightings not yet written, each (zone, address) once with its latest;
        taken: a second call gives only what was seen in between."""
        taken, self._unsaved = self._unsaved, set()
        return tuple(Seen(zone, address, *self._seen[(zone, address)])
                     for zone, address in sorted(taken))

    def keep(self, unwritten: Sequence[Seen]) -> None:
        """``unwritten`` (from ``unsaved``) again, its write having failed; a sighting
        made since stays the one kept."""
        self._unsaved.update((s.zone, s.address) for s in unwritten)

    def restore(self, stored: Sequence[Seen]) -> None:
        """Merge sightings read from operator state: each taken where nothing newer was
        seen here. They are not unsaved (they are what operator state holds)."""
        for s in stored:
            mine = self._seen.get((s.zone, s.address))
            if mine is None or mine[1] < s.at:
                self._seen[(s.zone, s.address)] = (s.serial, s.at)

    def report(
        self,
        listed: Sequence[Listed],
        versions: Mapping[str, tuple[int, float]],
        now: float,
    ) -> tuple[SecondaryState, ...]:
        """Every listed secondary's state against ``versions`` (each served zone's serial
        and since when it is served)."""
        states = []
        for secondary in listed:
            seen = self._seen.get((secondary.zone, secondary.address))
            version = versions.get(secondary.zone)
            serial = at = lag = behind = None
            if seen is not None:
                serial, at = seen
            if seen is not None and version is not None:
                current, since = version
                ahead = serial_gt(current, seen[0])
                lag = (current - seen[0]) % 2**32 if ahead else 0
                behind = max(0.0, now - since) if ahead else 0.0
            states.append(SecondaryState(secondary.zone, secondary.address, serial, at, lag,
                                         behind))
        return tuple(states)

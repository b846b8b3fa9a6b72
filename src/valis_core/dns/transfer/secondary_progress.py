"""How far each listed secondary has followed its zone: the serial it last had (from the
transfers it was sent and the serials its IXFR requests carried), how many serials and
seconds it is behind the version served. Plain values; no IO. The transfer service
records what it sees (``Progress.saw``); the status view and the metrics read
``Progress.report``.
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


class Progress:
    """The last serial each (zone, address) had, and when it was seen."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], tuple[int, float]] = {}

    def saw(self, zone: str, address: str, serial: int, at: float) -> None:
        self._seen[(zone, address)] = (serial, at)

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

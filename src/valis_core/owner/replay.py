"""Replays of signed messages refused: the (key, time signed, MAC) of every message
accepted within the time window is remembered, and a message bearing one already seen is
not accepted again. Values in, verdicts out; no IO, no clock of its own.

A TSIG (RFC 8945) proves who signed a message and when, not that it is sent once: a
captured signed UPDATE verifies again for as long as its time signed is within the fudge
of the server's clock, and RFC 8945 section 5.2.3 leaves replay to the server. The
window is ``WINDOW`` seconds either side (the fudge the node accepts at most,
``valis_core.dns.transfer.tsig_verdict.FUDGE``): a message whose time signed is more than that
from now fails the time check anyway, so it need not be remembered longer.

Bounded: at most ``capacity`` entries. Each entry leaves when its time signed falls out of
the window, or, the cache full, the oldest leaves to make room. Either way the ``floor``
rises to the leaver's time signed, and no message signed at or before the floor is
accepted: a replay of an entry gone is refused as surely as one still held, whatever
the clock does. The price, under a flood of distinct signed messages only (a holder of
the key), is that a genuine message signed in the same second as one pushed out is
refused too; its sender signs it again and it passes. The cache starts with its floor
just before the node began accepting (``since``): what a previous run accepted is not
remembered, so nothing signed before the start is accepted.
"""

from __future__ import annotations

import heapq
from typing import Literal

from valis_core.dns.transfer.tsig_verdict import FUDGE

WINDOW = FUDGE
"""Seconds either side of now within which a time signed can pass the time check."""

CAPACITY = 4096
"""Messages remembered at most: over 13 a second for the whole window."""

Verdict = Literal["fresh", "replay", "too_old"]
"""``fresh``: not seen, now remembered; ``replay``: seen within the window; ``too_old``:
signed at or before the time of a message no longer remembered, so it cannot be told
from a replay."""


class ReplayCache:
    """The signed messages accepted within the window (see the module docstring)."""

    __slots__ = ("_capacity", "_floor", "_heap", "_seen", "_window")

    def __init__(
        self, *, window: int = WINDOW, capacity: int = CAPACITY, since: int | None = None
    ) -> None:
        """``since``: the time (UNIX seconds) the node began accepting; a message signed
        before it is refused (``too_old``), since it cannot be told from a replay of one
        the node's previous run accepted."""
        if capacity < 1 or window < 0:
            raise ValueError("a replay cache needs a capacity of 1 or more and a window of 0 "
                             "or more seconds")
        self._window = window
        self._capacity = capacity
        self._seen: set[tuple[str, int, bytes]] = set()
        self._heap: list[tuple[int, str, bytes]] = []
        self._floor: int | None = None if since is None else since - 1

    def admit(self, key: str, time_signed: int, mac: bytes, *, now: float) -> Verdict:
        """Whether the message signed with ``key`` at ``time_signed`` with ``mac`` is
        accepted at ``now``; remembered when it is."""
        self._expire(now)
        entry = (key.lower(), time_signed, mac)
        if entry in self._seen:
            return "replay"
        if self._floor is not None and time_signed <= self._floor:
            return "too_old"
        while len(self._heap) >= self._capacity:
            self._drop()
        self._seen.add(entry)
        heapq.heappush(self._heap, (time_signed, entry[0], mac))
        return "fresh"

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def floor(self) -> int | None:
        """The time signed at or before which nothing is accepted (``None``: no limit)."""
        return self._floor

    def _expire(self, now: float) -> None:
        oldest_valid = int(now) - self._window
        while self._heap and self._heap[0][0] < oldest_valid:
            self._drop()

    def _drop(self) -> None:
        time_signed, key, mac = heapq.heappop(self._heap)
        self._seen.discard((key, time_signed, mac))
        if self._floor is None or time_signed > self._floor:
            self._floor = time_signed

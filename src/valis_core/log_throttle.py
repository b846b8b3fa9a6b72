"""How often a repeated failure is logged: at most one line per ``every`` seconds, and the
lines held back in between are counted and told with the next one, so a flood that trips
a bug cannot turn into a log flood and the operator still learns how many there were.

A pure core: the time is a value of each call (a shell reads it from its clock, see
``valis_core.clock``), so a test drives it through any sequence of times at once.
"""

from __future__ import annotations

import math

import attrs


@attrs.define
class LogThrottle:
    """Decides, for each failure at time ``now``, whether it is logged."""

    every: float
    """Seconds between two lines."""
    _last: float = -math.inf
    _held: int = 0

    def admit(self, now: float) -> int | None:
        """``None``: hold this failure's line back. Otherwise log it, telling the number
        of lines held back since the last one logged (0: none)."""
        if now - self._last < self.every:
            self._held += 1
            return None
        held, self._last, self._held = self._held, now, 0
        return held

"""The node's clocks: the one module that reads the time.

Two kinds of time, each a ``Clock`` (called, it returns seconds as a float):

- wall time (``wall``, seconds since the epoch): for what is dated — signatures, TSIG
  times, certificates, verdicts, status documents, serials. ``utc_now`` is the same
  reading as an aware ``datetime``.
- monotonic time (``monotonic``): for deadlines and durations, never stepped by the
  system clock. Code running under trio reads trio's own clock instead (``trio_now``):
  its deadlines go to ``trio.move_on_at``/``fail_at``, which read that clock, and a test
  injects it with ``trio.run(..., clock=...)``.

The rule the rest of the source keeps (tests/property/test_clock_reads.py holds it): a
pure core takes ``now`` as a value; an IO shell takes a clock parameter defaulting to a
function here (``clock`` for the wall clock, ``ticks`` for the monotonic one), so a test
moves time instead of waiting for it; nothing else calls ``time.time()``,
``time.monotonic()``, ``datetime.now()`` or ``trio.current_time()``. trio code takes no
``ticks``: its deadlines must be on trio's clock, which trio itself injects.

This module imports no trio at import time, so a pure core may take its default clock
from here without pulling trio in.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

Clock = Callable[[], float]
"""A clock: called, it returns the time in seconds (which time is the parameter's)."""


def wall() -> float:
    """Seconds since the epoch, by the host's wall clock."""
    return time.time()


def monotonic() -> float:
    """Seconds on the host's monotonic clock, for deadlines outside trio."""
    return time.monotonic()


def trio_now() -> float:
    """trio's clock, for deadlines inside trio (the clock ``trio.run`` was given)."""
    import trio  # here, not at the top: pure cores import this module

    return trio.current_time()


def utc_now(clock: Clock = wall) -> datetime.datetime:
    """The wall clock's time as an aware UTC datetime."""
    return datetime.datetime.fromtimestamp(clock(), datetime.UTC)


def local_now(clock: Clock = wall) -> datetime.datetime:
    """The wall clock's time as a naive local datetime (``datetime.now()``'s reading)."""
    return datetime.datetime.fromtimestamp(clock())

"""A repeated failure is logged at most once per interval, and none goes untold: each line
held back is counted on the next line logged. The throttle takes the time as a value, so
these run through any sequence of failure times at once, with no clock to wait for."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from valis_core.log_throttle import LogThrottle

EVERY = st.floats(0.5, 120.0)
GAPS = st.lists(st.floats(0.0, 200.0), max_size=60)
"""Seconds between one failure and the next (0: at once)."""


def times(start: float, gaps: list[float]) -> list[float]:
    out, now = [start], start
    for gap in gaps:
        now += gap
        out.append(now)
    return out


@given(EVERY, st.floats(-1e6, 1e9), GAPS)
def test_lines_are_an_interval_apart_and_the_first_failure_is_logged(
    every: float, start: float, gaps: list[float]
) -> None:
    throttle = LogThrottle(every)
    at = times(start, gaps)
    logged = [now for now in at if throttle.admit(now) is not None]
    assert logged[0] == at[0]
    assert all(later - earlier >= every for earlier, later in itertools.pairwise(logged))


@given(EVERY, st.floats(-1e6, 1e9), GAPS)
def test_a_failure_an_interval_after_the_last_line_is_logged(
    every: float, start: float, gaps: list[float]
) -> None:
    throttle = LogThrottle(every)
    last = None
    for now in times(start, gaps):
        told = throttle.admit(now)
        assert (told is not None) == (last is None or now - last >= every)
        if told is not None:
            last = now


@given(EVERY, st.floats(-1e6, 1e9), GAPS)
def test_every_failure_held_back_is_told_on_the_next_line(
    every: float, start: float, gaps: list[float]
) -> None:
    throttle = LogThrottle(every)
    at = times(start, gaps)
    told = [held for now in at if (held := throttle.admit(now)) is not None]
    closing = throttle.admit(at[-1] + 2 * every)  # one more, late enough to be logged
    assert closing is not None
    assert len(told) + sum(told) + closing == len(at)

"""Properties of the zone source's reconnect backoff: bounded above by its maximum,
never below half the doubled delay, and never shrinking from one failure to the next
for the same draw."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from valis_core.operator_state.zone_source import backoff_delay

failures = st.integers(0, 10_000)
initials = st.floats(0.001, 10.0)
extras = st.floats(0.0, 100.0)
draws = st.floats(0.0, 1.0, exclude_max=True)


@given(failures, initials, extras, draws)
def test_a_delay_stays_between_half_the_doubled_delay_and_the_bound(
    n: int, initial: float, extra: float, draw: float
) -> None:
    maximum = initial + extra
    delay = backoff_delay(n, initial, maximum, draw)
    ceiling = min(maximum, initial * 2.0 ** min(n, 64))
    assert ceiling / 2 <= delay <= maximum
    assert delay <= ceiling


@given(failures, initials, extras, draws)
def test_for_one_draw_the_delay_never_shrinks_as_failures_go_on(
    n: int, initial: float, extra: float, draw: float
) -> None:
    maximum = initial + extra
    assert backoff_delay(n, initial, maximum, draw) <= backoff_delay(
        n + 1, initial, maximum, draw
    )

"""The clock module's readings: a datetime reading is the wall clock's, so a shell given a
clock dates by that clock; and the real readings are the ones ``time`` and ``datetime``
give (the module is the one place that reads them, and reads them unchanged)."""

from __future__ import annotations

import datetime
import time

from hypothesis import given
from hypothesis import strategies as st

from valis_core.clock import local_now, monotonic, utc_now, wall

MOMENTS = st.floats(0.0, 4e9)  # 1970 to 2096


@given(MOMENTS)
def test_a_datetime_reading_is_the_given_clocks(at: float) -> None:
    aware = utc_now(lambda: at)
    assert aware.tzinfo is datetime.UTC
    assert aware == datetime.datetime.fromtimestamp(at, datetime.UTC)
    assert abs(aware.timestamp() - at) < 1e-5
    naive = local_now(lambda: at)
    assert naive.tzinfo is None
    assert naive == datetime.datetime.fromtimestamp(at)


def test_the_real_readings_are_the_systems() -> None:
    before_wall, before_mono = time.time(), time.monotonic()
    readings = wall(), monotonic(), utc_now(), local_now()
    after_wall, after_mono = time.time(), time.monotonic()
    assert before_wall <= readings[0] <= after_wall
    assert before_mono <= readings[1] <= after_mono
    assert before_wall - 1e-5 <= readings[2].timestamp() <= after_wall + 1e-5
    assert readings[2].tzinfo is datetime.UTC
    earliest = datetime.datetime.fromtimestamp(before_wall) - datetime.timedelta(microseconds=1)
    assert earliest <= readings[3] <= datetime.datetime.now()

"""A bounded wait: ``until`` polls a check until it holds, failing the test after ``WAIT``
seconds (a bound on waiting, never a timing assertion)."""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT = 30.0  # bound on any wait; never a timing assertion


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT}s: {what}")
        time.sleep(0.05)

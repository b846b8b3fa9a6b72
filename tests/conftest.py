"""Fixtures shared by every tier of tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# Two hypothesis profiles: "ci" (the test command under CI=true) is derandomized, so a run
# of one commit explores the same examples every time and a red run is reproducible, and
# has no deadline (two shared cores); "dev" is quicker for the inner loop. Choose with
# HYPOTHESIS_PROFILE; the default follows CI.
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "dev")
)


def require_root() -> None:
    """Skip a test that needs root on a developer machine; fail it under CI=true.

    CI runs as root, so a skip there would hide a whole tier of real-component tests.
    """
    if os.geteuid() == 0:
        return
    message = "this test needs root (real netns, nftables, setpriv, a run account)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def as_root() -> None:
    require_root()

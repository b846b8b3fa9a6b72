"""Fixtures shared by every tier of tests."""

from __future__ import annotations

import os

import pytest


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

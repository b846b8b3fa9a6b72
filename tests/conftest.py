"""Fixtures shared by every tier of tests."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
from hypothesis import settings

from tests import hypothesis_profiles
from valis_core.dns.answer import fastpath

settings.load_profile(hypothesis_profiles.chosen())


def skip_here_fail_in_ci(message: str) -> NoReturn:
    """Skip the test on a developer machine; fail it under CI=true, where a skip would
    hide a whole tier of tests (CI runs as root, on a tree ``make venv`` built)."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_root() -> None:
    """Skip a test that needs root on a developer machine; fail it under CI=true."""
    if os.geteuid() != 0:
        skip_here_fail_in_ci(
            "this test needs root (real netns, nftables, setpriv, a run account)")


def require_compiled() -> None:
    """Skip a test of the compiled UDP fast path in a tree that has not built it; fail it
    under CI=true."""
    if not fastpath.COMPILED:
        skip_here_fail_in_ci(
            "this test needs the compiled UDP fast path (valis_core.dns.answer._fastpath), not "
            "built in this tree: `make venv` (or `pip install -e .`) builds it")


@pytest.fixture
def as_root() -> None:
    require_root()


@pytest.fixture
def compiled() -> None:
    """The compiled UDP fast path is built (``require_compiled``)."""
    require_compiled()

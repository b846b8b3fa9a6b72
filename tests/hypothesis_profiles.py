"""The hypothesis profiles, which decide how many examples every property test draws.

Two profiles: "ci" (the test command under CI=true) is derandomized, so a run of one
commit explores the same examples every time and a red run is reproducible, and has no
deadline (two shared cores); "dev" is quicker for the inner loop. ``HYPOTHESIS_PROFILE``
chooses; the default follows CI. ``tests/conftest.py`` loads the chosen one.

No test names its own number of examples: one whose example is expensive (a subprocess, a
key generation, a database) draws a share of the profile's count, ``scaled(0.3)``, so the
profiles rule every test and a deeper run is one profile away.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = {"ci": 100, "dev": 25}
"""Each profile's number of examples, for a test that draws its full share."""

settings.register_profile(
    "ci", max_examples=EXAMPLES["ci"], derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=EXAMPLES["dev"], deadline=None)


def chosen() -> str:
    """The profile this run uses: ``HYPOTHESIS_PROFILE``, else "ci" under CI=true, else
    "dev"."""
    return os.environ.get("HYPOTHESIS_PROFILE",
                          "ci" if os.environ.get("CI") == "true" else "dev")


def scaled(share: float) -> int:
    """``share`` (at most 1) of the chosen profile's number of examples, at least one."""
    if not 0 < share <= 1:
        raise ValueError(f"a test draws a share of the profile's examples (0 < share <= 1), "
                         f"not {share}")
    return max(1, round(settings.get_profile(chosen()).max_examples * share))

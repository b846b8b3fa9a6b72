"""``make build`` then ``make dist`` is reproducible: two fresh trees of one checkout give
byte-identical delivery tarballs, whichever directory each tree sits in.

"One checkout" is one commit: a fresh tree is a ``git clone`` of it, holding no build
output, no caches and nobody's uncommitted work, at a path of its own. The session's
delivery (built from this working tree) counts as one of the two only when this working
tree holds exactly the commit's build inputs (always so in CI, a fresh clone); otherwise
both come from fresh clones of the commit. Both are frozen by the one environment
``packaging/frozen/requirements.lock`` pins (``scripts/build`` refuses any other). The
clones are made and built in the background with the session's other frozen builds
(``fresh_deliveries`` in ``tests/scenario/frozen_build.py``).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from tests.scenario.frozen_build import FreshDeliveries


def _differences(first: Path, second: Path) -> list[str]:
    """Which delivered files differ (from the manifests), or how the archives do."""
    def manifest(tarball: Path) -> dict[str, str]:
        with tarfile.open(tarball) as archive:
            handle = archive.extractfile("MANIFEST.json")
            assert handle is not None
            return {entry["path"]: entry["sha256"] for entry in json.load(handle)["files"]}

    one, two = manifest(first), manifest(second)
    files = sorted(path for path in one.keys() | two.keys() if one.get(path) != two.get(path))
    return files or ["the archives differ outside their files (headers, order, gzip)"]


def test_two_fresh_trees_of_one_checkout_make_byte_identical_deliveries(
    request: pytest.FixtureRequest, fresh_deliveries: FreshDeliveries
) -> None:
    commit = fresh_deliveries.commit
    tarballs: list[Path] = []
    if fresh_deliveries.session_delivery_counts:
        tarballs.append(request.getfixturevalue("delivery"))
    # Otherwise others' uncommitted work is in this tree: the session's build is not of a
    # commit, and both trees are fresh clones (started with the session's other builds).
    for job, tarball in fresh_deliveries.trees:
        for step in ("clone", "checkout", "build", "dist"):
            done = job.result(step)
            assert done.returncode == 0, f"{job.name}: {step}: {done.stderr}"
        tarballs.append(tarball)
    first, second = tarballs
    first_bytes, second_bytes = first.read_bytes(), second.read_bytes()
    assert hashlib.sha256(first_bytes).hexdigest() == hashlib.sha256(second_bytes).hexdigest(), (
        f"make dist of {commit} differs between fresh trees: {_differences(first, second)}"
    )

"""``make build`` then ``make dist`` is reproducible: two fresh trees of one checkout give
byte-identical delivery tarballs, whichever directory each tree sits in.

"One checkout" is one commit: a fresh tree is a ``git clone`` of it, holding no build
output, no caches and nobody's uncommitted work, at a path of its own. The session's
delivery (built from this working tree) counts as one of the two only when this working
tree holds exactly the commit's build inputs (always so in CI, a fresh clone); otherwise
both come from fresh clones of the commit. Both are frozen by the one environment
``packaging/frozen/requirements.lock`` pins (``scripts/build`` refuses any other).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 600
RUN_TIMEOUT = 120
BUILD_INPUTS = ("src", "packaging", "docs", "pyproject.toml", "scripts/build")


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
        timeout=RUN_TIMEOUT,
    ).stdout


def _working_tree_is_the_commit() -> bool:
    """Whether this working tree's build inputs are exactly HEAD's (untracked files too)."""
    status = _git("status", "--porcelain", "--untracked-files=all", "--", *BUILD_INPUTS)
    return status.strip() == ""


def _fresh_tree(source: Path, commit: str, at: Path) -> Path:
    _git("clone", "--quiet", "--no-hardlinks", "--no-checkout", str(source), str(at))
    _git("checkout", "--quiet", "--detach", commit, cwd=at)
    return at


def _make_dist(tree: Path, out: Path) -> Path:
    """``make build`` then ``make dist`` in ``tree``, with this session's interpreter."""
    built = subprocess.run(
        [str(tree / "scripts" / "build"), "--out", str(out / "build")],
        env={**os.environ, "VALIS_BUILD_PYTHON": sys.executable},
        cwd=tree, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
    )
    assert built.returncode == 0, built.stderr
    tarball = out / "valis-serving.tar.gz"
    done = subprocess.run(
        [sys.executable, str(tree / "packaging" / "frozen" / "dist.py"),
         "--bundle", str(out / "build" / "valis"), "--out", str(tarball)],
        cwd=tree, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )
    assert done.returncode == 0, done.stderr
    return tarball


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


@pytest.fixture
def trees() -> Iterator[Path]:
    """Where the fresh trees and their builds go: outside the checkout, removed after."""
    directory = Path(tempfile.mkdtemp(prefix="valis-reproducible-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_two_fresh_trees_of_one_checkout_make_byte_identical_deliveries(
    request: pytest.FixtureRequest, trees: Path
) -> None:
    commit = _git("rev-parse", "HEAD").strip()
    if _working_tree_is_the_commit():
        first: Path = request.getfixturevalue("delivery")
    else:
        # Others' uncommitted work is in this tree: the session's build is not of a commit.
        first = _make_dist(_fresh_tree(REPO, commit, trees / "one"), trees / "one-out")
    # The second tree sits elsewhere, at a longer path: nothing may depend on where.
    second = _make_dist(
        _fresh_tree(REPO, commit, trees / "another" / "tree"), trees / "another-out"
    )
    first_bytes, second_bytes = first.read_bytes(), second.read_bytes()
    assert hashlib.sha256(first_bytes).hexdigest() == hashlib.sha256(second_bytes).hexdigest(), (
        f"make dist of {commit} differs between fresh trees: {_differences(first, second)}"
    )

"""The frozen build, once per test session: ``make build``'s bundle and ``make dist``'s
delivery, for every scenario that runs the serving binary rather than the venv.

Each bundle is built by ``scripts/build`` (what ``make build`` runs) into one directory
under /tmp, outside the checkout, that every account may traverse; a fixture builds on
first use and the session reuses it (about a minute each on two cores). The fixtures
reach the scenario files through ``tests/scenario/conftest.py``:

- ``bundle``: the bundle, ``valis`` and ``fulcrum`` over the frozen interpreter;
- ``control_bundle``: the known-bad control (``--control``: only what the entry points
  import, no distribution metadata);
- ``plain_build``: the build without the serving codec (``--without-serving-codec``),
  which ``scripts/build`` refuses but leaves on disk, with what the build said;
- ``delivery``: ``make dist``'s tarball of ``bundle``.

``delivery_of`` stages any of them as a delivery of another version number, for
scenarios that apply one delivery over another.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 600
RUN_TIMEOUT = 120
with open(REPO / "pyproject.toml", "rb") as _pyproject:
    VERSION: str = tomllib.load(_pyproject)["project"]["version"]


def build(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``scripts/build`` (what ``make build`` runs) into ``out``."""
    return subprocess.run(
        [str(REPO / "scripts" / "build"), "--out", str(out), *extra],
        env={**os.environ, "VALIS_BUILD_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False, cwd=REPO,
    )


def _build(out: Path, *extra: str) -> Path:
    done = build(out, *extra)
    assert done.returncode == 0, done.stderr
    return out / "valis"


def dist(bundle: Path, out: Path) -> Path:
    """``make dist`` (``packaging/frozen/dist.py``) of ``bundle`` into ``out``."""
    done = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "frozen" / "dist.py"),
         "--bundle", str(bundle), "--out", str(out)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def delivery_of(bundle: Path, version: str, out: Path,
                replace: Mapping[str, bytes] | None = None) -> Path:
    """A delivery of ``bundle`` staged as ``make dist`` stages it, numbered ``version``,
    with the files ``replace`` names (path in the delivery: content) in place of its own."""
    from valis_core.apply.delivery import build_delivery

    spec = importlib.util.spec_from_file_location(
        "valis_packaging_dist", REPO / "packaging" / "frozen" / "dist.py"
    )
    assert spec is not None
    assert spec.loader is not None
    packaging_dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packaging_dist)

    steer = bundle.parent / Path(packaging_dist.STEER_OBJECT).name
    files = {**packaging_dist.bundle_files(bundle), **packaging_dist.steer_files(steer),
             **packaging_dist.unit_files(), **packaging_dist.doc_files()}
    files.update({path: (content, 0o644) for path, content in (replace or {}).items()})
    out.parent.mkdir(parents=True, exist_ok=True)
    build_delivery(files, version, out)
    return out


@attrs.frozen
class PlainBuild:
    """The build without the serving codec: what ``scripts/build`` said, and the bundle
    it left (which it refused to call built)."""

    done: subprocess.CompletedProcess[str]
    bundle: Path


@pytest.fixture(scope="session")
def build_root() -> Iterator[Path]:
    """A directory under /tmp, outside the checkout, every account may traverse."""
    root = Path(tempfile.mkdtemp(prefix="valis-frozen-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def bundle(build_root: Path) -> Path:
    """``make build``'s bundle: ``valis`` and ``fulcrum`` over the frozen interpreter."""
    return _build(build_root / "frozen")


@pytest.fixture(scope="session")
def control_bundle(build_root: Path) -> Path:
    """The known-bad control: frozen without collecting subsystems or metadata."""
    return _build(build_root / "control", "--control")


@pytest.fixture(scope="session")
def plain_build(build_root: Path) -> PlainBuild:
    """The build without the serving codec, refused by ``scripts/build``."""
    done = build(build_root / "plain", "--without-serving-codec")
    return PlainBuild(done, build_root / "plain" / "valis")


@pytest.fixture(scope="session")
def delivery(bundle: Path, build_root: Path) -> Path:
    """``make dist``'s tarball of the session's bundle."""
    return dist(bundle, build_root / "dist" / "valis-serving.tar.gz")

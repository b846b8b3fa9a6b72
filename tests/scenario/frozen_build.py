"""The frozen build, once per test session: ``make build``'s bundle and ``make dist``'s
delivery, for every scenario that runs the serving binary rather than the venv.

Each bundle is built by ``scripts/build`` (what ``make build`` runs) into one directory
under /tmp, outside the checkout, that every account may traverse. The first time any of
the fixtures below is asked for, every build the collected tests use starts at once in the
background (``Builds``: one process group each, output to files, every one killed and
reaped at session end), so that the builds share both cores instead of taking turns (20
to 40 s each alone); each fixture then waits for its own, and the session reuses it. The
fixtures reach the scenario files through ``tests/scenario/conftest.py``:

- ``bundle``: the bundle, ``valis`` and ``fulcrum`` over the frozen interpreter;
- ``control_bundle``: the known-bad control (``--control``: only what the entry points
  import, no distribution metadata);
- ``plain_build``: the build without the serving codec (``--without-serving-codec``),
  which ``scripts/build`` refuses but leaves on disk, with what the build said;
- ``delivery``: ``make dist``'s tarball of ``bundle``;
- ``fresh_deliveries``: ``make build`` then ``make dist`` in fresh clones of HEAD, for
  ``test_reproducible_build.py`` (one clone when this working tree holds exactly HEAD's
  build inputs and ``delivery`` counts as the other, two otherwise).

``delivery_of`` stages any of them as a delivery of another version number, for
scenarios that apply one delivery over another.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs
import pytest

from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 600
RUN_TIMEOUT = 120
BUILD_INPUTS = ("src", "packaging", "docs", "pyproject.toml", "setup.py", "scripts/build")
with open(REPO / "pyproject.toml", "rb") as _pyproject:
    VERSION: str = tomllib.load(_pyproject)["project"]["version"]


def build(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``scripts/build`` (what ``make build`` runs) into ``out``."""
    return subprocess.run(
        [str(REPO / "scripts" / "build"), "--out", str(out), *extra],
        env={**os.environ, "VALIS_BUILD_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False, cwd=REPO,
    )


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

    packaging_dist = load_script(REPO / "packaging" / "frozen" / "dist.py",
                                 "valis_packaging_dist")

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


@attrs.frozen
class Step:
    """One command of a background build, run in ``cwd``; its output goes to files."""

    name: str
    argv: tuple[str, ...]
    cwd: Path


@attrs.frozen
class Job:
    """Steps run one after another in one background process group, stopping at the
    first that fails; each step leaves ``<name>.out``, ``<name>.err`` and ``<name>.rc``."""

    name: str
    steps: tuple[Step, ...]
    logs: Path
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, name: str, steps: tuple[Step, ...], logs: Path) -> Job:
        logs.mkdir(parents=True, exist_ok=True)
        lines = ["set -u"]
        for step in steps:
            base = shlex.quote(str(logs / step.name))
            lines.append(
                f"(cd {shlex.quote(str(step.cwd))} && exec {shlex.join(step.argv)})"
                f" >{base}.out 2>{base}.err; rc=$?; echo $rc >{base}.rc;"
                ' [ "$rc" -eq 0 ] || exit "$rc"'
            )
        process = subprocess.Popen(
            ["/bin/sh", "-c", "\n".join(lines)],
            env={**os.environ, "VALIS_BUILD_PYTHON": sys.executable},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(name, steps, logs, process)

    def result(self, step: str) -> subprocess.CompletedProcess[str]:
        """What ``step`` did, once the job is over (bounded by the build timeout)."""
        try:
            self.process.wait(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"{self.name}: not done within {BUILD_TIMEOUT} s (step {step})"
            ) from None
        base = self.logs / step
        rc_file = base.with_suffix(".rc")
        if not rc_file.exists():
            raise AssertionError(f"{self.name}: step {step} never ran (job exit "
                                 f"{self.process.returncode}); see {self.logs}")
        argv = next(s.argv for s in self.steps if s.name == step)
        return subprocess.CompletedProcess(
            list(argv), int(rc_file.read_text()),
            base.with_suffix(".out").read_text(errors="replace"),
            base.with_suffix(".err").read_text(errors="replace"),
        )

    def stop(self) -> None:
        """Kill the job's process group if it still runs, and reap it."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=RUN_TIMEOUT)


def working_tree_is_the_commit() -> bool:
    """Whether this working tree's build inputs are exactly HEAD's (untracked files too)."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", *BUILD_INPUTS],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=RUN_TIMEOUT,
    ).stdout
    return status.strip() == ""


def _build_step(tree: Path, out: Path, *extra: str) -> Step:
    return Step("build", (str(tree / "scripts" / "build"), "--out", str(out), *extra), tree)


def _dist_step(tree: Path, bundle: Path, out: Path) -> Step:
    return Step("dist", (sys.executable, str(tree / "packaging" / "frozen" / "dist.py"),
                         "--bundle", str(bundle), "--out", str(out)), tree)


def _fresh_tree_steps(commit: str, at: Path, out: Path) -> tuple[Step, ...]:
    """Clone ``commit`` into ``at`` (a fresh tree), then ``make build`` and ``make dist``."""
    return (
        Step("clone", ("git", "clone", "--quiet", "--no-hardlinks", "--no-checkout",
                       str(REPO), str(at)), at.parent),
        Step("checkout", ("git", "checkout", "--quiet", "--detach", commit), at),
        _build_step(at, out / "build"),
        _dist_step(at, out / "build" / "valis", out / "valis-serving.tar.gz"),
    )


@attrs.frozen
class FreshDeliveries:
    """The reproducible-build check's deliveries of ``commit``: the session's own
    ``delivery`` counts as the first only when this working tree holds exactly the
    commit's build inputs; otherwise both come from fresh clones."""

    commit: str
    trees: tuple[tuple[Job, Path], ...]
    session_delivery_counts: bool


@attrs.define
class Builds:
    """Every build the collected tests use, started together in the background the first
    time one is asked for, so that they share both cores; each fixture waits for its own."""

    root: Path
    jobs: dict[str, Job] = attrs.field(factory=dict)
    fresh: FreshDeliveries | None = None

    def launch(self, needed: frozenset[str]) -> None:
        root = self.root
        fresh_trees: list[tuple[Job, Path]] = []
        counts = False
        commit = ""
        if "fresh_deliveries" in needed:
            commit = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                check=True, timeout=RUN_TIMEOUT,
            ).stdout.strip()
            counts = working_tree_is_the_commit()
            if counts:
                needed |= {"delivery"}
        frozen_steps: list[Step] = []
        if needed & {"bundle", "delivery"}:
            frozen_steps.append(_build_step(REPO, root / "frozen"))
        if "delivery" in needed:
            frozen_steps.append(_dist_step(REPO, root / "frozen" / "valis",
                                           root / "dist" / "valis-serving.tar.gz"))
        # Longest first: the clones' builds and the full bundle, then the rest.
        if "fresh_deliveries" in needed:
            # The second tree sits elsewhere, at a longer path: nothing may depend on where.
            places = [] if counts else [(root / "one", root / "one-out")]
            places.append((root / "another" / "tree", root / "another-out"))
            for at, out in places:
                at.parent.mkdir(parents=True, exist_ok=True)
                job = Job.start(f"fresh tree {at}", _fresh_tree_steps(commit, at, out),
                                root / "logs" / at.relative_to(root))
                self.jobs[str(at)] = job
                fresh_trees.append((job, out / "valis-serving.tar.gz"))
            self.fresh = FreshDeliveries(commit, tuple(fresh_trees), counts)
        if frozen_steps:
            self.jobs["frozen"] = Job.start("make build (bundle)", tuple(frozen_steps),
                                            root / "logs" / "frozen")
        if "plain_build" in needed:
            self.jobs["plain"] = Job.start(
                "build without the serving codec",
                (_build_step(REPO, root / "plain", "--without-serving-codec"),),
                root / "logs" / "plain")
        if "control_bundle" in needed:
            self.jobs["control"] = Job.start(
                "known-bad control", (_build_step(REPO, root / "control", "--control"),),
                root / "logs" / "control")

    def result(self, job: str, step: str) -> subprocess.CompletedProcess[str]:
        """What ``step`` of ``job`` did; a job no collected test named starts now."""
        if job not in self.jobs:
            self.launch(frozenset({_FIXTURE_OF[job]}))
        return self.jobs[job].result(step)

    def has_step(self, job: str, step: str) -> bool:
        return job in self.jobs and any(s.name == step for s in self.jobs[job].steps)

    def stop(self) -> None:
        for job in self.jobs.values():
            job.stop()


_FIXTURE_OF = {"frozen": "bundle", "control": "control_bundle", "plain": "plain_build"}
_FROZEN_FIXTURES = frozenset(
    {"bundle", "control_bundle", "plain_build", "delivery", "fresh_deliveries"}
)


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
def frozen_builds(request: pytest.FixtureRequest, build_root: Path) -> Iterator[Builds]:
    """Starts every build the collected tests use; every process is reaped at the end."""
    needed = frozenset(
        name for item in request.session.items
        for name in getattr(item, "fixturenames", ()) if name in _FROZEN_FIXTURES
    )
    builds = Builds(build_root)
    try:
        builds.launch(needed)
        yield builds
    finally:
        builds.stop()


@pytest.fixture(scope="session")
def bundle(frozen_builds: Builds, build_root: Path) -> Path:
    """``make build``'s bundle: ``valis`` and ``fulcrum`` over the frozen interpreter."""
    done = frozen_builds.result("frozen", "build")
    assert done.returncode == 0, done.stderr
    return build_root / "frozen" / "valis"


@pytest.fixture(scope="session")
def control_bundle(frozen_builds: Builds, build_root: Path) -> Path:
    """The known-bad control: frozen without collecting subsystems or metadata."""
    done = frozen_builds.result("control", "build")
    assert done.returncode == 0, done.stderr
    return build_root / "control" / "valis"


@pytest.fixture(scope="session")
def plain_build(frozen_builds: Builds, build_root: Path) -> PlainBuild:
    """The build without the serving codec, refused by ``scripts/build``."""
    return PlainBuild(frozen_builds.result("plain", "build"), build_root / "plain" / "valis")


@pytest.fixture(scope="session")
def delivery(bundle: Path, frozen_builds: Builds, build_root: Path) -> Path:
    """``make dist``'s tarball of the session's bundle (made now if no collected test
    named ``delivery``, so it was not started with the builds)."""
    out = build_root / "dist" / "valis-serving.tar.gz"
    if not frozen_builds.has_step("frozen", "dist"):
        return dist(bundle, out)
    done = frozen_builds.result("frozen", "dist")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def fresh_deliveries(frozen_builds: Builds) -> FreshDeliveries:
    """The reproducible-build check's fresh-tree deliveries, started with the others."""
    assert frozen_builds.fresh is not None, "fresh-tree builds were not started"
    return frozen_builds.fresh

"""The frozen build, cached across test sessions: ``make build``'s bundle and ``make
dist``'s delivery, for every scenario that runs the serving binary rather than the venv.

Each bundle is built by ``scripts/build`` (what ``make build`` runs). The first time any
of the fixtures below is asked for, every build the collected tests use starts at once in
the background (``Builds``: one process group each, output to files, every one killed and
reaped at session end), so that the builds share both cores instead of taking turns (20
to 40 s each alone); each fixture then waits for its own, and the session reuses it. A
session sharing the scenario tier with another (``work_queue``) starts those of the
modules it has claimed so far, and the others when a fixture asks.

The bundle, the control, the plain build and the delivery are kept between sessions in
``CACHE_ROOT`` (``/tmp/valis-build-cache``, root's, mode 0755: every account may traverse
it, as the run account must to execute the bundle), one directory per build kind and key:
the key is a hash of the build inputs (``BUILD_INPUTS``: every file git tracks or would
track under them, its path, mode and bytes) and of the python that builds. A build runs
under an exclusive ``flock`` on its entry's lock file (two sessions building the same
entry at once: the second waits, then reuses the first's), into ``<entry>.partial``
(anything left there by a killed session is removed first), and is renamed to the entry
only when every step finished as expected; a build that failed is moved into the
session's own ``build_root`` instead, never reused. So an entry is never stale (other
inputs give another key) nor half written (the rename is the last step). Entries unused
for ``CACHE_KEEP_DAYS`` days are removed when a session starts a build of the same kind.
``VALIS_TEST_BUILD_CACHE=0`` builds into the session's ``build_root`` instead, as before.
Containers that run a build bind ``build_binds``: the session's ``build_root`` and the
cache.

The fixtures reach the scenario files through ``tests/scenario/conftest.py``:

- ``bundle``: the bundle, ``valis`` and ``fulcrum`` over the frozen interpreter;
- ``control_bundle``: the known-bad control (``--control``: only what the entry points
  import, no distribution metadata);
- ``plain_build``: the build without the serving codec (``--without-serving-codec``),
  which ``scripts/build`` refuses but leaves on disk, with what the build said;
- ``delivery``: ``make dist``'s tarball of ``bundle``;
- ``fresh_deliveries``: ``make build`` then ``make dist`` in fresh clones of HEAD, for
  ``test_reproducible_build.py`` (one clone when this working tree holds exactly HEAD's
  build inputs and ``delivery`` counts as the other, two otherwise); never cached.

Tests must not write into a cached bundle or delivery (copy it first): the next session
reuses it. ``build_root`` is each session's own scratch directory.

``delivery_of`` stages any of them as a delivery of another version number, for
scenarios that apply one delivery over another.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs
import pytest

from tests.scenario.work_queue import claimed_modules, module_of
from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 600
RUN_TIMEOUT = 120
# README.md is the distribution metadata's description, which the bundle carries.
BUILD_INPUTS = ("src", "packaging", "docs", "pyproject.toml", "setup.py", "scripts/build",
                "README.md")
CACHE_ROOT = Path("/tmp/valis-build-cache")
CACHE_KEEP_DAYS = 7
# How long a session waits for another building the same cache entry.
CACHE_LOCK_TIMEOUT = 2 * BUILD_TIMEOUT
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
class CacheEntry:
    """Where a cached build lives between sessions: ``final`` once accepted, built under
    ``lock`` into ``partial``; a build not accepted (``accept``, a shell condition run in
    the logs directory) is moved to the session's ``failed`` instead."""

    final: Path
    accept: str

    @property
    def partial(self) -> Path:
        return self.final.with_name(self.final.name + ".partial")

    @property
    def lock(self) -> Path:
        return self.final.with_name(self.final.name + ".lock")


@attrs.frozen
class Job:
    """Steps run one after another in one background process group, stopping at the
    first that fails; each step leaves ``<name>.out``, ``<name>.err`` and ``<name>.rc``
    in the logs directory. A cached job (``cache``) writes its outputs under ``base`` and
    its logs in ``base/logs``, where ``base`` is the entry's ``partial`` while it builds
    and its ``final`` (or the session's ``failed``) once done."""

    name: str
    steps: tuple[Step, ...]
    logs: Path
    process: subprocess.Popen[bytes] | None
    cache: CacheEntry | None = None
    failed: Path | None = None

    @classmethod
    def start(cls, name: str, steps: tuple[Step, ...], logs: Path,
              cache: CacheEntry | None = None, failed: Path | None = None) -> Job:
        lines = ["set -u"]
        if cache is None:
            logs.mkdir(parents=True, exist_ok=True)
        else:
            assert failed is not None
            final, partial = shlex.quote(str(cache.final)), shlex.quote(str(cache.partial))
            if cache.final.is_dir():
                os.utime(cache.final)
                return cls(name, steps, logs, None, cache, failed)
            # Under the entry's lock: reuse what another session built meanwhile, or
            # build into the partial directory (whatever a killed session left there is
            # removed first) and rename it to the entry only once accepted.
            lines += [
                f"exec 9>>{shlex.quote(str(cache.lock))}",
                f"flock -w {CACHE_LOCK_TIMEOUT} 9 || exit 75",
                f"if [ -d {final} ]; then touch {final}; exit 0; fi",
                f"rm -rf {partial} && mkdir -p {shlex.quote(str(logs))} || exit 1",
            ]
        body = []
        for step in steps:
            base = shlex.quote(str(logs / step.name))
            body.append(
                f"(cd {shlex.quote(str(step.cwd))} && exec {shlex.join(step.argv)})"
                f" >{base}.out 2>{base}.err; rc=$?; echo $rc >{base}.rc;"
                ' [ "$rc" -eq 0 ] || exit "$rc"'
            )
        if cache is None:
            lines += body
        else:
            assert failed is not None
            lines += [
                "(", *body, ")", "status=$?",
                f"if (cd {shlex.quote(str(logs))} && {cache.accept}); then",
                f"  chmod 755 {partial} && mv -T {partial} {final}",
                "else",
                f"  mkdir -p {shlex.quote(str(failed.parent))} &&"
                f" mv -T {partial} {shlex.quote(str(failed))}",
                "fi",
                'exit "$status"',
            ]
        process = subprocess.Popen(
            ["/bin/sh", "-c", "\n".join(lines)],
            env={**os.environ, "VALIS_BUILD_PYTHON": sys.executable},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(name, steps, logs, process, cache, failed)

    @property
    def base(self) -> Path:
        """Where a cached job's outputs are, once it is done."""
        assert self.cache is not None
        assert self.failed is not None
        return self.cache.final if self.cache.final.is_dir() else self.failed

    def result(self, step: str) -> subprocess.CompletedProcess[str]:
        """What ``step`` did, once the job is over (bounded by the build timeout, and for
        a cached job by the wait for another session's build of the same entry)."""
        if self.process is not None:
            try:
                self.process.wait(
                    timeout=BUILD_TIMEOUT + (0 if self.cache is None else CACHE_LOCK_TIMEOUT))
            except subprocess.TimeoutExpired:
                self.stop()
                raise AssertionError(
                    f"{self.name}: not done within {BUILD_TIMEOUT} s (step {step})"
                ) from None
        logs = self.logs if self.cache is None else self.base / "logs"
        base = logs / step
        rc_file = base.with_suffix(".rc")
        if not rc_file.exists():
            exit_status = None if self.process is None else self.process.returncode
            raise AssertionError(f"{self.name}: step {step} never ran (job exit "
                                 f"{exit_status}); see {logs}")
        argv = next(s.argv for s in self.steps if s.name == step)
        return subprocess.CompletedProcess(
            list(argv), int(rc_file.read_text()),
            base.with_suffix(".out").read_text(errors="replace"),
            base.with_suffix(".err").read_text(errors="replace"),
        )

    def stop(self) -> None:
        """Kill the job's process group if it still runs, and reap it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=RUN_TIMEOUT)


def cache_enabled() -> bool:
    """Whether builds are cached between sessions (``VALIS_TEST_BUILD_CACHE=0``: not)."""
    return os.environ.get("VALIS_TEST_BUILD_CACHE", "1") != "0"


def cache_root() -> Path:
    """``CACHE_ROOT``, made if missing; refused unless it is a real directory of this
    account that no other may write (another account could otherwise plant a build)."""
    with contextlib.suppress(FileExistsError):
        CACHE_ROOT.mkdir(mode=0o755)
    info = CACHE_ROOT.lstat()
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & 0o022):
        raise AssertionError(
            f"the build cache {CACHE_ROOT} is not a directory of uid {os.getuid()} that "
            f"only it may write (mode {stat.filemode(info.st_mode)}, uid {info.st_uid}); "
            "remove it, or set VALIS_TEST_BUILD_CACHE=0 to build in the session")
    if stat.S_IMODE(info.st_mode) != 0o755:
        CACHE_ROOT.chmod(0o755)
    return CACHE_ROOT


def build_key() -> str:
    """A hash of the build inputs (every file git tracks or would track under
    ``BUILD_INPUTS``: path, executable bit, bytes) and of the python that builds."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
         *BUILD_INPUTS],
        cwd=REPO, capture_output=True, check=True, timeout=RUN_TIMEOUT,
    ).stdout.decode()
    digest = hashlib.sha256()
    for part in (sys.executable, os.path.realpath(sys.executable), sys.version):
        digest.update(part.encode() + b"\0")
    for name in sorted(set(filter(None, listed.split("\0")))):
        path = REPO / name
        if path.is_symlink():
            content = b"link:" + os.readlink(path).encode()
        elif path.is_file():
            content = hashlib.sha256(path.read_bytes()).digest()
            content += b"x" if os.access(path, os.X_OK) else b"-"
        else:
            continue  # tracked but deleted in this working tree
        digest.update(name.encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:32]


def prune_cache(root: Path, kind: str, keep: Path) -> None:
    """Remove ``kind``'s entries other than ``keep`` unused for ``CACHE_KEEP_DAYS`` days,
    each only when its lock is free (no session is building it)."""
    horizon = time.time() - CACHE_KEEP_DAYS * 86400
    for entry in root.glob(f"{kind}-*.lock"):
        final = entry.with_suffix("")
        if final == keep:
            continue
        with contextlib.suppress(OSError):
            if final.is_dir() and final.stat().st_mtime > horizon:
                continue
            with open(entry, "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                shutil.rmtree(final, ignore_errors=True)
                shutil.rmtree(final.with_name(final.name + ".partial"), ignore_errors=True)
                entry.unlink()


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


@attrs.frozen
class Kind:
    """One cacheable build: its steps given the directory its outputs go under, and the
    shell condition (run in its logs directory) under which it may be kept."""

    fixture: str
    title: str
    steps: Callable[[Path], tuple[Step, ...]]
    accept: str


KINDS = {
    "frozen": Kind(
        "bundle", "make build (bundle)",
        lambda base: (_build_step(REPO, base / "frozen"),
                      _dist_step(REPO, base / "frozen" / "valis",
                                 base / "dist" / "valis-serving.tar.gz")),
        '[ "$(cat build.rc)" = 0 ] && [ "$(cat dist.rc)" = 0 ]'),
    # scripts/build refuses this build (exit 1) after its self-test, leaving the bundle.
    "plain": Kind(
        "plain_build", "build without the serving codec",
        lambda base: (_build_step(REPO, base / "plain", "--without-serving-codec"),),
        '[ "$(cat build.rc)" = 1 ] && grep -q "failed its self-test" build.err'),
    "control": Kind(
        "control_bundle", "known-bad control",
        lambda base: (_build_step(REPO, base / "control", "--control"),),
        '[ "$(cat build.rc)" = 0 ]'),
}


@attrs.define
class Builds:
    """Every build the collected tests use, started together in the background the first
    time one is asked for, so that they share both cores; each fixture waits for its own.
    The kinds in ``KINDS`` come from the cache when it holds them (see the module's
    docstring)."""

    root: Path
    jobs: dict[str, Job] = attrs.field(factory=dict)
    fresh: FreshDeliveries | None = None
    cached: bool = attrs.field(factory=cache_enabled)

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
        if "delivery" in needed:
            needed |= {"bundle"}
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
        kinds = [name for name, kind in KINDS.items()
                 if kind.fixture in needed and name not in self.jobs]
        if not kinds:
            return
        key = build_key() if self.cached else ""
        cache = cache_root() if self.cached else None
        for name in kinds:
            kind = KINDS[name]
            if cache is None:
                self.jobs[name] = Job.start(kind.title, kind.steps(root / name),
                                            root / "logs" / name)
                continue
            entry = CacheEntry(cache / f"{name}-{key}", kind.accept)
            prune_cache(cache, name, entry.final)
            self.jobs[name] = Job.start(kind.title, kind.steps(entry.partial),
                                        entry.partial / "logs", entry,
                                        root / "failed" / name)

    def base(self, job: str) -> Path:
        """The directory ``job``'s outputs are under, once it is done."""
        started = self.jobs[job]
        return self.root / job if started.cache is None else started.base

    def result(self, job: str, step: str) -> subprocess.CompletedProcess[str]:
        """What ``step`` of ``job`` did; a job no collected test named starts now."""
        if job not in self.jobs:
            self.launch(frozenset({KINDS[job].fixture}))
        return self.jobs[job].result(step)

    def stop(self) -> None:
        for job in self.jobs.values():
            job.stop()


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
    """Starts every build the collected tests use (sharing the scenario tier with another
    session, those of the modules this session has claimed so far: the rest start when a
    fixture asks); every process is reaped at the end."""
    claimed = claimed_modules(request.config)
    needed = frozenset(
        name for item in request.session.items
        if claimed is None or module_of(item) in claimed
        for name in getattr(item, "fixturenames", ()) if name in _FROZEN_FIXTURES
    )
    builds = Builds(build_root)
    try:
        builds.launch(needed)
        yield builds
    finally:
        builds.stop()


@pytest.fixture(scope="session")
def build_binds(build_root: Path) -> tuple[Path, ...]:
    """What a container that runs a build must bind: the session's ``build_root`` and,
    when builds are cached, the cache (the bundle and delivery live there)."""
    return (build_root, CACHE_ROOT) if cache_enabled() else (build_root,)


@pytest.fixture(scope="session")
def bundle(frozen_builds: Builds) -> Path:
    """``make build``'s bundle: ``valis`` and ``fulcrum`` over the frozen interpreter."""
    done = frozen_builds.result("frozen", "build")
    assert done.returncode == 0, done.stderr
    return frozen_builds.base("frozen") / "frozen" / "valis"


@pytest.fixture(scope="session")
def control_bundle(frozen_builds: Builds) -> Path:
    """The known-bad control: frozen without collecting subsystems or metadata."""
    done = frozen_builds.result("control", "build")
    assert done.returncode == 0, done.stderr
    return frozen_builds.base("control") / "control" / "valis"


@pytest.fixture(scope="session")
def plain_build(frozen_builds: Builds) -> PlainBuild:
    """The build without the serving codec, refused by ``scripts/build``."""
    done = frozen_builds.result("plain", "build")
    return PlainBuild(done, frozen_builds.base("plain") / "plain" / "valis")


@pytest.fixture(scope="session")
def delivery(bundle: Path, frozen_builds: Builds) -> Path:
    """``make dist``'s tarball of the session's bundle (built with it)."""
    done = frozen_builds.result("frozen", "dist")
    assert done.returncode == 0, done.stderr
    return frozen_builds.base("frozen") / "dist" / "valis-serving.tar.gz"


@pytest.fixture(scope="session")
def fresh_deliveries(frozen_builds: Builds) -> FreshDeliveries:
    """The reproducible-build check's fresh-tree deliveries, started with the others (or
    now, if this session claimed their module after the others started)."""
    if frozen_builds.fresh is None:
        frozen_builds.launch(frozenset({"fresh_deliveries"}))
    assert frozen_builds.fresh is not None, "fresh-tree builds were not started"
    return frozen_builds.fresh

"""The frozen builds' cache between sessions (``frozen_build``): a build of one entry runs
once however many sessions ask for it at once, a build that failed is never kept, and
whatever a killed session left half written is never reused.

The builds here are stand-in steps (a shell command that counts its runs and writes an
output) run by the same ``Job`` the real builds run under, in a cache directory of the
test's own.
"""

from __future__ import annotations

from pathlib import Path

from tests.scenario.frozen_build import CacheEntry, Job, Step

ACCEPT = '[ "$(cat build.rc)" = 0 ]'


def stand_in(base: Path, runs: Path, *, status: int = 0) -> tuple[Step, ...]:
    """A build that counts its runs in ``runs``, takes a moment (so that two sessions
    overlap), and writes ``base/out/made``, exiting ``status``."""
    script = (f'echo run >>"{runs}"; sleep 1; mkdir -p "{base}/out" && '
              f'echo made >"{base}/out/made"; exit {status}')
    return (Step("build", ("/bin/sh", "-c", script), base.parent),)


def start(entry: CacheEntry, runs: Path, failed: Path, *, status: int = 0) -> Job:
    return Job.start("stand-in build", stand_in(entry.partial, runs, status=status),
                     entry.partial / "logs", entry, failed)


def test_two_sessions_building_one_entry_at_once_build_it_once(tmp_path: Path) -> None:
    entry = CacheEntry(tmp_path / "cache" / "kind-key", ACCEPT)
    entry.final.parent.mkdir()
    runs = tmp_path / "runs"
    jobs = [start(entry, runs, tmp_path / f"session-{n}" / "failed") for n in (1, 2)]

    for job in jobs:
        assert job.result("build").returncode == 0
        assert job.base == entry.final
    assert runs.read_text() == "run\n"
    assert (entry.final / "out" / "made").read_text() == "made\n"
    assert not entry.partial.exists()

    # A later session reuses the entry without running anything.
    again = start(entry, runs, tmp_path / "session-3" / "failed")
    assert again.process is None
    assert again.result("build").returncode == 0
    assert runs.read_text() == "run\n"


def test_a_failed_build_is_the_sessions_alone_and_the_next_builds_anew(
    tmp_path: Path,
) -> None:
    entry = CacheEntry(tmp_path / "cache" / "kind-key", ACCEPT)
    entry.final.parent.mkdir()
    runs = tmp_path / "runs"
    failed = tmp_path / "session-1" / "failed"

    job = start(entry, runs, failed, status=3)

    assert job.result("build").returncode == 3
    assert job.base == failed
    assert (failed / "out" / "made").exists()
    assert not entry.final.exists()
    assert not entry.partial.exists()
    retried = start(entry, runs, tmp_path / "session-2" / "failed")
    assert retried.result("build").returncode == 0
    assert retried.base == entry.final
    assert runs.read_text() == "run\nrun\n"


def test_what_a_killed_session_left_half_written_is_never_reused(tmp_path: Path) -> None:
    entry = CacheEntry(tmp_path / "cache" / "kind-key", ACCEPT)
    (entry.partial / "out").mkdir(parents=True)
    (entry.partial / "out" / "half").write_text("half written\n")
    runs = tmp_path / "runs"

    job = start(entry, runs, tmp_path / "session" / "failed")

    assert job.result("build").returncode == 0
    assert sorted(p.name for p in (entry.final / "out").iterdir()) == ["made"]
    assert runs.read_text() == "run\n"

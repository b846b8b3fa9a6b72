"""The scenario tier's shared queue (``work_queue.py``): two sessions given one queue run
every module once between them, each module whole in one session, its module fixture
set up and torn down once; without a queue a session runs everything."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = 6
TESTS_EACH = 3

CONFTEST = "from tests.scenario.work_queue import pytest_runtestloop  # noqa: F401\n"
MODULE = '''
import os, time
import pytest

LOG = os.environ["WORK_QUEUE_LOG"]


def note(what):
    with open(LOG, "a") as log:
        log.write(f"{{os.getpid()}} {{what}}\\n")


@pytest.fixture(scope="module")
def shared():
    note("setup {name}")
    yield
    note("teardown {name}")


@pytest.mark.parametrize("n", range({tests}))
def test_one(shared, n):
    time.sleep(0.05)
    note(f"ran {name} {{n}}")
'''


def _tree(root: Path) -> Path:
    tests = root / "queued"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    for index in range(MODULES):
        name = f"test_m{index}"
        (tests / f"{name}.py").write_text(MODULE.format(name=name, tests=TESTS_EACH))
    return tests


def _session(tests: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """A pytest session of ``tests``; the queue is only ``env``'s (this very test may run
    in a session given one)."""
    inherited = {key: value for key, value in os.environ.items() if key != "VALIS_TEST_QUEUE"}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=tests, env={**inherited, "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _lines(log: Path) -> list[tuple[str, str]]:
    return [(pid, what) for pid, _, what in
            (line.partition(" ") for line in log.read_text().splitlines())]


def test_two_sessions_on_one_queue_run_each_module_once_and_whole(tmp_path: Path) -> None:
    tests = _tree(tmp_path)
    log = tmp_path / "log"
    queue = tmp_path / "queue"
    queue.mkdir()
    env = {"VALIS_TEST_QUEUE": str(queue), "WORK_QUEUE_LOG": str(log)}
    sessions = [_session(tests, env) for _ in range(2)]
    outputs = [session.communicate(timeout=120)[0] for session in sessions]
    assert [session.returncode for session in sessions] == [0, 0], outputs
    lines = _lines(log)
    ran = Counter(what for _, what in lines if what.startswith("ran "))
    assert ran == Counter({f"ran test_m{m} {n}": 1
                           for m in range(MODULES) for n in range(TESTS_EACH)})
    by_module: dict[str, set[str]] = {}
    for pid, what in lines:
        by_module.setdefault(what.split()[1], set()).add(pid)
    assert all(len(pids) == 1 for pids in by_module.values()), by_module
    events = Counter(what for _, what in lines if not what.startswith("ran "))
    assert events == Counter({f"{step} test_m{m}": 1
                              for m in range(MODULES) for step in ("setup", "teardown")})
    for pid in {pid for pid, _ in lines}:
        mine = [what for p, what in lines if p == pid]
        # A module's teardown comes before the next module's setup in each session.
        opened = [what.split()[1] for what in mine if what.startswith("setup")]
        closed = [what.split()[1] for what in mine if what.startswith("teardown")]
        assert opened == closed
        assert mine.index(f"teardown {opened[0]}") < (
            mine.index(f"setup {opened[1]}") if len(opened) > 1 else len(mine))


def test_without_a_queue_a_session_runs_everything(tmp_path: Path) -> None:
    tests = _tree(tmp_path)
    log = tmp_path / "log"
    session = _session(tests, {"WORK_QUEUE_LOG": str(log)})
    output = session.communicate(timeout=120)[0]
    assert session.returncode == 0, output
    assert sum(1 for _, what in _lines(log) if what.startswith("ran ")) == MODULES * TESTS_EACH

"""A lock held for a process's life, between real processes: one holder, named when
another asks; a holder killed outright blocks nobody."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from valis_core.life_lock import LockHeld, hold, holder_in_table

# Holds the lock at argv[1] and says so on stdout, then sleeps until killed (bounded).
HOLDER = r"""
import sys, time
from pathlib import Path
from valis_core.life_lock import hold
lock = hold(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


@contextmanager
def holder(path: Path) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(path)],
                          stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "held"
            yield process
        finally:
            process.kill()


def test_a_second_taker_is_refused_naming_the_holders_pid(tmp_path: Path) -> None:
    path = tmp_path / "unit.lock"
    with holder(path) as first:
        with pytest.raises(LockHeld) as refused:
            hold(path)
        assert refused.value.holder == first.pid
        assert path.read_text().strip() == str(first.pid)


def test_a_holder_killed_outright_leaves_its_file_and_blocks_nobody(tmp_path: Path) -> None:
    path = tmp_path / "unit.lock"
    with holder(path) as first:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert path.exists()
    with hold(path) as taken:
        assert taken.held
        assert path.read_text().strip() == str(os.getpid())
    assert not path.exists(), "a release removes the file"


def test_a_released_lock_is_taken_again_at_once(tmp_path: Path) -> None:
    path = tmp_path / "unit.lock"
    hold(path).release()
    with hold(path), pytest.raises(LockHeld):
        hold(path)  # a second open file of this process is refused too


def test_the_holder_is_read_from_the_kernels_table_passing_over_waiters_and_others() -> None:
    lines = [
        "1: POSIX  ADVISORY  WRITE 77 00:1a:99 0 EOF",
        "2: FLOCK  ADVISORY  WRITE 0 00:1a:42 0 EOF",
        "2: -> FLOCK  ADVISORY  WRITE 55 00:1a:42 0 EOF",
        "3: FLOCK  ADVISORY  WRITE 1234 00:1a:42 0 EOF",
    ]
    assert holder_in_table(lines, "00:1a:42") == 1234
    assert holder_in_table(lines, "00:1a:99") is None
    assert holder_in_table([], "00:1a:42") is None

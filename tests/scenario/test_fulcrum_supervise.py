"""Supervision of a real child: signals forwarded, descriptors handed down, bounds kept."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from fulcrum.respawn import RespawnPolicy, Restart
from fulcrum.supervise import ResidentExit, StopLatch, run_resident
from valis_core.fence import FENCED_OUT_EXIT_STATUS

# Exits 0 on SIGTERM after checking the descriptor it was told about is an open socket;
# says so on the ready pipe once its handler is in place.
CHILD = r"""
import os, signal, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
assert sock.type == socket.SOCK_DGRAM, sock.type
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
os.write(int(sys.argv[2]), b"ready")
deadline = time.monotonic() + 30
while not stop and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(0 if stop else 9)
"""

IGNORES_TERM = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(int(sys.argv[1]), b"ready")
time.sleep(30)
"""


@contextmanager
def ready_pipe() -> Iterator[tuple[int, Callable[[int], None]]]:
    """A pipe the child signals readiness on, and an ``on_spawn`` that waits for it
    (bounded) and then sends the launcher SIGTERM, as systemd would."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    open_ends = [read_end, write_end]

    def stop_when_ready(_pid: int) -> None:
        os.close(open_ends.pop())  # the child holds its own copy of the write end
        ready, _, _ = select.select([read_end], [], [], 20)
        assert ready, "the child never got ready"
        assert os.read(read_end, 5) == b"ready"
        os.kill(os.getpid(), signal.SIGTERM)

    try:
        yield write_end, stop_when_ready
    finally:
        for fd in open_ends:
            os.close(fd)


def test_sigterm_to_the_launcher_is_forwarded_and_obeyed_with_the_descriptor_handed_down(
) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    os.set_inheritable(sock.fileno(), True)
    try:
        with ready_pipe() as (ready_fd, stop_when_ready), StopLatch() as latch:
            outcome = run_resident(
                [sys.executable, "-c", CHILD, str(sock.fileno()), str(ready_fd)],
                [sock.fileno(), ready_fd],
                stop_timeout=20,
                latch=latch,
                on_spawn=stop_when_ready,
            )
    finally:
        sock.close()
    assert outcome == ResidentExit(0, stop_signal=signal.SIGTERM)
    assert outcome.exit_status == 0


def test_a_child_ignoring_the_stop_is_killed_when_the_bound_runs_out() -> None:
    with ready_pipe() as (ready_fd, stop_when_ready), StopLatch() as latch:
        outcome = run_resident(
            [sys.executable, "-c", IGNORES_TERM, str(ready_fd)], [ready_fd],
            stop_timeout=0.5, latch=latch, on_spawn=stop_when_ready,
        )
    assert outcome == ResidentExit(-signal.SIGKILL, stop_signal=signal.SIGTERM, killed=True)


def test_a_stop_caught_before_the_start_starts_nothing() -> None:
    spawned: list[int] = []
    with StopLatch() as latch:
        os.kill(os.getpid(), signal.SIGTERM)
        assert latch.received == signal.SIGTERM
        outcome = run_resident(
            [sys.executable, "-c", "raise SystemExit(7)"], [], stop_timeout=5, latch=latch,
            on_spawn=spawned.append,
        )
    assert outcome is None
    assert spawned == []


def test_an_unasked_exit_is_reported_as_such() -> None:
    with StopLatch() as latch:
        outcome = run_resident(
            [sys.executable, "-c", "raise SystemExit(7)"], [], stop_timeout=5, latch=latch
        )
    assert outcome == ResidentExit(7)


# Exits 5 on SIGHUP once its handler is in place (says so on the ready pipe).
EXITS_ON_HUP = r"""
import os, signal, sys, time
hup = []
signal.signal(signal.SIGHUP, lambda *_: hup.append(1))
os.write(int(sys.argv[1]), b"ready")
deadline = time.monotonic() + 30
while not hup and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(5 if hup else 9)
"""


def test_sighup_to_the_launcher_reaches_the_resident_as_a_reload_not_a_stop() -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)

    def hup_when_ready(_pid: int) -> None:
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], 20)
        assert ready, "the child never got ready"
        os.kill(os.getpid(), signal.SIGHUP)

    try:
        with StopLatch() as latch:
            outcome = run_resident(
                [sys.executable, "-c", EXITS_ON_HUP, str(write_end)], [write_end],
                stop_timeout=20, latch=latch, on_spawn=hup_when_ready,
            )
    finally:
        os.close(read_end)
    assert outcome == ResidentExit(5)  # passed through, and no stop was asked for


def test_a_sighup_while_preparing_is_no_stop() -> None:
    with StopLatch() as latch:
        os.kill(os.getpid(), signal.SIGHUP)
        assert latch.received is None


# Records the inode of the socket it was handed, then crashes (status 3) on its first
# two runs; on the third it says so on the ready pipe and waits for SIGTERM.
CRASHES_TWICE = r"""
import os, pathlib, signal, socket, sys, time
runs = pathlib.Path(sys.argv[2])
with runs.open("a") as log:
    log.write(f"{os.fstat(int(sys.argv[1])).st_ino}\n")
if len(runs.read_text().splitlines()) < 3:
    sys.exit(3)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
os.write(int(sys.argv[3]), b"ready")
deadline = time.monotonic() + 30
while not stop and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(0 if stop else 9)
"""


def test_a_crashed_child_is_started_again_on_the_very_same_descriptor(tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    os.set_inheritable(sock.fileno(), True)
    runs = tmp_path / "runs"
    spawned: list[int] = []
    restarts: list[tuple[ResidentExit, Restart]] = []
    try:
        with ready_pipe() as (ready_fd, stop_when_ready), StopLatch() as latch:

            def on_spawn(pid: int) -> None:
                spawned.append(pid)
                if len(spawned) == 3:
                    stop_when_ready(pid)

            outcome = run_resident(
                [sys.executable, "-c", CRASHES_TWICE, str(sock.fileno()), str(runs),
                 str(ready_fd)],
                [sock.fileno(), ready_fd], stop_timeout=20, latch=latch, on_spawn=on_spawn,
                respawn=RespawnPolicy(attempts=3, first_delay=0.01),
                on_respawn=lambda ended, restart: restarts.append((ended, restart)),
            )
        inode = os.fstat(sock.fileno()).st_ino
    finally:
        sock.close()
    assert outcome == ResidentExit(0, stop_signal=signal.SIGTERM, restarts=2)
    assert outcome.exit_status == 0
    assert len(set(spawned)) == 3
    assert runs.read_text().split() == [str(inode)] * 3
    assert [(ended.returncode, restart.attempt) for ended, restart in restarts] == [
        (3, 1), (3, 2)]


def test_restarts_in_a_row_are_bounded_then_the_last_status_is_fulcrums() -> None:
    with StopLatch() as latch:
        outcome = run_resident(
            [sys.executable, "-c", "raise SystemExit(3)"], [], stop_timeout=5, latch=latch,
            respawn=RespawnPolicy(attempts=2, first_delay=0.01),
        )
    assert outcome is not None
    assert (outcome.returncode, outcome.restarts, outcome.exit_status) == (3, 2, 3)
    assert outcome.gave_up is not None
    assert "at most 2 times in a row" in outcome.gave_up
    assert "not started again" in outcome.describe()


def test_a_fenced_out_child_is_not_started_again() -> None:
    with StopLatch() as latch:
        outcome = run_resident(
            [sys.executable, "-c", f"raise SystemExit({FENCED_OUT_EXIT_STATUS})"], [],
            stop_timeout=5, latch=latch, respawn=RespawnPolicy(first_delay=0.01),
        )
    assert outcome == ResidentExit(FENCED_OUT_EXIT_STATUS)


def test_a_stop_while_a_restart_waits_starts_nothing_more_and_is_a_stop_carried_out() -> None:
    spawned: list[int] = []
    with StopLatch() as latch:
        outcome = run_resident(
            [sys.executable, "-c", "raise SystemExit(3)"], [], stop_timeout=5, latch=latch,
            on_spawn=spawned.append, respawn=RespawnPolicy(first_delay=60, max_delay=60),
            on_respawn=lambda _ended, _restart: os.kill(os.getpid(), signal.SIGTERM),
        )
    assert outcome == ResidentExit(3, stop_signal=signal.SIGTERM, between_runs=True)
    assert outcome.exit_status == 0
    assert len(spawned) == 1

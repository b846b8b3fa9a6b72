"""The record of a unit a supervisor started, so that a re-run finds it.

``valis condense --unit-command CMD`` and ``valis apply --supervise CMD`` start CMD in a
session of its own and stay to supervise it. One that is lost (killed, its terminal
gone before SIGHUP was handled) leaves its unit running, unsupervised. So each holds,
for as long as it supervises, the supervisor lock of CMD (``valis_core.life_lock``) and
records the unit it started beside it, both under ``record_dir()`` named for CMD. A
re-run of either verb with the same CMD:

- finds the lock held by a live supervisor, and is refused, naming that supervisor's
  pid (one supervisor per unit; stop that one, by SIGTERM or SIGHUP, first);
- or takes the lock, finds the record of a unit still running, and stops it cleanly
  before starting its own: SIGTERM, its stop bound, then SIGKILL (``stop_recorded``).

A record names its process by pid and by the process's start time, in its pid
namespace; it is acted on only through a pidfd opened before the start time is
checked, so a pid reused by another process since is never signalled. Where ``/proc``
does not show this pid namespace (``unshare --pid`` without its own ``/proc``) pids
cannot be checked, and nothing is recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import stat
from collections.abc import Sequence
from pathlib import Path

import attrs

from valis_core.atomic import write_atomic
from valis_core.clock import Clock, monotonic
from valis_core.documents import Document
from valis_core.errors import ValisError

#: Where root's supervisors keep their locks and records (``/run``: gone at boot, as
#: every process they name is).
ROOT_RECORD_DIR = Path("/run/valis/units")
RECORD_DIR_MODE = 0o700
RECORD_MODE = 0o600
#: How long a recorded unit gets to die after SIGKILL before the stop gives up on it.
KILL_TIMEOUT = 10.0


class UnitRecordError(ValisError):
    """A recorded unit could not be read or stopped."""


@attrs.frozen
class UnitRecord:
    """A unit a supervisor started: its process, and the command it runs."""

    pid: int
    #: the process's start time, in clock ticks after boot (``/proc/PID/stat`` field 22)
    start: int
    #: the pid namespace ``pid`` is a number in (the inode of its nsfs file)
    pidns: int
    command: tuple[str, ...]


DOCUMENT: Document[UnitRecord] = Document(
    kind=UnitRecord,
    name="the unit record",
    error=UnitRecordError,
    remedy="check that no unit it named still runs (ps), then remove it",
)
"""A unit record as a JSON document (``valis_core.documents``)."""


def record_dir() -> Path | None:
    """Where this account's supervisors keep their locks and records; None where no
    private place can be had (another account than root without ``XDG_RUNTIME_DIR``)."""
    if os.geteuid() == 0:
        return ROOT_RECORD_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "valis-units" if runtime else None


def ensure_record_dir(path: Path) -> None:
    """Make ``path`` (0700) if missing; refuse one another account could write into."""
    try:
        os.makedirs(path, mode=RECORD_DIR_MODE, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise UnitRecordError(
            f"cannot make the unit record directory {path}: {exc.strerror or exc}"
        ) from None
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & 0o022
    ):
        raise UnitRecordError(
            f"the unit record directory {path} is not a directory of this account's that "
            f"only it may write (owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o});"
            " remove it, and it is made again"
        )


def unit_key(command: Sequence[str]) -> str:
    """The name a command's lock and record share: the same command, the same name."""
    digest = hashlib.sha256("\0".join(command).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:24]


def proc_shows_own_pidns() -> bool:
    """Whether ``/proc``'s pids are this process's pid namespace's."""
    try:
        return int(os.readlink("/proc/self")) == os.getpid()
    except (OSError, ValueError):
        return False


def own_pidns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def start_time(pid: int) -> int | None:
    """``pid``'s start time in clock ticks after boot; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read()
    except OSError:
        return None
    # The name (field 2) may hold spaces and parentheses; the fields after it do not.
    after_name = text[text.rindex(b")") + 2:].split()
    return int(after_name[19])  # field 22; after_name[0] is field 3


def record_of(pid: int, command: Sequence[str]) -> UnitRecord | None:
    """The record of the running process ``pid``; None when it cannot be checked later."""
    if not proc_shows_own_pidns():
        return None
    started = start_time(pid)
    if started is None:
        return None
    return UnitRecord(pid, started, own_pidns(), tuple(command))


def write_record(path: Path, record: UnitRecord) -> None:
    write_atomic(path, DOCUMENT.render(record), mode=RECORD_MODE)


def read_record(path: Path) -> UnitRecord | None:
    """The record at ``path``; None when there is none. One that does not parse is
    refused, naming the file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnitRecordError(f"cannot read the unit record {path}: {exc.strerror}") from None
    return DOCUMENT.read(data, name=f"the unit record {path} does not parse")


def open_recorded(record: UnitRecord) -> int | None:
    """A pidfd on the recorded unit when it still runs; None when it is gone, or when
    ``record`` is another pid namespace's (its pid means nothing here)."""
    if record.pidns != own_pidns() or not proc_shows_own_pidns():
        return None
    try:
        fd = os.pidfd_open(record.pid)
    except ProcessLookupError:
        return None
    # Checked after the pidfd was opened: if the pid names the recorded process now, the
    # pidfd is that process's; if it names another, that one is not touched.
    if start_time(record.pid) != record.start:
        os.close(fd)
        return None
    return fd


def stop_recorded(record: UnitRecord, stop_timeout: float) -> bool:
    """Stop the recorded unit if it still runs: SIGTERM, ``stop_timeout``, then SIGKILL.

    Whether it was running. Raises ``UnitRecordError`` when it outlives its SIGKILL.
    """
    fd = open_recorded(record)
    if fd is None:
        return False
    try:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGTERM)
        if _exits_within(fd, stop_timeout):
            return True
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        if not _exits_within(fd, KILL_TIMEOUT):
            raise UnitRecordError(
                f"the unit an earlier supervisor started (pid {record.pid}: "
                f"{' '.join(record.command)}) still runs after SIGKILL; find out what holds "
                "it before starting the unit again"
            )
        return True
    finally:
        os.close(fd)


def _exits_within(pidfd: int, timeout: float, ticks: Clock = monotonic) -> bool:
    deadline = ticks() + timeout
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while (left := deadline - ticks()) > 0:
        if poller.poll(left * 1000):
            return True
    return bool(poller.poll(0))

"""A lock held for a process's life: one holder of a name at a time, by construction.

``hold(path)`` takes an exclusive ``flock`` on ``path`` (created 0600 when missing)
without waiting. While another process holds it, ``LockHeld`` is raised naming that
process: the pid the kernel's own table (``/proc/locks``) gives for the file, else the
pid its holder wrote into it. The kernel drops a flock with the last descriptor of its
open file, so a holder killed outright (SIGKILL) blocks nobody: its file stays, unheld,
and the next ``hold`` takes it. The descriptor is close-on-exec, so nothing the holder
execs keeps the lock after the holder is gone.

``HeldLock.release()`` removes the file while still holding it, then lets go. A taker
that opened the file before that removal and locks it after would hold a lock on a name
that is gone, so every take checks that the file it locked is still the one at the path,
and takes again if not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from valis_core.errors import ValisError

LOCK_MODE = 0o600
_TAKE_ATTEMPTS = 8
_LOCKS_TABLE = "/proc/locks"


class LockHeld(ValisError):
    """Another live process holds the lock."""

    def __init__(self, path: Path, holder: int | None) -> None:
        who = f"pid {holder}" if holder is not None else "a process whose pid is unknown"
        super().__init__(f"{path} is held by {who}")
        self.path = path
        self.holder = holder


class HeldLock:
    """An exclusive flock this process holds on ``path`` until ``release()``."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Remove the lock file and let go of the lock; a second call does nothing."""
        if self._fd < 0:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        finally:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def hold(path: Path) -> HeldLock:
    """Take the lock at ``path`` now, or raise ``LockHeld`` naming its holder.

    The directory must exist. An ``OSError`` opening the file propagates (the caller
    names the stage).
    """
    for _ in range(_TAKE_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, LOCK_MODE)
        try:
            taken = _take(fd, path)
        except BaseException:
            os.close(fd)
            raise
        if taken:
            return HeldLock(path, fd)
        os.close(fd)  # the file was removed under us: take the one at the path now
    raise LockHeld(path, None)  # pragma: no cover - needs eight removals in a row


def _take(fd: int, path: Path) -> bool:
    """Lock ``fd``; whether it is still the file at ``path`` (then the pid is written)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LockHeld(path, holder_of(fd)) from None
    try:
        at_path = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    if (at_path.st_dev, at_path.st_ino) != (mine.st_dev, mine.st_ino):
        return False
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return True


def holder_of(fd: int) -> int | None:
    """The pid holding a flock on the file open at ``fd``, as far as it can be known."""
    info = os.fstat(fd)
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open(_LOCKS_TABLE, encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        lines = []
    holder = holder_in_table(lines, key)
    if holder is not None:
        return holder
    with contextlib.suppress(OSError, ValueError):
        written = int(os.pread(fd, 32, 0).decode("ascii", errors="replace").strip())
        return written if written > 0 else None
    return None


def holder_in_table(lines: list[str], key: str) -> int | None:
    """The pid of the granted FLOCK on ``key`` (``MAJ:MIN:INODE``) in ``/proc/locks``.

    A line reads ``1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF``; waiters (``->``)
    and other kinds of lock are passed over, as is a pid the reader cannot see (0, -1).
    """
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        pid, file = fields[4], fields[5]
        if file == key and pid.isdigit() and int(pid) > 0:
            return int(pid)
    return None

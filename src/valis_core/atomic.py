"""The one durable writer: a file either appears whole, with its final mode, or not at all.

Every durable write in valis goes through here so that a crash, a full disk or a refusal
never leaves a torn or half-permissioned file. The data goes to a temporary file in the
target's own directory (so the final step is a same-filesystem rename or link), created
with ``O_EXCL`` and already carrying its final mode, then fsync'd; the directory is
fsync'd after the name changes so the new name survives a power cut. On any failure the
temporary file is removed and an existing target is left exactly as it was.

A writer killed outright (SIGKILL, a power cut) cannot remove its temporary file, so the
next write of the same name sweeps it. A live writer holds an exclusive ``flock`` on its
temporary file from creation until the file's name is gone, and the kernel drops that
lock when the writer dies: a temporary file nobody holds is an orphan, and only orphans
are swept, so a racing writer's file is never taken from under it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
from pathlib import Path

_TEMP_ATTEMPTS = 16


def write_atomic(
    path: Path, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> None:
    """Replace (or create) ``path`` with ``data``, atomically and durably; ``owner``
    (uid, gid) is given to the new file before it takes the name, as root may."""
    sweep_orphans(path)
    fd, temp = _write_temp(path, data, mode)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # a chown clears set-id bits; the mode stays as asked
            os.fsync(fd)
        os.replace(temp, path)
    except BaseException:
        _discard(temp)
        raise
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data``, atomically; raise ``FileExistsError`` if it exists.

    The complete, fsync'd temporary file is hard-linked to the final name, and linking
    never replaces, so of two writers racing for one name exactly one wins and a reader
    never sees a partial file under it. Where the filesystem allows it the temporary
    file is unnamed (``O_TMPFILE``) until that link, so a writer killed at any point
    leaves nothing behind, not even a temporary file for the next write to sweep.
    """
    sweep_orphans(path)
    fd = _open_unnamed(path.parent, mode)
    if fd is None:
        fd, temp = _write_temp(path, data, mode)
        try:
            os.link(temp, path)
        finally:
            _discard(temp)
            os.close(fd)
    else:
        try:
            _fill(fd, data, mode)
            _link_unnamed(fd, path)
        finally:
            os.close(fd)
    fsync_dir(path.parent)


def _link_unnamed(fd: int, path: Path) -> None:
    """Give the unnamed file open as ``fd`` the name ``path`` (never replacing)."""
    # linkat(AT_SYMLINK_FOLLOW) through /proc/self/fd; a src_dir_fd makes os.link use
    # linkat with the flag rather than link(), which would not follow the magic link.
    proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _open_unnamed(directory: Path, mode: int) -> int | None:
    """An unnamed file in ``directory`` (``O_TMPFILE``), or None where there is none to
    be had (a filesystem without it, no /proc to link it through)."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode & 0o777)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def sweep_orphans(path: Path) -> None:
    """Remove the temporary files killed writers of ``path`` left beside it.

    Best effort: a file this process cannot open, lock or remove is left alone, and
    sweeping never makes a write fail.
    """
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[0-9a-f]{{12}}\.tmp")
    try:
        entries = [entry.name for entry in os.scandir(path.parent)]
    except OSError:
        return
    for name in entries:
        if pattern.fullmatch(name):
            _sweep_if_orphan(path.parent / name)


def _sweep_if_orphan(temp: Path) -> None:
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same_file(temp, fd):
            os.unlink(temp)
    except OSError:
        pass  # held by a live writer, or not ours to remove
    finally:
        os.close(fd)


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _write_temp(path: Path, data: bytes, mode: int) -> tuple[int, Path]:
    """Write ``data`` to a fresh temporary sibling of ``path`` with ``mode``; fsync it.

    Returns the descriptor, which holds the temporary file's lock: keep it open until
    the temporary name is gone (renamed or removed), then close it.
    """
    fd, temp = _open_temp(path, mode)
    try:
        _fill(fd, data, mode)
    except BaseException:
        _discard(temp)
        os.close(fd)
        raise
    return fd, temp


def _fill(fd: int, data: bytes, mode: int) -> None:
    # The umask may have narrowed the mode given to open(); set it exactly.
    os.fchmod(fd, mode)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def _open_temp(path: Path, mode: int) -> tuple[int, Path]:
    """A new temporary sibling of ``path``, open and locked by this process."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TEMP_ATTEMPTS):
        temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temp, flags, mode & 0o777)
        except FileExistsError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A sweeper may have taken the file between open and lock: start again.
            if _same_file(temp, fd):
                return fd, temp
        except BaseException:
            _discard(temp)
            os.close(fd)
            raise
        os.close(fd)
    raise FileExistsError(f"could not create a temporary file beside {path}")


def _discard(temp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)


def fsync_dir(directory: Path) -> None:
    """Make a rename or link inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

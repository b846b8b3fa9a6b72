"""The one durable writer: a file either appears whole, with its final mode, or not at all.

Every durable write in valis goes through here so that a crash, a full disk or a refusal
never leaves a torn or half-permissioned file. The data goes to a temporary file in the
target's own directory (so the final step is a same-filesystem rename or link), created
with ``O_EXCL`` and already carrying its final mode, then fsync'd; the directory is
fsync'd after the name changes so the new name survives a power cut. On any failure the
temporary file is removed and an existing target is left exactly as it was.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

_TEMP_ATTEMPTS = 16


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace (or create) ``path`` with ``data``, atomically and durably."""
    temp = _write_temp(path, data, mode)
    try:
        os.replace(temp, path)
    except BaseException:
        _discard(temp)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data``, atomically; raise ``FileExistsError`` if it exists.

    The complete, fsync'd temporary file is hard-linked to the final name, and linking
    never replaces, so of two writers racing for one name exactly one wins and a reader
    never sees a partial file under it.
    """
    temp = _write_temp(path, data, mode)
    try:
        os.link(temp, path)
    finally:
        _discard(temp)
    fsync_dir(path.parent)


def _write_temp(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a fresh temporary sibling of ``path`` with ``mode``; fsync it."""
    fd, temp = _open_temp(path, mode)
    try:
        try:
            # The umask may have narrowed the mode given to open(); set it exactly.
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _discard(temp)
        raise
    return temp


def _open_temp(path: Path, mode: int) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TEMP_ATTEMPTS):
        temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp, flags, mode & 0o777), temp
        except FileExistsError:
            continue
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

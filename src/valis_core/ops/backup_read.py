"""Reading the backup-critical set out of a state directory, safely.

Every file is opened relative to its directory's descriptor and nothing through a
symlink, and when this is root every read is done as the state directory's owner
(``acting_as``): no file outside the state directory, and none its owner could not read,
reaches a backup set.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from valis_core.acting_as import acting_as
from valis_core.ops.backup_manifest import MAX_ARCHIVE_BYTES, MAX_FILES, BackupError
from valis_core.state_layout import (
    CONFIG_STORE,
    EDGE_BACKED_UP,
    OPERATOR_STATE_TLS,
    SIGNING_KEYS,
    STORE_HEAD,
)
from valis_core.state_layout import KEYFILE as KEYFILE_NAME

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MAX_DEPTH = 8


def _refusal(shown: Path, parent: int, name: str, exc: OSError, what: str) -> BackupError:
    try:
        linked = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        linked = False
    if linked:
        return BackupError(
            f"backup: {shown} is a symlink; the backup set is read only from the state "
            "directory's own files and directories, never through a link (replace it with "
            f"the {what} itself)"
        )
    if isinstance(exc, NotADirectoryError) and what == "directory":
        return BackupError(f"backup: {shown} is not a directory")
    return BackupError(
        f"backup: cannot read {shown}: {exc.strerror or exc}; everything in the backup set "
        "must be readable by the state directory's owner (the run account), as the resident "
        "reads it"
    )


def _open_dir(parent: int, name: str, shown: Path) -> int | None:
    """A descriptor of directory ``name`` beneath ``parent``, never through a symlink;
    None when there is none."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refusal(shown, parent, name, exc, "directory") from exc


def _read_file(parent: int, name: str, shown: Path) -> bytes | None:
    """The bytes of regular file ``name`` beneath ``parent``, never through a symlink;
    None when there is none."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refusal(shown, parent, name, exc, "file") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BackupError(f"backup: {shown} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(MAX_ARCHIVE_BYTES + 1)
    finally:
        os.close(fd)


def read_beneath(root: int, state_dir: Path, path: str) -> bytes | None:
    """The bytes of ``path`` (relative) under the directory open as ``root``, every
    component opened relative to the one before it and none through a symlink, so a
    directory swapped for a link between any two steps is refused, never followed."""
    *directories, name = path.split("/")
    fds: list[int] = []
    try:
        parent = root
        for depth, directory in enumerate(directories):
            fd = _open_dir(parent, directory, state_dir.joinpath(*directories[: depth + 1]))
            if fd is None:
                return None
            fds.append(fd)
            parent = fd
        return _read_file(parent, name, state_dir / path)
    finally:
        for fd in fds:
            os.close(fd)


def _read_tree(
    parent: int, state_dir: Path, directory: str, out: dict[str, bytes], depth: int = 0
) -> None:
    """Every file beneath ``directory`` (under ``parent``) into ``out`` by relative path,
    listed and read through the same directory descriptors: what is read is what was
    listed, never a link's target."""
    shown = state_dir / directory
    fd = _open_dir(parent, directory.rsplit("/", 1)[-1], shown)
    if fd is None:
        return
    try:
        if depth > _MAX_DEPTH:
            raise BackupError(f"backup: {shown} is nested deeper than {_MAX_DEPTH} directories")
        with os.scandir(fd) as entries:
            names = sorted(
                (entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries
            )
        for name, is_dir in names:
            if len(out) > MAX_FILES:
                raise BackupError(f"backup: the set under {state_dir} exceeds {MAX_FILES} files")
            relative = f"{directory}/{name}"
            if is_dir:
                _read_tree(fd, state_dir, relative, out, depth + 1)
                continue
            data = _read_file(fd, name, state_dir / relative)
            if data is not None:
                out[relative] = data
    finally:
        os.close(fd)


@contextlib.contextmanager
def opened_state_dir(state_dir: Path) -> Iterator[int]:
    """A descriptor of the state directory itself (the path the operator named)."""
    try:
        root = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise BackupError(
            f"backup: cannot open the state directory {state_dir}: {exc.strerror or exc}"
        ) from exc
    try:
        yield root
    finally:
        os.close(root)


def _owner(fd: int) -> tuple[int, int] | None:
    """The account that owns the state directory open as ``fd``, when it is not root."""
    info = os.fstat(fd)
    return None if info.st_uid == 0 else (info.st_uid, info.st_gid)


def read_backup_files(state_dir: Path) -> dict[str, bytes]:
    """The backup-critical files present under ``state_dir``, by relative path.

    The owner seed and the store head are required; the configuration store, the
    edge's keys and certificate, the zone-signing keys and the operator-state client
    certificate (a node that reaches a database host) are taken when present. Every
    file is opened relative to its directory's descriptor and nothing through a symlink
    (a link in place of a file or directory refuses the backup), and when this is root
    every read is done as the state directory's owner (``acting_as``): no file outside
    the state directory, and none its owner could not read, reaches the archive.
    """
    contents: dict[str, bytes] = {}
    with opened_state_dir(state_dir) as root, acting_as(_owner(root)):
        for required in (KEYFILE_NAME, STORE_HEAD):
            data = read_beneath(root, state_dir, required)
            if data is None:
                raise BackupError(
                    f"backup: {state_dir / required} is missing; a state directory "
                    "without its "
                    f"{'owner seed' if required == KEYFILE_NAME else 'store head'} is "
                    "not a node to back up (was it condensed and booted?)"
                )
            contents[required] = data
        for optional in EDGE_BACKED_UP:
            data = read_beneath(root, state_dir, optional)
            if data is not None:
                contents[optional] = data
        for directory in (CONFIG_STORE, SIGNING_KEYS, OPERATOR_STATE_TLS):
            _read_tree(root, state_dir, directory, contents)
    return dict(sorted(contents.items()))

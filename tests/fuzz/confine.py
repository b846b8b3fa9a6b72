"""Proof that a reader writes nowhere but its scratch directory.

A process-wide audit hook (PEP 578) sees every file the interpreter opens for writing and
every directory, link, rename, removal and mode change it asks for. While ``confined``
is active, each such path must resolve inside the scratch directory; one that does not
is refused (the hook raises, which aborts the call) and recorded, and the block ends in
``Escaped`` even if the reader swallowed the refusal. A call relative to a directory
descriptor (as ``shutil.rmtree`` makes them) is judged where that descriptor points.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.link": ((1, 3),),
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.truncate": ((0, None),),
    "os.utime": ((0, 3),),
    "shutil.rmtree": ((0, 1),),
    "shutil.copyfile": ((1, None),),
    "shutil.move": ((1, None),),
}
"""Audit events that change the filesystem: for each path written, the index of its
argument and of the directory descriptor it is relative to (if the event has one)."""

_state: dict[str, Any] = {"root": None, "escapes": []}


class Escaped(AssertionError):
    """A reader wrote, or tried to write, outside its scratch directory."""


def _outside(path: object, dir_fd: object = None, *, follow: bool = True) -> bool:
    """Whether ``path`` lies outside the scratch root. ``follow``: judge where a final
    symlink leads (opening follows it), else the link itself (removing or renaming it)."""
    if isinstance(path, int) or path is None:
        return False
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    relative_to_fd = isinstance(dir_fd, int) and dir_fd >= 0
    base = os.readlink(f"/proc/self/fd/{dir_fd}") if relative_to_fd else os.getcwd()
    root = _state["root"]
    assert isinstance(root, str)
    full = os.path.join(base, os.fspath(path))  # type: ignore[call-overload]
    if follow:
        resolved = os.path.realpath(full)
    else:
        resolved = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
    return resolved != root and not resolved.startswith(root + os.sep)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _state["root"] is None:
        return
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing and _outside(path):
            _escape(event, path)
    elif event in _PATH_EVENTS:
        for at, fd_at in _PATH_EVENTS[event]:
            dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
            if at < len(args) and _outside(args[at], dir_fd, follow=False):
                _escape(event, args[at])


def _escape(event: str, path: object) -> None:
    """Record the escape (so a reader that swallows errors is still found out) and stop
    the call: an exception raised by an audit hook aborts the operation."""
    _state["escapes"].append((event, path))
    raise Escaped(f"{event} {path!r} is outside the scratch directory")


_installed: list[bool] = []


@contextlib.contextmanager
def confined(scratch: Path) -> Iterator[None]:
    """Run the block with every filesystem write checked against ``scratch``."""
    if not _installed:
        sys.addaudithook(_hook)
        _installed.append(True)
    _state["root"] = os.path.realpath(scratch)
    _state["escapes"] = []
    try:
        yield
    finally:
        escapes = list(_state["escapes"])
        _state["root"] = None
    if escapes:
        raise Escaped(f"wrote outside {scratch}: {escapes[:5]}")

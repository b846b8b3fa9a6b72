"""Running one input through a target, naming what went wrong, and shrinking it.

A finding is named by its kind and where it was raised (the exception type and the
innermost project frame, or the invariant's message for ``Broken``), so inputs that
break a reader the same way count once and minimise towards the same failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import attrs

from tests.fuzz.targets import Broken, Target

_PROJECT = ("/valis_core/", "/tests/fuzz/")
_BLOCK = 512


@attrs.frozen
class Finding:
    """What one input did to a target that it must not do."""

    target: str
    signature: str
    detail: str


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    inner = [f for f in frames if any(part in f.filename for part in _PROJECT)]
    frame = (inner or frames)[-1] if frames else None
    return f"{Path(frame.filename).name}:{frame.name}" if frame is not None else "?"


def _without_figures(message: str) -> str:
    """An invariant's message with its numbers taken out, cut short: the same failure
    on inputs of other sizes gets the same signature."""
    return re.sub(r"[0-9]+", "N", message)[:80]


def run_one(target: Target, data: bytes, scratch: Path) -> Finding | None:
    """Run ``data`` through ``target`` in a fresh directory under ``scratch``."""
    work = Path(tempfile.mkdtemp(dir=scratch))
    try:
        target.run(data, work)
    except target.expected:
        return None
    except Broken as exc:
        message = str(exc)
        return Finding(target.name, f"Broken: {_without_figures(message)}", message)
    except Exception as exc:
        return Finding(
            target.name, f"{type(exc).__name__} at {_where(exc)}", f"{type(exc).__name__}: {exc}"
        )
    finally:
        _remove(work)
    return None


def minimise(
    data: bytes, fails: Callable[[bytes], bool], *, budget: int = 2000
) -> bytes:
    """A shorter input for which ``fails`` still holds: whole 512-byte blocks removed
    first (tar keeps its headers on block boundaries), then chunks, largest first, then
    bytes zeroed; at most ``budget`` tries."""
    tries = 0
    chunks = [_BLOCK] if len(data) % _BLOCK == 0 else []
    chunk = max(1, len(data) // 2)
    while chunk >= 1:
        chunks.append(chunk)
        chunk //= 2
    for chunk in chunks:
        at = 0
        while at < len(data) and tries < budget:
            candidate = data[:at] + data[at + chunk :]
            tries += 1
            if candidate != data and fails(candidate):
                data = candidate
            else:
                at += chunk
    for at in range(len(data)):
        if tries >= budget:
            break
        if data[at]:
            candidate = data[:at] + b"\x00" + data[at + 1 :]
            tries += 1
            if fails(candidate):
                data = candidate
    return data


def _remove(work: Path) -> None:
    """Remove a scratch directory, however deep a reader left it."""
    try:
        shutil.rmtree(work, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", str(work)], check=False)

"""The kept corpus: ``corpus/<target>/<sha1>`` files, one input each.

Seeds (real queries, framings, signed UPDATEs, a delivery and a backup set made by the
project's own writers) and every crashing input found, minimised, live side by side:
``make test`` replays all of them. ``corpus/pending/<target>/`` holds inputs that still
break a reader whose fix is under way elsewhere; they are replayed only on request.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
PENDING = CORPUS / "pending"


def directory(target: str, *, pending: bool = False) -> Path:
    return (PENDING if pending else CORPUS) / target


def load(target: str, *, pending: bool = False) -> list[tuple[str, bytes]]:
    """Every kept input of ``target`` as (file name, bytes), in name order."""
    where = directory(target, pending=pending)
    if not where.is_dir():
        return []
    return [(path.name, path.read_bytes()) for path in sorted(where.iterdir()) if path.is_file()]


def save(target: str, data: bytes, *, pending: bool = False, prefix: str = "") -> Path:
    """Keep ``data`` under its content hash; an input kept already is left as it is."""
    where = directory(target, pending=pending)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{prefix}{hashlib.sha1(data).hexdigest()}"
    if not path.exists():
        path.write_bytes(data)
    return path

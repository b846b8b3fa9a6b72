"""Proving a master file clean: no error and no warning of ``valis zone check``, in C.

Most files checked are clean, and for them the check's loop (``check.check_zone_text``)
does far more than needed: a Python object for every record, owner tables, and notes of
where each owner, RRset and record first stands, kept only to place findings. Here the
records are read into C memory (``master.RecordTable``: the reader's compiled plain lines
write them there directly) and proven clean by ``_check.clean_count``, which says so or
says it cannot tell; any doubt sends the file to the check whole. This module imports
neither attrs nor dnspython, so ``valis zone check`` of a clean plain zone starts without
them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from valis_core.dns.wire import MasterFileError
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.master import RecordTable, TableLines, read_master

if TYPE_CHECKING:
    from valis_core.dns.wire.master import Table

_clean_count: Callable[[bytearray, bytearray, bytes, frozenset[str]], int] | None
try:  # the compiled proof (_check.c)
    from valis_core.dns.zone._check import clean_count as _clean_count
except ImportError:  # not built: every file goes to the check whole
    _clean_count = None

TLDS = frozenset(
    [
        "com",
        "net",
        "org",
        "edu",
        "gov",
        "mil",
        "int",
        "arpa",
        "info",
        "biz",
        "io",
        "uk",
        "de",
        "fr",
        "nl",
        "eu",
        "jp",
        "cn",
        "ru",
        "br",
        "au",
        "ca",
        "ch",
    ]
)
"""Last labels that make a relative name look like an absolute one missing its dot."""


def canonical_origin(origin: str) -> str:
    """``origin`` as the check names its zone: absolute, lowercased. Raises
    ``names.BadName``."""
    return wire.to_text(wire.from_text(origin if origin.endswith(".") else origin + ".").lower())


Reading = tuple[str, "Table", list[MasterFileError]]
"""One file read for the proof: its zone (canonical), its records in C memory with their
lines, and the faults met reading it (``check.check_zone_text`` goes on from it when the
proof fails, rather than read the file again)."""


def read_table(text: str, zone: str) -> Reading | None:
    """``text`` read for the proof (``zone`` canonical); None when not built."""
    if _clean_count is None or RecordTable is None:
        return None
    table = RecordTable()
    problems: list[MasterFileError] = []
    read_master(text, zone, table.append, problems=problems, positions=TableLines(table))
    return zone, table, problems


def proven(reading: Reading) -> int | None:
    """The record count of a file read without a fault that brings no error and no
    warning, proven in C; None when C cannot tell (the file is then judged whole)."""
    zone, table, problems = reading
    if problems or _clean_count is None:
        return None
    count = _clean_count(table.records, table.arena, wire.from_text(zone).lower(), TLDS)
    return count if count >= 0 else None


def prove(text: str, origin: str) -> tuple[Reading | None, int | None]:
    """``text`` read for the zone ``origin`` (as given) and the proof tried: the reading
    (None when not built, or when the origin is no name: the check names that fault) and
    the record count (None unless the file is proven clean)."""
    try:
        zone = canonical_origin(origin)
    except wire.BadName:
        return None, None
    reading = read_table(text, zone)
    return reading, None if reading is None else proven(reading)


def clean_count(text: str, origin: str) -> tuple[str, int] | None:
    """The zone (``origin``, canonical) and record count of a file that brings no error
    and no warning, proven in C; None when C cannot tell (or is not built, or the origin
    is no name)."""
    reading, count = prove(text, origin)
    return None if reading is None or count is None else (reading[0], count)

"""``valis zone import|export|list|check``: the operator's zones in operator state.

An import parses the master file, has the zone index accept it, and only then replaces
the zone's records in one transaction; a zone the index refuses writes nothing. Imports
are operator writes, not node writes, so they are not fenced by an instance generation;
two imports of one zone serialize on the zone's row (see ``operator_state.zones``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from valis_cli.operator_dsn import add_dsn_arguments, operator_dsn
from valis_core.errors import ValisError


class ZoneFileError(ValisError):
    """A zone file that cannot be read."""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("zone", help="zones in the operator-state database")
    actions = parser.add_subparsers(dest="zone_command", metavar="ACTION", required=True)

    run = actions.add_parser(
        "import",
        help="replace a zone with the records of an RFC 1035 master file",
        description=(
            "Parse FILE, check it serves, and replace the zone's records in one transaction. "
            "An invalid zone is refused with nothing written."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("file", type=Path, metavar="FILE", help="master file ('-' for stdin)")
    run.add_argument("--origin", help="the zone's name (default: $ORIGIN or the SOA owner)")
    run.set_defaults(handler=_import)

    run = actions.add_parser("export", help="print a zone as a master file")
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.set_defaults(handler=_export)

    run = actions.add_parser("list", help="list zones with record counts and SOA serials")
    add_dsn_arguments(run)
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.set_defaults(handler=_list)

    run = actions.add_parser("check", help="check a master file serves, without a database")
    run.add_argument("file", type=Path, metavar="FILE", help="master file ('-' for stdin)")
    run.add_argument("--origin", help="the zone's name (default: $ORIGIN or the SOA owner)")
    run.set_defaults(handler=_check)


def _read(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ZoneFileError(f"zone file {path}: cannot read it: {exc}") from exc


class _Progress:
    """Progress on stderr, only when stderr is a terminal (a log stays clean)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._on = stream.isatty()
        self._started = time.monotonic()

    def say(self, text: str) -> None:
        if self._on:
            self._stream.write(f"\r\033[K{text}")
            self._stream.flush()

    def rows(self, done: int, total: int) -> None:
        self.say(f"writing records: {done}/{total} ({time.monotonic() - self._started:.1f}s)")

    def end(self) -> None:
        if self._on:
            self._stream.write("\r\033[K")
            self._stream.flush()


def _import(args: argparse.Namespace) -> int:
    from valis_core.dns.zone_build import parse_zone_text
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.zones import replace_zone

    progress = _Progress(sys.stderr)
    try:
        progress.say(f"parsing {args.file}")
        rows = parse_zone_text(_read(args.file), args.origin)
        progress.say(f"checking {len(rows)} records")
        with connect(operator_dsn(args), require_schema=True) as conn:
            summary = replace_zone(conn, rows, progress=progress.rows)
    finally:
        progress.end()
    print(f"imported zone {summary.name}: {summary.records} records, serial {summary.serial}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.zones import export_zone_text

    with connect(operator_dsn(args), require_schema=True) as conn:
        sys.stdout.write(export_zone_text(conn, args.zone))
    return 0


def _list(args: argparse.Namespace) -> int:
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.zones import list_zones

    with connect(operator_dsn(args), require_schema=True) as conn:
        zones = list_zones(conn)
    if args.json:
        document = [
            {"zone": zone.name, "records": zone.records, "serial": zone.serial} for zone in zones
        ]
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for zone in zones:
        serial = "-" if zone.serial is None else str(zone.serial)
        print(f"{zone.name}\t{zone.records}\t{serial}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from valis_core.dns.zone import ZoneIndex
    from valis_core.dns.zone_build import parse_zone_text

    rows = parse_zone_text(_read(args.file), args.origin)
    index = ZoneIndex.from_records(rows)
    print(f"zone {', '.join(index.zones)}: {index.record_count} records, servable")
    return 0

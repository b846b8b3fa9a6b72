"""``valis zone import|diff|export|list|check|delete|policy|secondary|catalog|sign|ds``: the
operator's zones in operator state.

An import checks the master file exactly as ``valis zone check`` does (every error, with
its line), keeps serial discipline (``valis_core.dns.zone.serial``), and only then replaces the
zone's records in one transaction; a refused zone writes nothing. Imports are operator
writes, not node writes, so they are not fenced by an instance generation; two imports of
one zone serialize on the zone's row (see ``operator_state.zones``). A file's origin is
``--origin``, else what ``valis serve`` takes (``$ORIGIN``, a leading SOA, the file name),
else the owner of its SOA.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from valis_cli.operator_dsn import add_dsn_arguments, operator_connection
from valis_core.clock import Clock, monotonic, wall
from valis_core.errors import ValisError

if TYPE_CHECKING:
    from valis_core.dns.zone.check import ZoneCheck
    from valis_core.dns.zone.clean import Reading


class ZoneFileError(ValisError):
    """A zone file that cannot be read."""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("zone", help="zones in the operator-state database")
    actions = parser.add_subparsers(dest="zone_command", metavar="ACTION", required=True)

    run = actions.add_parser(
        "import",
        help="replace a zone with the records of an RFC 1035 master file",
        description=(
            "Check FILE as 'valis zone check' does, and replace the zone's records in one "
            "transaction. An invalid zone, or changed data without a higher SOA serial, is "
            "refused with nothing written."
        ),
    )
    add_dsn_arguments(run)
    _file_arguments(run)
    run.add_argument(
        "--serial-policy",
        metavar="POLICY",
        help="when the serial did not go up: 'increment' it, use 'unixtime' or "
        "'dateserial' (YYYYMMDDnn), or 'keep' the file's (default: the zone's stored "
        "policy, else refuse)",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="print what would change; write nothing"
    )
    run.set_defaults(handler=_import)

    run = actions.add_parser("diff", help="show what importing a master file would change")
    add_dsn_arguments(run)
    _file_arguments(run)
    run.set_defaults(handler=_diff)

    run = actions.add_parser("export", help="print a zone as a master file")
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.set_defaults(handler=_export)

    run = actions.add_parser(
        "list", help="list zones with record counts, SOA serials and the nodes serving them"
    )
    add_dsn_arguments(run)
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.set_defaults(handler=_list)

    run = actions.add_parser(
        "check",
        help="check a master file serves, without a database",
        description=(
            "Report every error as FILE:LINE: message (exit 1) and every warning "
            "(exit 0): what 'valis zone import' would refuse, and what it would take but "
            "is probably a mistake."
        ),
    )
    _file_arguments(run)
    run.set_defaults(handler=_check)

    run = actions.add_parser("delete", help="remove a zone and its records")
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument("--force", action="store_true", help="delete it even while a node serves it")
    run.set_defaults(handler=_delete)

    run = actions.add_parser("policy", help="set the serial policy a zone's imports use")
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument(
        "policy",
        metavar="POLICY",
        help="increment, unixtime, dateserial, keep, or refuse (the default: changed data "
        "without a higher serial is refused)",
    )
    run.set_defaults(handler=_policy)

    from valis_cli.commands import zone_signing

    zone_signing.register(actions)

    _register_secondary(actions)

    from valis_cli.commands import zone_catalog

    zone_catalog.register(actions)


def _file_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="master file ('-' for stdin)")
    parser.add_argument(
        "--origin", help="the zone's name (default: $ORIGIN, the file's name, or the SOA owner)"
    )


def _read(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ZoneFileError(f"zone file {path}: cannot read it: {exc}") from exc


class _Progress:
    """Progress on stderr, only when stderr is a terminal (a log stays clean)."""

    def __init__(self, stream: TextIO, ticks: Clock = monotonic) -> None:
        self._stream = stream
        self._on = stream.isatty()
        self._ticks = ticks
        self._started = ticks()

    def say(self, text: str) -> None:
        if self._on:
            self._stream.write(f"\r\033[K{text}")
            self._stream.flush()

    def parsed(self, done: int, total: int) -> None:
        of = f"/{total}" if total else ""
        self.say(f"parsing records: {done}{of} ({self._ticks() - self._started:.1f}s)")

    def rows(self, done: int, total: int) -> None:
        self.say(f"writing records: {done}/{total} ({self._ticks() - self._started:.1f}s)")

    def end(self) -> None:
        if self._on:
            self._stream.write("\r\033[K")
            self._stream.flush()


class ZoneRefused(ValisError):
    """A master file with errors; each was printed as FILE:LINE: message."""


def _origin(args: argparse.Namespace, text: str) -> str | None:
    """The zone a file holds as the command line and the file tell it, or None: then
    its SOA names it, or the check says it cannot tell."""
    from valis_core.dns.wire.origin import ZoneFileError as OriginUnknown
    from valis_core.dns.wire.origin import origin_of

    origin: str | None = args.origin
    if origin is None and str(args.file) != "-":
        try:
            origin = origin_of(str(args.file), text)
        except OriginUnknown:
            origin = None
    return origin


def _checked(
    args: argparse.Namespace, text: str | None = None, reading: Reading | None = None
) -> tuple[str, ZoneCheck]:
    """The file's text (read now unless given) and its check (going on from ``reading``
    when given), printing every finding; refuse a file with errors."""
    from valis_core.dns.zone.check import check_zone_text

    if text is None:
        text = _read(args.file)
    result = check_zone_text(text, _origin(args, text), reading)
    label = "-" if str(args.file) == "-" else str(args.file)
    for finding in result.errors:
        sys.stderr.write(f"{_where(label, finding.line)}: {finding.message}\n")
    for finding in result.warnings:
        sys.stderr.write(f"{_where(label, finding.line)}: warning: {finding.message}\n")
    if not result.ok:
        count = len(result.errors)
        written = "" if args.handler is _check else "; nothing was written"
        raise ZoneRefused(
            f"zone {result.zone or label}: {count} error{'s' if count != 1 else ''} in "
            f"{label}{written} (correct them and run again)"
        )
    return text, result


def _where(label: str, line: int | None) -> str:
    return label if line is None else f"{label}:{line}"


def _import(args: argparse.Namespace) -> int:
    from valis_core.dns.zone.build import parse_zone_text
    from valis_core.dns.zone.serial import policy_named
    from valis_core.operator_state.zones import import_zone

    if args.serial_policy is not None:
        policy_named(args.serial_policy)  # refused before the file is read
    progress = _Progress(sys.stderr)
    try:
        progress.say(f"checking {args.file}")
        text, result = _checked(args)
        rows = parse_zone_text(text, result.zone, progress=progress.parsed)
        with operator_connection(args) as conn:
            outcome = import_zone(
                conn,
                rows,
                policy=args.serial_policy,
                now=wall(),
                dry_run=args.dry_run,
                progress=progress.rows,
            )
    finally:
        progress.end()
    summary = outcome.summary
    if args.dry_run:
        print("\n".join(outcome.diff.lines()))
        print(f"dry run: zone {summary.name} not written")
    elif outcome.written:
        print(f"imported zone {summary.name}: {summary.records} records, serial {summary.serial}")
    else:
        print(f"zone {summary.name} unchanged: serial {summary.serial}, nothing written")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from valis_core.dns.zone.build import parse_zone_text
    from valis_core.operator_state.zones import import_zone

    text, result = _checked(args)
    rows = parse_zone_text(text, result.zone)
    with operator_connection(args) as conn:
        outcome = import_zone(conn, rows, policy="keep", now=wall(), dry_run=True)
    print("\n".join(outcome.diff.lines()))
    return 0


def _export(args: argparse.Namespace) -> int:
    from valis_core.operator_state.zones import export_zone_text

    with operator_connection(args) as conn:
        sys.stdout.write(export_zone_text(conn, args.zone))
    return 0


def _list(args: argparse.Namespace) -> int:
    from valis_core.operator_state.zones import list_zones, serial_policies, served_zones

    with operator_connection(args) as conn:
        zones = list_zones(conn)
        served = served_zones(conn)
        policies = serial_policies(conn)
    if args.json:
        from valis_cli.commands.listings import ZONES, ZoneListing

        listing = tuple(
            ZoneListing(zone.name, zone.records, zone.serial,
                        tuple(served.get(zone.name, ())), policies.get(zone.name))
            for zone in zones
        )
        sys.stdout.write(ZONES.render(listing).decode("ascii"))
        return 0
    print("ZONE\tRECORDS\tSERIAL\tSERVED BY\tSERIAL POLICY")
    for zone in zones:
        serial = "-" if zone.serial is None else str(zone.serial)
        nodes = ",".join(served.get(zone.name, ())) or "-"
        print(f"{zone.name}\t{zone.records}\t{serial}\t{nodes}\t{policies.get(zone.name, '-')}")
    return 0


def _check(args: argparse.Namespace) -> int:
    # A clean file is proven so without loading the check's loop, its findings and the
    # zone model (their attrs and dnspython): most files checked are clean.
    from valis_core.dns.zone.clean import prove

    text = _read(args.file)
    origin = _origin(args, text)
    reading, count = prove(text, origin) if origin is not None else (None, None)
    if reading is None or count is None:
        _, result = _checked(args, text, reading)
        zone, count = result.zone, result.records
    else:
        zone = reading[0]
    print(f"zone {zone}: {count} records, servable")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from valis_core.operator_state.connection import OperatorStateError
    from valis_core.operator_state.zones import canonical_zone_name, delete_zone, served_zones

    zone = canonical_zone_name(args.zone)
    with operator_connection(args) as conn:
        nodes = served_zones(conn).get(zone, ())
        if nodes and not args.force:
            raise OperatorStateError(
                f"zone {zone} is served by node(s) {', '.join(nodes)}; remove it from their "
                "VALIS_SERVED_ZONES first, or delete it anyway with --force (those nodes "
                "then refuse to load their zones)"
            )
        if not delete_zone(conn, zone):
            raise OperatorStateError(
                f"zone {zone} is not in the operator-state database (valis zone list shows "
                "the zones it holds)"
            )
    print(f"deleted zone {zone}")
    return 0


def _policy(args: argparse.Namespace) -> int:
    from valis_core.dns.zone.serial import policy_named
    from valis_core.operator_state.connection import OperatorStateError
    from valis_core.operator_state.zones import canonical_zone_name, set_serial_policy

    zone = canonical_zone_name(args.zone)
    policy = policy_named(args.policy)
    with operator_connection(args) as conn:
        if not set_serial_policy(conn, zone, policy):
            raise OperatorStateError(
                f"zone {zone} is not in the operator-state database; import it first"
            )
    print(f"zone {zone}: serial policy {args.policy}")
    return 0


def _register_secondary(actions: argparse._SubParsersAction[Any]) -> None:
    parser = actions.add_parser(
        "secondary",
        help="the servers a zone is transferred to (AXFR) and notified of changes (NOTIFY)",
        description=(
            "A secondary is an address and the TSIG key its transfer requests are signed "
            "with; only listed secondaries may transfer the zone, and each is sent a "
            "signed NOTIFY when the zone changes."
        ),
    )
    verbs = parser.add_subparsers(dest="secondary_command", metavar="ACTION", required=True)

    run = verbs.add_parser(
        "add",
        help="list a secondary of a zone (or change its key)",
        description=(
            "Without --secret a random 32-byte secret is made; the key is printed as a "
            "key statement for the secondary's configuration (BIND, NSD, Knot's keymgr "
            "import)."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument(
        "address", metavar="ADDRESS[:PORT]",
        help="the secondary's IPv4 or IPv6 address, and the port it takes NOTIFY on when "
             "not 53 (192.0.2.2:5300, [2001:db8::2]:5300)",
    )
    run.add_argument("--key-name", required=True, metavar="NAME", help="the TSIG key's name")
    run.add_argument(
        "--algorithm", default="hmac-sha256", metavar="ALG",
        help="hmac-sha256 (default), hmac-sha384, hmac-sha512, hmac-sha224 or hmac-sha1",
    )
    run.add_argument(
        "--secret", metavar="BASE64",
        help="the key's secret in base64 (default: a new random one; read it back with list)",
    )
    run.set_defaults(handler=_secondary_add)

    run = verbs.add_parser("remove", help="stop transferring a zone to a secondary")
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument("address", metavar="ADDRESS[:PORT]")
    run.set_defaults(handler=_secondary_remove)

    run = verbs.add_parser(
        "list",
        help="list the secondaries of one zone or of all, a catalog member's from its "
        "catalogs too (VIA: the catalog)",
    )
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE", nargs="?")
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.add_argument(
        "--secrets", action="store_true", help="include each key's secret (base64)"
    )
    run.set_defaults(handler=_secondary_list)

    run = verbs.add_parser(
        "nsd-conf",
        help="NSD's configuration for one secondary: its keys and every zone it transfers",
        description=(
            "Print the key: and zone: sections of nsd.conf for the secondary at ADDRESS: "
            "every zone that lists it, and every member of a catalog that lists it (NSD "
            "has no catalog zones), each transferred from and notified by the node's "
            "PRIMARY addresses. Include it from nsd.conf, regenerate it when zones come "
            "and go, and reload NSD (nsd-control reconfig). It holds the keys' secrets."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("address", metavar="ADDRESS")
    run.add_argument("--primary", metavar="ADDRESS", action="append", required=True,
                     help="an address of the node NSD transfers from (repeat for several)")
    run.set_defaults(handler=_secondary_nsd_conf)


def _secondary_nsd_conf(args: argparse.Namespace) -> int:
    from valis_core.operator_state import secondaries as book
    from valis_core.operator_state.nsd_secondary import nsd_conf

    address = book.host_address(args.address)
    primaries = [book.host_address(primary) for primary in args.primary]
    with operator_connection(args) as conn:
        listed = book.serving_secondaries(conn)
    sys.stdout.write(nsd_conf(listed, address, primaries))
    return 0


def _secondary_add(args: argparse.Namespace) -> int:
    from valis_core.operator_state import secondaries as book
    from valis_core.operator_state.zones import canonical_zone_name

    address, port = book.host_and_port(args.address)
    secondary = book.Secondary(
        zone=canonical_zone_name(args.zone),
        address=address,
        key_name=book.key_name(args.key_name),
        algorithm=book.algorithm(args.algorithm),
        secret=book.secret(args.secret),
        notify_port=port,
    )
    from valis_core.operator_state.zone_denial import COMPACT, denial_of

    with operator_connection(args) as conn:
        new = book.add_secondary(conn, secondary)
        denial = denial_of(conn, secondary.zone)
    what = "added" if new else "updated"
    print(f"zone {secondary.zone}: secondary {secondary.target} {what}, key {secondary.key_name}")
    if denial == COMPACT:
        print(f"warning: zone {secondary.zone} is signed with compact denial, which no "
              "secondary can serve: the node refuses its transfers until it is signed with "
              f"NSEC3 (valis zone sign {secondary.zone} --denial nsec3)", file=sys.stderr)
    if args.secret is None:
        sys.stdout.write(secondary.bind_key())
    return 0


def _secondary_remove(args: argparse.Namespace) -> int:
    from valis_core.operator_state import secondaries as book
    from valis_core.operator_state.zones import canonical_zone_name

    zone = canonical_zone_name(args.zone)
    address, _ = book.host_and_port(args.address)  # as listed: the port is the address's
    with operator_connection(args) as conn:
        if not book.remove_secondary(conn, zone, address):
            inherited = [one.catalog for one in book.serving_secondaries(conn, zone)
                         if one.address == address and one.catalog is not None]
            if inherited:
                raise book.SecondaryError(
                    f"zone {zone} has its secondary at {address} from its catalog "
                    f"{inherited[0]}: remove it there (valis zone secondary remove "
                    f"{inherited[0]} {address}), or the zone from the catalog"
                )
            raise book.SecondaryError(
                f"zone {zone} has no secondary at {address} (valis zone secondary list "
                f"{zone} shows its secondaries)"
            )
    print(f"zone {zone}: secondary {address} removed")
    return 0


def _secondary_list(args: argparse.Namespace) -> int:
    from valis_core.operator_state import secondaries as book

    with operator_connection(args) as conn:
        found = book.serving_secondaries(conn, args.zone)
    if args.json:
        from valis_cli.commands import listings

        if args.secrets:
            shown = listings.SECONDARIES_WITH_SECRETS.render(tuple(
                listings.SecondaryListingWithSecret(
                    one.zone, one.address, one.key_name, one.algorithm, one.secret_base64,
                    one.notify_port, one.catalog,
                )
                for one in found
            ))
        else:
            shown = listings.SECONDARIES.render(tuple(
                listings.SecondaryListing(one.zone, one.address, one.key_name, one.algorithm,
                                          one.notify_port, one.catalog)
                for one in found
            ))
        sys.stdout.write(shown.decode("ascii"))
        return 0
    header = "ZONE\tADDRESS\tKEY\tALGORITHM\tVIA"
    print(header + ("\tSECRET" if args.secrets else ""))
    for one in found:
        line = (f"{one.zone}\t{one.target}\t{one.key_name}\t{one.algorithm}"
                f"\t{one.catalog or '-'}")
        print(line + (f"\t{one.secret_base64}" if args.secrets else ""))
    return 0

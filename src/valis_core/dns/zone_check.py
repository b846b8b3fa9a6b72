"""Judging a master file the way an operator needs before a change: every error with
its line, and warnings about what serves but is probably not meant.

The normal build (``zone_build``) stops at the first refusal and stays fast; this check
reads the file once more with the reader's collecting mode, puts each record through the
same ``Builder`` checks, and freezes each owner with the same ``freeze_node`` and
``check_apex``, so a file passes here exactly when ``valis zone import`` would take it.
Warnings never fail a check: TTLs that differ within an RRset, duplicate records,
delegations without the glue they need, and relative names that look like a forgotten
trailing dot.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype

from valis_core.dns import wire
from valis_core.dns.master import MasterFileError, read_master
from valis_core.dns.records import AAAA, DNAME, NS, SOA, A, ZoneError, decode_node
from valis_core.dns.zone_build import Builder, absolute, check_apex, freeze_node

_NAME_FIELDS = {2: "target", 5: "target", 12: "target", 15: "exchange", 33: "target", 39: "target"}
"""Types whose rdata holds a name (NS, CNAME, PTR, MX, SRV, DNAME), and its field."""

_TLDS = frozenset(
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


@attrs.frozen
class Finding:
    """One problem, at the line of the record it concerns (``None``: the whole file)."""

    line: int | None
    message: str


@attrs.frozen
class ZoneCheck:
    zone: str | None
    records: int
    errors: tuple[Finding, ...]
    warnings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.errors


class _Lines:
    """First line of each owner and of each RRset, for placing findings."""

    def __init__(self) -> None:
        self.owner: dict[bytes, int] = {}
        self.second: dict[bytes, int] = {}  # an owner's second record: where clashes arise
        self.rrset: dict[tuple[bytes, int], tuple[int, int]] = {}  # (ttl, line)
        self.record: dict[tuple[bytes, int, bytes], int] = {}


def check_zone_text(text: str, origin: str | None) -> ZoneCheck:
    """Every error and warning of one master file holding one zone (``origin``, or the
    owner of its SOA when ``None``)."""
    errors: list[Finding] = []
    warnings: list[Finding] = []
    origin_name: dns.name.Name | None = None
    if origin is not None:
        try:
            origin = wire.to_text(wire.from_text(absolute(origin)).lower())
        except wire.BadName as exc:
            return ZoneCheck(origin, 0, (Finding(None, f"bad origin {origin!r}: {exc}"),), ())
        origin_name = dns.name.from_text(origin)
    records: list[tuple[bytes, int, int, bytes]] = []
    problems: list[MasterFileError] = []
    positions: list[int] = []

    def emit(owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        records.append((owner, rtype, ttl, rdata))

    read_master(text, origin_name, emit, problems=problems, positions=positions)
    errors += [Finding(problem.line, problem.reason) for problem in problems]
    if origin is None:
        soa_owners = {owner.lower() for owner, rtype, _, _ in records if rtype == SOA}
        if len(soa_owners) != 1:
            errors.append(
                Finding(
                    None,
                    "cannot tell which zone this file holds: it needs exactly one SOA "
                    "record, or give the origin (--origin, $ORIGIN, or the file's name)",
                )
            )
            return ZoneCheck(None, len(records), tuple(errors), ())
        origin = wire.to_text(soa_owners.pop())
    apex = wire.from_text(origin).lower()
    builder = Builder()
    builder.add_zone(origin)
    lines = _Lines()
    for (owner, rtype, ttl, rdata), line in zip(records, positions, strict=True):
        try:
            builder.add_wire(origin, owner, rtype, ttl, rdata)
        except ZoneError as exc:
            errors.append(Finding(line, exc.reason if exc.owner == origin else _say(exc)))
            continue
        _note(lines, owner.lower(), rtype, ttl, rdata, line, warnings)
        _dot_warning(origin, apex, owner, rtype, rdata, line, warnings)
    count = _check_nodes(builder, origin, apex, lines, errors, warnings)
    ordered = sorted(errors, key=_order)
    return ZoneCheck(origin, count, tuple(ordered), tuple(sorted(warnings, key=_order)))


def _order(finding: Finding) -> tuple[int, str]:
    return (finding.line if finding.line is not None else 0, finding.message)


def _say(exc: ZoneError) -> str:
    return f"{exc.owner}: {exc.reason}"


def _note(  # noqa: PLR0917 - one record's fields and where to note them
    lines: _Lines,
    owner: bytes,
    rtype: int,
    ttl: int,
    rdata: bytes,
    line: int,
    warnings: list[Finding],
) -> None:
    if lines.owner.setdefault(owner, line) != line:
        lines.second.setdefault(owner, line)
    held = lines.rrset.setdefault((owner, rtype), (ttl, line))
    if held[1] == line:
        lines.record[owner, rtype, rdata] = line
        return  # the first record of its RRset: nothing to compare it with
    if held[0] != ttl:
        served = min(ttl, held[0])
        warnings.append(
            Finding(
                line,
                f"TTL {ttl} differs from TTL {held[0]} of the {_rrset_name(owner, rtype)} "
                f"RRset on line {held[1]}; the whole RRset is served with {served} (RFC 2181)",
            )
        )
    first = lines.record.setdefault((owner, rtype, rdata), line)
    if first != line:
        warnings.append(
            Finding(
                line,
                f"duplicate {_rrset_name(owner, rtype)} record (also on line {first}); served once",
            )
        )


def _rrset_name(owner: bytes, rtype: int) -> str:
    return f"{wire.to_text(owner)} {dns.rdatatype.to_text(dns.rdatatype.RdataType.make(rtype))}"


def _target(rtype: int, rdata: bytes) -> bytes | None:
    field = _NAME_FIELDS.get(rtype)
    if field is None:
        return None
    kind = dns.rdatatype.RdataType.make(rtype)
    try:
        parsed = dns.rdata.from_wire(dns.rdataclass.IN, kind, rdata, 0, len(rdata))
    except (dns.exception.DNSException, ValueError):
        return None
    return wire.name_wire(getattr(parsed, field))


def _dot_warning(  # noqa: PLR0917 - one record's fields and where to note them
    origin: str,
    apex: bytes,
    owner: bytes,
    rtype: int,
    rdata: bytes,
    line: int,
    warnings: list[Finding],
) -> None:
    """Warn about a name that looks written without its trailing dot."""
    for name in (owner, _target(rtype, rdata)):
        if name is None or not _looks_undotted(name.lower(), apex):
            continue
        text = wire.to_text(name)
        meant = text[: -len(origin)] if origin != "." else text
        warnings.append(
            Finding(
                line,
                f"{text} looks like a relative name missing its trailing dot; "
                f"if {meant} is meant, write it with the dot",
            )
        )


def _looks_undotted(name: bytes, apex: bytes) -> bool:
    if apex == b"\x00" or len(name) <= len(apex) or not name.endswith(apex):
        return False
    relative = name[: -len(apex)]
    if relative.endswith(apex[:-1]):
        return True  # the origin written twice: www.example.com.example.com.
    if relative[0] + 1 == len(relative):
        return False  # one label: an ordinary relative name
    last = 0
    i = 0
    while i < len(relative):  # bounded: each step moves past one label
        last = i
        i += relative[i] + 1
    return relative[last + 1 :].decode("ascii", "replace").lower() in _TLDS


def _check_nodes(  # noqa: PLR0917 - the check's state, handed on
    builder: Builder,
    origin: str,
    apex: bytes,
    lines: _Lines,
    errors: list[Finding],
    warnings: list[Finding],
) -> int:
    """Freeze each owner as the build does, noting every refusal; return the records."""
    nodes = builder.owners(apex)
    frozen: dict[bytes, bytes] = {}
    types: dict[bytes, Iterable[int]] = {}
    dnames: set[bytes] = set()
    cuts: set[bytes] = set()
    count = 0
    for owner, held in nodes.items():
        try:
            blob, kinds, records = freeze_node(origin, apex, owner, held)
        except ZoneError as exc:
            errors.append(Finding(lines.second.get(owner, lines.owner.get(owner)), _say(exc)))
            continue
        frozen[owner] = blob
        types[owner] = kinds
        count += records
        if NS in kinds and owner != apex:
            cuts.add(owner)
        if DNAME in kinds:
            dnames.add(owner)
    try:
        check_apex(origin, frozen.get(apex, b""))
    except ZoneError as exc:
        errors.append(Finding(lines.owner.get(apex), exc.reason))
    for owner in frozen if dnames else ():
        name = owner
        while name != apex:
            name = wire.parent(name)
            if name in dnames:
                errors.append(
                    Finding(
                        lines.owner.get(owner),
                        f"{wire.to_text(owner)}: data beneath the DNAME at "
                        f"{wire.to_text(name)} is never served (RFC 6672); remove it or "
                        "the DNAME",
                    )
                )
                break
    for cut in sorted(cuts):
        _glue_warnings(cut, frozen[cut], types, lines, warnings)
    return count


def _glue_warnings(
    cut: bytes,
    blob: bytes,
    types: dict[bytes, Iterable[int]],
    lines: _Lines,
    warnings: list[Finding],
) -> None:
    """A delegation to a name server inside the delegated zone needs its address here."""
    for rdata in decode_node(blob)[NS][1]:
        server = rdata.lower()
        if wire.is_at_or_below(server, cut) and not {A, AAAA} & set(types.get(server, ())):
            warnings.append(
                Finding(
                    lines.rrset.get((cut, NS), (0, None))[1],
                    f"delegation {wire.to_text(cut)} NS {wire.to_text(server)} has no glue; "
                    f"add an A or AAAA record for {wire.to_text(server)}",
                )
            )

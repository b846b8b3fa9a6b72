"""Judging a master file the way an operator needs before a change: every error with
its line, and warnings about what serves but is probably not meant.

The normal build (``build``) stops at the first refusal and stays fast; this check
reads the file once more with the reader's collecting mode, puts each record through the
same ``Builder`` checks, and freezes the owners with the same ``Builder.freeze``,
``check_apex`` and ``occluded``, noting every refusal where the build stops at the first,
so a file passes here exactly when ``valis zone import`` would take it.
Warnings never fail a check: TTLs that differ within an RRset, duplicate records,
delegations without the glue they need, name servers in the zone with no address, a DS
at the apex, a DNAME at a delegation (Knot's kzonecheck refuses the last two; NSD takes
them), and relative names that look like a forgotten trailing dot.

Most files checked hold none of that, and ``clean.proven`` proves so in C first;
when it cannot tell, the loop here judges the file whole, and stays the reference
(``tests/property/test_zone_check_clean.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import dns.rdatatype

from valis_core.dns.wire import Record
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.master import read_master
from valis_core.dns.wire.records import (
    AAAA,
    CNAME,
    DNAME,
    DS,
    MX,
    NS,
    PTR,
    SOA,
    SRV,
    A,
    ZoneError,
    decode_node,
    node_holds,
)
from valis_core.dns.zone.build import Builder, check_apex
from valis_core.dns.zone.clean import TLDS, Reading, canonical_origin, proven, read_table
from valis_core.dns.zone.tree import occluded, occlusion_error

_records_run: Callable[..., int] | None
try:  # the compiled run of the loop over records (_check.c), equal to check_zone_text's
    from valis_core.dns.zone._check import records_run as _records_run
except ImportError:  # not built: the loop takes every record itself
    _records_run = None
COMPILED = _records_run is not None
"""Whether the compiled run of the loop is built (without it the loop is Python's alone)."""

_NAME_AT = {NS: 0, CNAME: 0, PTR: 0, MX: 2, SRV: 6, DNAME: 0}
"""Types whose rdata holds a name, and the offset of that name in their wire form."""




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
    """Where each owner, RRset and record first appears, for placing findings and for
    the warnings that compare a record with those before it.

    Only an owner's first record is noted until a second one comes (most owners of a
    large zone hold one record); the second notes the first one's RRset and record
    then, so every comparison is made as if all had been noted all along."""

    def __init__(self, records: list[Record], positions: list[int]) -> None:
        self.records = records
        self.positions = positions
        self.first: dict[bytes, int] = {}  # owner -> index of its first record
        self.second: dict[bytes, int] = {}  # an owner's second line: where clashes arise
        self.rrset: dict[tuple[bytes, int], tuple[int, int]] = {}  # (ttl, line)
        self.record: dict[tuple[bytes, int, bytes], int] = {}

    def owner_line(self, owner: bytes) -> int | None:
        first = self.first.get(owner)
        return None if first is None else self.positions[first]

    def rrset_line(self, owner: bytes, rtype: int) -> int | None:
        held = self.rrset.get((owner, rtype))
        if held is not None:
            return held[1]
        first = self.first.get(owner)  # an owner of one record has no RRsets noted
        if first is None or self.records[first][1] != rtype:
            return None
        return self.positions[first]


def check_zone_text(text: str, origin: str | None, reading: Reading | None = None) -> ZoneCheck:
    """Every error and warning of one master file holding one zone (``origin``, or the
    owner of its SOA when ``None``). ``reading``: the file as ``clean.read_table`` read it
    already, for the zone ``origin`` names."""
    errors: list[Finding] = []
    warnings: list[Finding] = []
    if origin is not None:
        try:
            origin = canonical_origin(origin)
        except wire.BadName as exc:
            return ZoneCheck(origin, 0, (Finding(None, f"bad origin {origin!r}: {exc}"),), ())
        if reading is None or reading[0] != origin:
            reading = read_table(text, origin)
    if origin is not None and reading is not None:
        count = proven(reading)
        if count is not None:
            return ZoneCheck(origin, count, (), ())
        # Most files are clean; this one may not be: its records as the reader emits them.
        _, table, problems = reading
        records, positions = table.rows()
    else:
        records = []
        problems = []
        positions = []
        read_master(text, origin, records.append, problems=problems, positions=positions)
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
    lines = _Lines(records, positions)
    source = _Source(text)
    undotted: set[bytes] = set()  # owners that look written without their trailing dot
    # A name one label below the apex looks undotted only if that label ends with the
    # origin's labels (written twice), which a label shorter than them cannot: most
    # owners of a large zone are such names, and need no closer look.
    short = len(apex) - 1
    tables = builder.wire_tables(origin)
    index = -1
    while index + 1 < len(records):  # bounded: each pass takes one record or more
        index += 1
        if _records_run is not None:  # the records noted without a finding, as below, in C
            index = _records_run(
                records, positions, index, *tables, lines.first, lines.second, lines.rrset,
                lines.record, undotted, TLDS,
            )
            if index == len(records):
                break
        owner, rtype, ttl, rdata = records[index]
        line = positions[index]
        try:
            key = builder.add_wire(origin, owner, rtype, ttl, rdata)
        except ZoneError as exc:
            errors.append(Finding(line, exc.reason if exc.owner == origin else _say(exc)))
            continue
        first = lines.first.setdefault(key, index)
        if first == index:  # the owner's first record: nothing to compare it with yet
            below = len(key) - len(apex)
            if (
                (below != key[0] + 1 or below >= short)
                and _looks_undotted(key, apex)
                and not _written_dotted(source, line, key)
            ):
                undotted.add(key)
                warnings.append(_undotted(origin, owner, line))
        else:
            _note_again(lines, key, index, first, warnings)
            if key in undotted:
                warnings.append(_undotted(origin, owner, line))
        if rtype in _NAME_AT:
            target = _target(rtype, rdata)
            if (
                target is not None
                and _looks_undotted(target.lower(), apex)
                and not _written_dotted(source, line, target)
            ):
                warnings.append(_undotted(origin, target, line))
    count = _check_nodes(builder, origin, apex, lines, errors, warnings)
    ordered = sorted(errors, key=_order)
    return ZoneCheck(origin, count, tuple(ordered), tuple(sorted(warnings, key=_order)))


def _order(finding: Finding) -> tuple[int, str]:
    return (finding.line if finding.line is not None else 0, finding.message)


def _say(exc: ZoneError) -> str:
    return f"{exc.owner}: {exc.reason}"


def _note_again(
    lines: _Lines, owner: bytes, index: int, first: int, warnings: list[Finding]
) -> None:
    """Note another record of an owner already seen, and warn of a TTL differing from
    its RRset's or a record stated twice."""
    line = lines.positions[index]
    if owner not in lines.second:
        _note(lines, owner, first, warnings)  # the first record, noted only now
    if lines.positions[first] != line:
        lines.second.setdefault(owner, line)
    _note(lines, owner, index, warnings)


def _note(lines: _Lines, owner: bytes, index: int, warnings: list[Finding]) -> None:
    _, rtype, ttl, rdata = lines.records[index]
    line = lines.positions[index]
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
    """The name a record's rdata points at (the reader wrote it uncompressed)."""
    try:
        return wire.read_name(rdata, _NAME_AT[rtype])[0]
    except IndexError:
        return None


def _undotted(origin: str, name: bytes, line: int) -> Finding:
    """The warning about a name that looks written without its trailing dot."""
    text = wire.to_text(name)
    meant = text[: -len(origin)] if origin != "." else text
    return Finding(
        line,
        f"{text} looks like a relative name missing its trailing dot; "
        f"if {meant} is meant, write it with the dot",
    )


_MAX_RECORD_LINES = 100
"""Lines a parenthesised record is read across when looking for how a name was written."""


class _Source:
    """The file's lines, split only when a name that looks undotted asks how it was
    written (most files have none)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines: list[str] | None = None

    def record(self, line: int) -> list[str]:
        """The lines a record starting at ``line`` (1-based) may span."""
        if self.lines is None:
            self.lines = self.text.split("\n")
        return self.lines[line - 1 : line - 1 + _MAX_RECORD_LINES]


def _written_dotted(source: _Source, line: int, name: bytes) -> bool:
    """Whether the record starting at ``line`` (1-based) of ``source`` writes ``name``
    whole, with its trailing dot: then it was meant absolute, however it looks."""
    whole = wire.to_text(name).lower()
    depth = 0
    for text in source.record(line):
        data = text.split(";", 1)[0]
        if whole in data.replace("(", " ").replace(")", " ").lower().split():
            return True
        depth += data.count("(") - data.count(")")
        if depth <= 0:
            return False
    return False


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
    return relative[last + 1 :].decode("ascii", "replace").lower() in TLDS


def _check_nodes(  # noqa: PLR0917 - the check's state, handed on
    builder: Builder,
    origin: str,
    apex: bytes,
    lines: _Lines,
    errors: list[Finding],
    warnings: list[Finding],
) -> int:
    """Freeze each owner as the build does, noting every refusal; return the records."""

    def refused(owner: bytes, exc: ZoneError) -> None:
        errors.append(Finding(lines.second.get(owner, lines.owner_line(owner)), _say(exc)))

    owners = builder.freeze(apex, refused)
    frozen = owners.nodes
    try:
        check_apex(origin, frozen.get(apex, b""))
    except ZoneError as exc:
        errors.append(Finding(lines.owner_line(apex), exc.reason))
    for owner, dname in occluded(apex, frozen, owners.dnames):
        errors.append(Finding(lines.owner_line(owner), _say(occlusion_error(origin, owner, dname))))
    servers = _NameServers(apex, frozen, owners.cuts)
    if apex in frozen:
        held = decode_node(frozen[apex])
        if NS in held:
            servers.warn(apex, held[NS][1], lines, warnings)
        if DS in held:
            warnings.append(Finding(
                lines.rrset_line(apex, DS),
                f"DS at the apex of {origin}: a DS record is the parent zone's, never "
                "this one's (RFC 4035 section 2.4); give it to the parent and remove it here",
            ))
    for cut in sorted(owners.cuts):
        held = decode_node(frozen[cut])
        servers.warn(cut, held[NS][1], lines, warnings)
        if DNAME in held:
            warnings.append(Finding(
                lines.rrset_line(cut, DNAME),
                f"DNAME at the delegation {wire.to_text(cut)}: the name is the child zone's, "
                "so it is never served from here (RFC 6672 section 2.3); remove it or the NS",
            ))
    return owners.count


_ADDRESSES = frozenset({A, AAAA})


class _NameServers:
    """Whether the name servers an NS RRset names inside the zone can be reached: one
    at or beneath the delegation naming it needs glue (an address record at its name:
    a referral carries no wildcard's); one elsewhere in the zone, not beneath another
    delegation (that delegation's own concern), needs an address record at its name or
    from the wildcard that covers it, as a resolver asking for it would be answered."""

    def __init__(self, apex: bytes, frozen: dict[bytes, bytes], cuts: set[bytes]) -> None:
        self.apex = apex
        self.frozen = frozen
        self.cuts = cuts
        self.existing: set[bytes] | None = None  # every name that exists, when needed

    def warn(
        self, owner: bytes, targets: tuple[bytes, ...], lines: _Lines, warnings: list[Finding]
    ) -> None:
        for rdata in targets:
            server = rdata.lower()
            if not wire.is_at_or_below(server, self.apex):
                continue  # out of the zone: resolved elsewhere
            cut = self._cut_above(server)
            if cut is not None and cut != owner:
                continue  # beneath another delegation: its glue, if any, is checked there
            if cut is None:
                if self._has_address(server):
                    continue
                said = (f"name server {wire.to_text(server)} of {wire.to_text(owner)} has no "
                        "address in the zone")
            elif node_holds(self.frozen.get(server, b""), _ADDRESSES):
                continue
            else:
                said = f"delegation {wire.to_text(owner)} NS {wire.to_text(server)} has no glue"
            warnings.append(Finding(
                lines.rrset_line(owner, NS),
                f"{said}; add an A or AAAA record for {wire.to_text(server)}",
            ))

    def _cut_above(self, name: bytes) -> bytes | None:
        """The delegation at or above ``name`` (below the apex), if any."""
        while name != self.apex:
            if name in self.cuts:
                return name
            name = wire.parent(name)
        return None

    def _has_address(self, name: bytes) -> bool:
        """Whether a question for ``name``'s address is answered with one: its own
        records, or, when the name does not exist, its wildcard's (RFC 4592)."""
        held = self.frozen.get(name)
        if held is not None:
            return node_holds(held, _ADDRESSES)
        if self.existing is None:  # once, and only for a name server not in the file
            self.existing = {self.apex}
            for owner in self.frozen:
                above = owner
                while above not in self.existing and wire.is_at_or_below(above, self.apex):
                    self.existing.add(above)
                    above = wire.parent(above)
        if name in self.existing:
            return False  # an empty non-terminal: no data at all
        encloser = wire.parent(name)
        while encloser not in self.existing:
            encloser = wire.parent(encloser)
        return node_holds(self.frozen.get(b"\x01*" + encloser, b""), _ADDRESSES)

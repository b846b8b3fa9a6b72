"""Building a zone index: reading master files and rows, checking every record once,
and freezing each zone's lookup structures.

Building refuses, with a ``ZoneError`` naming the zone, the owner and the reason,
anything a zone cannot serve: no single SOA at the apex, no apex NS, a CNAME beside
other data, data outside the zone or hidden beneath a DNAME, rdata that does not parse,
and types that never live in a zone. Row names and names inside row rdata must be
absolute (end with a dot); a master file may use relative names, which are made absolute
against its origin as RFC 1035 says.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import attrs
import dns.exception
import dns.ipv4
import dns.ipv6
import dns.rdataclass
import dns.rdatatype

from valis_core.dns.wire import Emit, MasterFileError, Record
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.master import ipv4, read_master, row_rdata
from valis_core.dns.wire.records import (
    AAAA,
    CNAME,
    DNAME,
    IN,
    MAX_TTL,
    NS,
    NSEC,
    OPT,
    RR_HEAD,
    RRSIG,
    SOA,
    A,
    RecordRow,
    ZoneError,
    decode_node,
    rdata_bytes,
)
from valis_core.dns.zone._served import ServedZone
from valis_core.dns.zone.owners import OwnerMap, owner_set
from valis_core.dns.zone.tree import occluded, refuse_occluded, tree

try:  # compiled (_owner_tree.c), equal to tree.tree and records.merge_node
    from valis_core.dns.zone._rows import merge_node as _merge_node
    from valis_core.dns.zone._rows import tree as _tree
except ImportError:  # not built
    from valis_core.dns.wire.records import merge_node as _merge_node

    _tree = tree

if TYPE_CHECKING:
    import dns.rdata

# dnspython's names and rdata (dns.name, dns.rdata) are imported where rows or unusual
# rdata need them: checking or indexing a plain master file never loads them.

_BESIDE_CNAME = frozenset({CNAME, RRSIG, NSEC})
"""What may share an owner with a CNAME (RFC 1034 section 3.6.2, RFC 4035)."""


def parse_zone_text(
    text: str, origin: str | None = None, progress: ParseProgress | None = None
) -> tuple[RecordRow, ...]:
    """The records of an RFC 1035 master file, as rows with absolute names.

    ``origin`` is the zone's name; relative names in the file are made absolute against
    it (and against ``$ORIGIN`` lines). Without it, the zone is the owner of the file's
    SOA record. ``$TTL``, ``$ORIGIN`` and ``$GENERATE`` are understood; ``$INCLUDE`` is
    refused, because a zone must not read files the operator did not hand over.
    ``progress(done, total)`` is called every ``PARSE_PROGRESS_EVERY`` records as they
    are read (``total`` 0: not known yet) and then converted (a large zone takes seconds).
    """
    found: list[tuple[str, bytes, int, int, bytes]] = []

    def keep(zone: str, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        found.append((zone, owner, rtype, ttl, rdata))

    def keep_counting(zone: str, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        found.append((zone, owner, rtype, ttl, rdata))
        if len(found) % PARSE_PROGRESS_EVERY == 0:
            assert progress is not None
            progress(len(found), 0)

    read_master_into(text, origin, keep if progress is None else keep_counting)
    rows = []
    total = len(found)
    names: dict[int, str] = {}
    for done, (zone, owner, rtype, ttl, rdata) in enumerate(found, start=1):
        if progress is not None and (done % PARSE_PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
        name = names.get(rtype)
        if name is None:
            name = names[rtype] = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(rtype))
        rows.append(RecordRow(zone, wire.to_text(owner), name, ttl, _rdata_text(rtype, rdata)))
    return tuple(rows)


def _rdata_text(rtype: int, rdata: bytes) -> str:
    """Rdata in presentation form as dnspython writes it; an IPv4 address directly, as
    the bulk of a large zone is."""
    if rtype == A and len(rdata) == 4:
        return f"{rdata[0]}.{rdata[1]}.{rdata[2]}.{rdata[3]}"
    import dns.rdata

    kind = dns.rdatatype.RdataType.make(rtype)
    return dns.rdata.from_wire(dns.rdataclass.IN, kind, rdata, 0, len(rdata)).to_text()


_Sink = Callable[[str, bytes, int, int, bytes], object]
ParseProgress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a master file is parsed."""
PARSE_PROGRESS_EVERY = 5000


def read_master_into(text: str, origin: str | None, sink: _Sink) -> None:
    """Parse a master file and feed each record to ``sink`` with the zone it belongs to."""
    label = origin if origin is not None else "(zone named by its SOA)"
    if origin is not None:
        try:
            origin = wire.to_text(wire.from_text(absolute(origin)).lower())
        except wire.BadName as exc:
            raise ZoneError(label, origin, f"bad origin: {exc}") from None
        label = origin
    records: list[Record] = []  # without an origin, the zone is known only at the end
    emit: Emit = records.append
    if origin is not None:
        zone = origin

        def forward(record: Record) -> None:
            sink(zone, *record)

        emit = forward
    try:
        read_master(text, origin, emit)
    except MasterFileError as exc:
        raise ZoneError(label, exc.where, f"master file does not parse: {exc.reason}") from None
    if origin is None:
        soa_owners = {owner.lower() for owner, rtype, _, _ in records if rtype == SOA}
        if len(soa_owners) != 1:
            raise ZoneError(
                label,
                "(file)",
                "cannot tell which zone this file holds: it needs exactly one SOA record, "
                "or give the origin explicitly",
            )
        named = wire.to_text(soa_owners.pop())
        for record in records:
            sink(named, *record)


def absolute(name: str) -> str:
    return name if name.endswith(".") else name + "."



class _ZoneParts:
    """One zone's records as they are added, kept so that freezing touches only the
    owners it must: an owner holding a single record of a type the zone's structure does
    not hang on is final as it was added (most owners of a large zone)."""

    __slots__ = ("more", "nodes", "notable", "origin")

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.nodes: dict[bytes, bytes] = {}
        """Each owner's first record, in the order owners first appeared."""
        self.more: dict[bytes, bytearray] = {}
        """Every record of each owner that has more than one."""
        self.notable: set[bytes] = set()
        """The owners ``freeze_node`` must see: those in ``more``, and those whose one
        record is of a type ``freeze_node`` checks (NS, SOA, DNAME)."""

    def put(self, owner: bytes, rtype: int, record: bytes) -> None:
        """Keep one checked record (``RR_HEAD`` and rdata, a new object) of ``owner``
        (lowercased). Putting the same record object again changes nothing in ``nodes``:
        a caller may ``setdefault`` it there first and call this only when that did not
        settle it."""
        nodes = self.nodes
        held = nodes.setdefault(owner, record)
        if held is record:
            if rtype in _CHECKED_ALONE:
                self.notable.add(owner)
            return
        more = self.more.get(owner)
        if more is None:
            self.more[owner] = bytearray(held) + record
            self.notable.add(owner)
        else:
            more += record


_CHECKED_ALONE = frozenset({NS, SOA, DNAME})


TYPES_REMEMBERED = 256
"""Type texts remembered across builders (``_SERVABLE_TYPES``), at most."""

_SERVABLE_TYPES: dict[str, int] = {}
"""Each type text some builder's ``_rtype`` read and found servable, and its code: a
pure function's results, so that every builder knows them from its first row (a
patch's builder holds a few rows: without them each would take the long way,
dnspython's, issue 27)."""


ZONES_REMEMBERED = 4096
"""Zone texts remembered across builders (``_ZONE_SHAPES``), at most: past it, all are
forgotten and remembered again as builders read them."""

_ZONE_SHAPES: dict[str, tuple[bytes, str, str]] = {}
"""Each zone text some builder read: its apex, its origin as text, and what every
plainly written owner below the apex ends with (its origin after a dot; empty for a
zone whose name is not plain text, or the root). A pure function's results, so that a
patch's builder, a few rows of one zone, parses no zone name (issue 27)."""


def zone_shape(zone: str) -> tuple[bytes, str, str]:
    """A zone text's apex (lowercased wire form), origin and plain owners' suffix
    (``_ZONE_SHAPES``); ``ZoneError`` for a name that is none."""
    known = _ZONE_SHAPES.get(zone)
    if known is not None:
        return known
    try:
        apex = wire.from_text(absolute(zone)).lower()
    except wire.BadName as exc:
        raise ZoneError(zone, zone, f"bad zone name: {exc}") from None
    origin = wire.to_text(apex)
    plain = origin != "." and wire.plain_labels(origin[:-1]) == apex[:-1]
    shape = (apex, origin, "." + origin if plain else "")
    if len(_ZONE_SHAPES) >= ZONES_REMEMBERED:
        _ZONE_SHAPES.clear()
    _ZONE_SHAPES[zone] = shape
    return shape


class Builder:
    """Accumulates records per zone and owner, then checks and freezes them."""

    def __init__(self) -> None:
        self._zone_keys: dict[str, tuple[bytes, _ZoneParts]] = {}
        self._shapes: dict[str, tuple[bytes, _ZoneParts, str]] = {}
        self._zones: dict[bytes, _ZoneParts] = {}
        self._types: dict[str, int] = dict(_SERVABLE_TYPES)
        self._servable: set[int] = set()

    def add_zone(self, zone: str) -> None:
        """Include ``zone`` even if no record of it is added."""
        self._zone(zone)

    def apexes(self) -> set[bytes]:
        return set(self._zones)

    def owners(self, apex: bytes) -> dict[bytes, bytes | bytearray]:
        """Each owner's records as added (in wire form, one after another)."""
        parts = self._zones[apex]
        return {**parts.nodes, **parts.more}

    def _zone(self, zone: str) -> tuple[bytes, _ZoneParts]:
        known = self._zone_keys.get(zone)
        if known is not None:
            return known
        apex, origin, _ = zone_shape(zone)
        parts = self._zones.get(apex)
        if parts is None:
            parts = self._zones[apex] = _ZoneParts(origin)
        self._zone_keys[zone] = (apex, parts)
        return apex, parts

    def _rtype(self, zone: str, owner: str, text: str) -> int:
        known = self._types.get(text)
        if known is not None:
            return known
        try:
            rtype = int(dns.rdatatype.from_text(text.strip().upper()))
        except (dns.exception.DNSException, ValueError):
            raise ZoneError(zone, owner, f"unknown record type {text!r}") from None
        reason = _unservable(rtype)
        if reason is not None:
            raise ZoneError(zone, owner, reason)
        self._types[text] = rtype
        if len(_SERVABLE_TYPES) < TYPES_REMEMBERED:
            _SERVABLE_TYPES[text] = rtype
        return rtype

    def add_row(self, row: RecordRow) -> None:
        """Add one row (``add_fields``)."""
        self.add_fields(row.zone, row.owner, row.rtype, row.ttl, row.rdata)

    def add_fields(
        self, zone: str, owner: str, rtype: str, ttl: int, rdata: str
    ) -> bool:
        """Add one record given as a row's fields (see ``RecordRow``); return whether it
        took the short way, which it takes only for an owner written plainly (printable
        ASCII, no escapes, not the root).

        The rows a large zone is made of take a short way: such an owner inside its
        zone, whose wire form is its own labels followed by the apex's; a type seen
        before; rdata ``row_rdata`` reads. Any other row, and every row the zone refuses,
        goes ``add_fields_general``'s way, which the short way equals in every outcome
        (tests/property/test_zone_build_rows.py)."""
        shape = self._shapes.get(zone)
        if shape is None:
            shape = self._shape(zone)
        apex, parts, suffix = shape
        code = self._types.get(rtype)
        if code is not None and suffix and owner.isascii() and owner.isprintable():
            low = owner.lower()
            key: bytes | None = None
            if low.endswith(suffix) and "\\" not in low:
                labels = wire.plain_labels(low[: -len(suffix)])
                if labels is not None and len(labels) + len(apex) <= wire.MAX_NAME:
                    key = labels + apex
            elif low == parts.origin:
                key = apex
            if key is not None and 0 <= ttl <= MAX_TTL:
                data = ipv4(rdata) if code == A else row_rdata(code, rdata)
                if data is not None:
                    record = RR_HEAD.pack(code, IN, ttl, len(data)) + data
                    if parts.nodes.setdefault(key, record) is not record or (
                        code in _CHECKED_ALONE
                    ):
                        parts.put(key, code, record)
                    return True
        self.add_fields_general(zone, owner, rtype, ttl, rdata)
        return False

    def add_fields_general(
        self, zone: str, owner: str, rtype: str, ttl: int, rdata: str
    ) -> None:
        """``add_fields`` the long way, for any row: every name through ``wire.from_text``
        and every rdata through dnspython (``rdata_wire``). The reference the short way
        is held to."""
        apex, parts = self._zone(zone)
        try:
            key = wire.from_text(owner).lower()
        except wire.BadName as exc:
            raise ZoneError(parts.origin, owner, f"bad owner name: {exc}") from None
        code = self._rtype(parts.origin, owner, rtype)
        data = rdata_wire(parts.origin, owner, code, rdata)
        self._put(apex, parts, key, code, ttl, data)

    def row_target(
        self, zone: str
    ) -> tuple[bytes, bytes, dict[bytes, bytes], dict[bytes, bytearray], set[bytes]] | None:
        """Where the compiled row reader (``rows.RowReader``) adds the rows of ``zone``
        that take the short way, once ``add_fields`` has added one: the apex, the text a
        plainly written owner below it ends with, and the parts' ``nodes``, ``more`` and
        ``notable``; ``None`` when no row of the zone takes the short way."""
        shape = self._shapes.get(zone)
        if shape is None or not shape[2]:
            return None
        apex, parts, suffix = shape
        return apex, suffix.encode("ascii"), parts.nodes, parts.more, parts.notable

    def _shape(self, zone: str) -> tuple[bytes, _ZoneParts, str]:
        """The zone's apex and parts, and the text every plainly written owner below the
        apex ends with (its origin after a dot; empty for a zone whose name is not plain
        text, or the root, whose owners all take the long way)."""
        apex, parts = self._zone(zone)
        shape = (apex, parts, zone_shape(zone)[2])
        self._shapes[zone] = shape
        return shape

    def add_wire(self, zone: str, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> bytes:
        """Add one record read from a master file; return its owner's key (lowercased)."""
        apex, parts = self._zone_keys.get(zone) or self._zone(zone)
        if rtype not in self._servable:
            reason = _unservable(rtype)
            if reason is not None:
                raise ZoneError(parts.origin, wire.to_text(owner), reason)
            self._servable.add(rtype)
        key = owner.lower()
        self._put(apex, parts, key, rtype, ttl, rdata)
        return key

    def wire_tables(
        self, zone: str
    ) -> tuple[bytes, dict[bytes, bytes], set[bytes], dict[bytes, bytearray], set[int]]:
        """What ``add_wire`` writes to for ``zone``: its apex, owner tables (``nodes``,
        ``notable``, ``more``), and the types found servable. For a compiled run of
        ``add_wire`` (the zone check's, ``_check.c``), which adds records as it does."""
        apex, parts = self._zone_keys.get(zone) or self._zone(zone)
        return apex, parts.nodes, parts.notable, parts.more, self._servable

    def _put(  # noqa: PLR0917 - one record's fields, called from two places only
        self, apex: bytes, parts: _ZoneParts, owner: bytes, rtype: int, ttl: int, rdata: bytes
    ) -> None:
        if not wire.is_at_or_below(owner, apex):
            raise ZoneError(
                parts.origin,
                wire.to_text(owner),
                "data outside the zone; put it in the zone that contains it",
            )
        if not 0 <= ttl <= MAX_TTL:
            raise ZoneError(
                parts.origin,
                wire.to_text(owner),
                f"TTL {ttl} is outside 0..{MAX_TTL} (RFC 2181)",
            )
        if len(rdata) > 65535:
            raise ZoneError(parts.origin, wire.to_text(owner), "rdata longer than 65535 octets")
        parts.put(owner, rtype, RR_HEAD.pack(rtype, IN, ttl, len(rdata)) + rdata)

    def freeze(
        self,
        apex: bytes,
        refused: Callable[[bytes, ZoneError], None] | None = None,
        *,
        spend: bool = False,
    ) -> FrozenOwners:
        """Freeze every owner of the zone at ``apex`` as ``freeze_node`` does. An owner
        that may not hold what it holds is refused with its ``ZoneError``, or, given
        ``refused`` (a check reporting every fault), handed to it and left out.
        ``spend``: the zone's records are frozen in place and the builder forgets them
        (``finish``: a large zone's table is not held twice)."""
        parts = self._zones[apex]
        if spend:
            frozen, parts.nodes = parts.nodes, {}
        else:
            frozen = dict(parts.nodes)  # the owners not notable are final already
        cuts: set[bytes] = set()
        dnames: set[bytes] = set()
        count = len(frozen) - len(parts.notable)
        notable = parts.notable
        for owner in [owner for owner in frozen if owner in notable]:  # in the file's order
            held = parts.more.get(owner) or frozen[owner]
            try:
                blob, types, records = freeze_node(parts.origin, apex, owner, held)
            except ZoneError as exc:
                if refused is None:
                    raise
                refused(owner, exc)
                del frozen[owner]
                continue
            frozen[owner] = blob
            count += records
            if NS in types and owner != apex:
                cuts.add(owner)
            if DNAME in types:
                dnames.add(owner)
        return FrozenOwners(frozen, cuts, dnames, count)

    def finish(self) -> tuple[list[ServedZone], int]:
        """Every zone added, frozen, and how many records they hold (a ``ZoneIndex``'s
        makings). The builder is spent: each zone's owner table is frozen in place and
        forgotten, so it is called once."""
        zones = []
        count = 0
        for apex, parts in self._zones.items():
            zone, records = _freeze_zone(parts.origin, apex, self.freeze(apex, spend=True))
            zones.append(zone)
            count += records
        return zones, count


def _unservable(rtype: int) -> str | None:
    """Why a type can never be zone data, or None if it can."""
    kind = dns.rdatatype.RdataType.make(rtype)
    if rtype in (0, OPT) or dns.rdatatype.is_metatype(kind):
        return f"type {dns.rdatatype.to_text(kind)} is a query or transport type, never zone data"
    return None


def rdata_wire(zone: str, owner: str, rtype: int, text: str) -> bytes:
    """Rdata in wire form from its presentation form; addresses take a short cut."""
    import dns.name
    import dns.rdata

    try:
        if rtype == A:
            return dns.ipv4.inet_aton(text.strip())
        if rtype == AAAA:
            return dns.ipv6.inet_aton(text.strip())
        kind = dns.rdatatype.RdataType.make(rtype)
        return rdata_bytes(dns.rdata.from_text(dns.rdataclass.IN, kind, text, origin=None))
    except dns.name.NeedAbsoluteNameOrOrigin:
        reason = "names in rdata must be absolute (end with a dot)"
    except (dns.exception.DNSException, ValueError, UnicodeError) as exc:
        reason = str(exc) or type(exc).__name__
    name = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(rtype))
    raise ZoneError(zone, owner, f"cannot parse {name} rdata {text!r}: {reason}")


def _freeze_zone(origin: str, apex: bytes, owners: FrozenOwners) -> tuple[ServedZone, int]:
    """Check one zone's frozen owners and build its lookup structures; return it and its
    record count."""
    frozen = owners.nodes
    soa, negative_ttl = check_apex(origin, frozen.get(apex, b""))
    empty, children, wildcards = _tree(apex, frozen)
    for owner, dname in occluded(apex, frozen, owners.dnames):
        refuse_occluded(origin, owner, dname)
    zone = ServedZone(
        origin=origin,
        apex=apex,
        nodes=OwnerMap(frozen),
        empty_nonterminals=owner_set(empty),
        cuts=owner_set(owners.cuts),
        dnames=owner_set(owners.dnames),
        soa=soa,
        negative_ttl=negative_ttl,
        children=OwnerMap(children),
        wildcards=wildcards,
        record_count=owners.count,
    )
    return zone, owners.count


@attrs.frozen
class FrozenOwners:
    """A zone's owners in their final encoding, with what its structure hangs on."""

    nodes: dict[bytes, bytes]
    cuts: set[bytes]
    """Owners below the apex holding NS: delegations."""
    dnames: set[bytes]
    count: int
    """Records, duplicates dropped."""


def freeze_node(
    origin: str, apex: bytes, owner: bytes, held: bytes | bytearray
) -> tuple[bytes, Iterable[int], int]:
    """One owner's final encoding, the types that matter to the zone's structure (all of
    them, or a single record's type) and its record count; refuse what an owner may not
    hold."""
    if isinstance(held, bytes):
        # One record (a second one turns the value into a bytearray): already final.
        rtype = RR_HEAD.unpack_from(held)[0]
        if rtype in (NS, DNAME, SOA):
            _check_node(origin, apex, owner, {rtype: 1})
        return held, (rtype,), 1
    blob, counts = _merge_node(held)
    _check_node(origin, apex, owner, counts)
    return blob, counts.keys(), sum(counts.values())


def check_apex(origin: str, blob: bytes) -> tuple[bytes, int]:
    """The apex's SOA rdata and the zone's negative TTL; refuse an apex without SOA/NS."""
    apex_sets = decode_node(blob)
    if SOA not in apex_sets:
        raise ZoneError(origin, origin, "no SOA record at the apex; add one")
    if NS not in apex_sets:
        raise ZoneError(origin, origin, "no NS records at the apex; add the zone's name servers")
    soa_ttl, (soa_rdata,) = apex_sets[SOA]
    minimum = struct.unpack_from("!I", soa_rdata, len(soa_rdata) - 4)[0]
    return soa_rdata, min(soa_ttl, minimum)


def _type_names(types: Iterable[int]) -> str:
    return ", ".join(dns.rdatatype.to_text(dns.rdatatype.RdataType.make(t)) for t in types)


def _check_node(origin: str, apex: bytes, owner: bytes, counts: Mapping[int, int]) -> None:
    """Refuse what an owner may not hold, from how many records of each type it holds."""
    def refused(reason: str) -> ZoneError:  # the name is spelt only for a refusal
        return ZoneError(origin, wire.to_text(owner), reason)

    if SOA in counts:
        if owner != apex:
            raise refused(
                "SOA record below the apex; an SOA belongs only at its zone's own name "
                "(serve the child as a zone of its own)"
            )
        if counts[SOA] != 1:
            raise refused("more than one SOA record at the apex; keep one")
    if CNAME in counts:
        others = [t for t in counts if t not in _BESIDE_CNAME]
        if others:
            raise refused(
                f"CNAME beside other data ({_type_names(others)}); a name with a CNAME "
                "may hold nothing else, so remove one or the other"
            )
        if counts[CNAME] != 1:
            raise refused("more than one CNAME record; a name may have one")
    if DNAME in counts and counts[DNAME] != 1:
        raise refused("more than one DNAME record; a name may have one")

"""The zone index: every served zone's records, checked once and looked up by hash.

An index is built in one go from rows (``ZoneIndex.from_records``) or from RFC 1035
master files (``ZoneIndex.from_zone_text``) and never changes afterwards; a reload builds
a new index and the serve loop swaps it in whole. ``ZoneIndex.with_owners_replaced``
makes the new version of one zone from the old one by replacing a few owners' records:
it re-checks only those owners and updates the derived structures in place of a rebuild,
so its cost follows the owners changed, not the size of the zone, and its result is the
index a full build of the changed records would give. Building refuses, with a ``ZoneError``
naming the zone, the owner and the reason, anything a zone cannot serve: no single SOA
at the apex, no apex NS, a CNAME beside other data, data outside the zone or hidden
beneath a DNAME, rdata that does not parse, and types that never live in a zone.

Names are compared case-insensitively: the index keys every owner by its lowercased
wire form, and answers carry owners in lowercase (the question itself is always echoed
exactly as asked). Rdata keeps the case it was given. Row names and names inside row
rdata must be absolute (end with a dot); a master file may use relative names, which are
made absolute against its origin as RFC 1035 says.

Every lookup the answer path makes is a dict or set probe: the records of each owner,
the empty non-terminals, the delegation points and the DNAME owners are precomputed, so
a query costs the same against a million-record zone as against a ten-record one. To
keep a million records affordable, each owner's records are one ``bytes`` value: its
RRs in wire form without the owner name (type, class, TTL, rdata length, rdata), grouped
by type in ascending type order, exactly as they appear after the owner in a response.
"""

from __future__ import annotations

import collections
import copy
import itertools
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import dns.exception
import dns.ipv4
import dns.ipv6
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype

from valis_core.dns import wire
from valis_core.dns.master import MasterFileError, read_master
from valis_core.errors import ValisError

A = 1
NS = 2
CNAME = 5
SOA = 6
PTR = 12
MX = 15
AAAA = 28
SRV = 33
DNAME = 39
OPT = 41
DS = 43
RRSIG = 46
NSEC = 47
IN = 1

MAX_TTL = 2**31 - 1
"""RFC 2181 section 8: a TTL is an unsigned 31-bit number of seconds."""

_BESIDE_CNAME = frozenset({CNAME, RRSIG, NSEC})
"""What may share an owner with a CNAME (RFC 1034 section 3.6.2, RFC 4035)."""

_RR_HEAD = struct.Struct("!HHIH")

RRset = tuple[int, tuple[bytes, ...]]
"""The TTL and the rdatas (uncompressed wire form) of one owner's records of one type."""

_V = TypeVar("_V")

ResponseCache = collections.OrderedDict[bytes, tuple[Any, ...]]
"""Encoded responses keyed by question; owned and filled by ``valis_core.dns.answer``."""


@attrs.frozen
class RecordRow:
    """One resource record as the operator states it.

    ``zone`` and ``owner`` are absolute names (trailing dot; compared case-insensitively),
    ``rtype`` a type mnemonic (``"A"``, ``"MX"``, ``"TYPE65280"``), ``ttl`` seconds, and
    ``rdata`` the presentation form with absolute names (``"10 mail.example.com."``).
    """

    zone: str
    owner: str
    rtype: str
    ttl: int
    rdata: str


class ZoneError(ValisError):
    """A zone that cannot be served as given; nothing from it is served."""

    def __init__(self, zone: str, owner: str, reason: str) -> None:
        self.zone = zone
        self.owner = owner
        self.reason = reason
        super().__init__(f"zone {zone} cannot be served: {owner}: {reason}")


class ServedZone:
    """One zone as the answer path reads it. Treat every attribute as read-only.

    ``nodes`` maps each owner (lowercased wire form) to its records, encoded as the module
    docstring says (read them with ``decode_node``); ``empty_nonterminals`` are names
    that exist only because something lies beneath them; ``cuts`` are delegation points
    (NS below the apex, including their own DS); ``dnames`` are DNAME owners;
    ``parent`` is the nearest enclosing zone the same index serves. ``children`` counts,
    for every name with something beneath it, the names one label below it that exist
    (have data or are empty non-terminals), and ``wildcards`` how many existing names
    are wildcards: the bookkeeping that lets ``with_owners_replaced`` keep the empty
    non-terminals and ``has_wildcard`` right without walking the whole zone.
    """

    __slots__ = (
        "apex",
        "children",
        "cuts",
        "dnames",
        "empty_nonterminals",
        "has_wildcard",
        "negative_ttl",
        "nodes",
        "origin",
        "parent",
        "record_count",
        "soa",
        "wildcards",
    )

    def __init__(
        self,
        *,
        origin: str,
        apex: bytes,
        nodes: dict[bytes, bytes],
        empty_nonterminals: frozenset[bytes],
        cuts: frozenset[bytes],
        dnames: frozenset[bytes],
        soa: bytes,
        negative_ttl: int,
        children: Mapping[bytes, int],
        wildcards: int,
        record_count: int,
    ) -> None:
        self.origin = origin
        self.apex = apex
        self.nodes: Mapping[bytes, bytes] = nodes
        self.empty_nonterminals = empty_nonterminals
        self.cuts = cuts
        self.dnames = dnames
        self.children: Mapping[bytes, int] = children
        self.wildcards = wildcards
        self.has_wildcard = wildcards > 0
        self.soa = soa
        self.negative_ttl = negative_ttl
        self.record_count = record_count
        self.parent: ServedZone | None = None

    def exists(self, name: bytes) -> bool:
        """Whether ``name`` (lowercased wire form) exists in this zone, data or not."""
        return name in self.nodes or name in self.empty_nonterminals

    def with_owners_replaced(
        self, owners: Iterable[bytes], rows: Iterable[RecordRow]
    ) -> ServedZone:
        """This zone with every record of ``owners`` (lowercased wire names) replaced by
        ``rows``, which must be all the records those owners now have (none: the owner
        goes). Raises ``ZoneError`` if the result cannot be served, exactly when building
        the whole changed zone would, and ``ValueError`` for a row of another zone or of
        an owner not listed. The new zone shares nothing mutable with this one."""
        return _replace_owners(self, frozenset(owners), rows)


def decode_node(blob: bytes) -> dict[int, RRset]:
    """An owner's records by type, from the form ``ServedZone.nodes`` holds."""
    out: dict[int, RRset] = {}
    size = len(blob)
    i = 0
    while i < size:
        rtype, _, ttl, length = _RR_HEAD.unpack_from(blob, i)
        start = i + 10
        i = start + length
        rdata = blob[start:i]
        held = out.get(rtype)
        out[rtype] = (ttl, (rdata,)) if held is None else (ttl, (*held[1], rdata))
    return out


class ZoneIndex:
    """Every served zone, immutable once built; ``zone_for`` finds the deepest one.

    ``answer_cache`` is scratch space for the answer path's encoded responses: it only
    ever holds what can be derived from the index, so it never changes what is served.
    """

    __slots__ = ("_by_apex", "_origins", "_record_count", "answer_cache")

    def __init__(self, zones: Iterable[ServedZone], record_count: int) -> None:
        """Combine already-built zones (from other indexes) into one index.

        Each zone's ``parent`` is relinked to this index's zones, so pass copies of zones
        that another index still serves (``copy.copy`` is enough: the records are shared
        and never change). The ``from_*`` constructors are the usual way in.
        """
        self._by_apex = {zone.apex: zone for zone in zones}
        for zone in self._by_apex.values():
            if zone.apex != wire.ROOT:
                zone.parent = self.zone_for(wire.parent(zone.apex))
        self._origins = tuple(sorted(zone.origin for zone in self._by_apex.values()))
        self._record_count = record_count
        self.answer_cache: ResponseCache = collections.OrderedDict()

    @classmethod
    def from_records(cls, rows: Iterable[RecordRow]) -> ZoneIndex:
        """Index rows spanning any number of zones; raise ``ZoneError`` on the first
        zone that cannot be served."""
        builder = _Builder()
        for row in rows:
            builder.add_row(row)
        return builder.finish()

    @classmethod
    def from_zone_text(cls, text: str, origin: str | None = None) -> ZoneIndex:
        """Index one RFC 1035 master file (see ``parse_zone_text`` for ``origin``)."""
        return cls.from_zone_texts([(text, origin)])

    @classmethod
    def from_zone_texts(cls, sources: Iterable[tuple[str, str | None]]) -> ZoneIndex:
        """Index several master files, one zone each, as ``(text, origin)`` pairs."""
        builder = _Builder()
        for text, origin in sources:
            _read_master(text, origin, builder.add_wire)
        return builder.finish()

    def with_owners_replaced(
        self, zone: str, owners: Iterable[str], rows: Iterable[RecordRow]
    ) -> ZoneIndex:
        """A new index with ``owners`` (absolute names) of the served ``zone`` holding
        exactly ``rows`` (see ``ServedZone.with_owners_replaced``); the other zones are
        shared. Raises ``ZoneError`` as a full build would, ``KeyError`` for a zone this
        index does not serve."""
        try:
            apex = wire.from_text(_absolute(zone)).lower()
        except wire.BadName as exc:
            raise ZoneError(zone, zone, f"bad zone name: {exc}") from None
        old = self._by_apex.get(apex)
        if old is None:
            raise KeyError(zone)
        keys = []
        for owner in owners:
            try:
                keys.append(wire.from_text(owner).lower())
            except wire.BadName as exc:
                raise ZoneError(old.origin, owner, f"bad owner name: {exc}") from None
        new = old.with_owners_replaced(keys, rows)
        zones = [new if held is old else copy.copy(held) for held in self._by_apex.values()]
        return ZoneIndex(zones, self._record_count - old.record_count + new.record_count)

    @property
    def zones(self) -> tuple[str, ...]:
        """The served zones' names, lowercase with a trailing dot, sorted."""
        return self._origins

    @property
    def record_count(self) -> int:
        """How many distinct records are served (duplicates in the input count once)."""
        return self._record_count

    def zone_for(self, name: bytes) -> ServedZone | None:
        """The deepest served zone at or above ``name`` (lowercased wire form)."""
        zones = self._by_apex
        i = 0
        while True:
            zone = zones.get(name[i:])
            if zone is not None:
                return zone
            if not name[i]:
                return None
            i += name[i] + 1


def parse_zone_text(text: str, origin: str | None = None) -> tuple[RecordRow, ...]:
    """The records of an RFC 1035 master file, as rows with absolute names.

    ``origin`` is the zone's name; relative names in the file are made absolute against
    it (and against ``$ORIGIN`` lines). Without it, the zone is the owner of the file's
    SOA record. ``$TTL``, ``$ORIGIN`` and ``$GENERATE`` are understood; ``$INCLUDE`` is
    refused, because a zone must not read files the operator did not hand over.
    """
    found: list[tuple[str, bytes, int, int, bytes]] = []

    def keep(zone: str, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        found.append((zone, owner, rtype, ttl, rdata))

    _read_master(text, origin, keep)
    rows = []
    for zone, owner, rtype, ttl, rdata in found:
        kind = dns.rdatatype.RdataType.make(rtype)
        text_rdata = dns.rdata.from_wire(dns.rdataclass.IN, kind, rdata, 0, len(rdata))
        rows.append(
            RecordRow(
                zone=zone,
                owner=wire.to_text(owner),
                rtype=dns.rdatatype.to_text(kind),
                ttl=ttl,
                rdata=text_rdata.to_text(),
            )
        )
    return tuple(rows)


# --- reading master files -------------------------------------------------------------

_Sink = Callable[[str, bytes, int, int, bytes], None]


def _read_master(text: str, origin: str | None, sink: _Sink) -> None:
    """Parse a master file and feed each record to ``sink`` with the zone it belongs to."""
    label = origin if origin is not None else "(zone named by its SOA)"
    origin_name: dns.name.Name | None = None
    if origin is not None:
        try:
            origin = wire.to_text(wire.from_text(_absolute(origin)).lower())
        except wire.BadName as exc:
            raise ZoneError(label, origin, f"bad origin: {exc}") from None
        origin_name = dns.name.from_text(origin)
        label = origin
    records: list[tuple[bytes, int, int, bytes]] = []

    def emit(owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        if origin is None:
            records.append((owner, rtype, ttl, rdata))  # the zone is known only at the end
        else:
            sink(origin, owner, rtype, ttl, rdata)

    try:
        read_master(text, origin_name, emit)
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
        zone = wire.to_text(soa_owners.pop())
        for record in records:
            sink(zone, *record)


def _absolute(name: str) -> str:
    return name if name.endswith(".") else name + "."


# --- building -------------------------------------------------------------------------


class _Builder:
    """Accumulates records per zone and owner, then checks and freezes them."""

    def __init__(self) -> None:
        self._zone_keys: dict[str, tuple[bytes, str]] = {}
        self._origins: dict[bytes, str] = {}
        self._nodes: dict[bytes, dict[bytes, bytes | bytearray]] = {}
        self._types: dict[str, int] = {}
        self._servable: set[int] = set()

    def add_zone(self, zone: str) -> None:
        """Include ``zone`` even if no record of it is added."""
        self._zone(zone)

    def apexes(self) -> set[bytes]:
        return set(self._nodes)

    def owners(self, apex: bytes) -> dict[bytes, bytes | bytearray]:
        return self._nodes[apex]

    def _zone(self, zone: str) -> tuple[bytes, str]:
        known = self._zone_keys.get(zone)
        if known is not None:
            return known
        try:
            apex = wire.from_text(_absolute(zone)).lower()
        except wire.BadName as exc:
            raise ZoneError(zone, zone, f"bad zone name: {exc}") from None
        origin = wire.to_text(apex)
        self._origins.setdefault(apex, origin)
        self._nodes.setdefault(apex, {})
        self._zone_keys[zone] = (apex, origin)
        return apex, origin

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
        return rtype

    def add_row(self, row: RecordRow) -> None:
        apex, origin = self._zone(row.zone)
        try:
            owner = wire.from_text(row.owner).lower()
        except wire.BadName as exc:
            raise ZoneError(origin, row.owner, f"bad owner name: {exc}") from None
        rtype = self._rtype(origin, row.owner, row.rtype)
        rdata = _rdata_wire(origin, row.owner, rtype, row.rdata)
        self._put(apex, origin, owner, rtype, row.ttl, rdata)

    def add_wire(self, zone: str, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        apex, origin = self._zone(zone)
        if rtype not in self._servable:
            reason = _unservable(rtype)
            if reason is not None:
                raise ZoneError(origin, wire.to_text(owner), reason)
            self._servable.add(rtype)
        self._put(apex, origin, owner.lower(), rtype, ttl, rdata)

    def _put(  # noqa: PLR0917 - one record's fields, called from two places only
        self, apex: bytes, origin: str, owner: bytes, rtype: int, ttl: int, rdata: bytes
    ) -> None:
        if not wire.is_at_or_below(owner, apex):
            raise ZoneError(
                origin,
                wire.to_text(owner),
                "data outside the zone; put it in the zone that contains it",
            )
        if not 0 <= ttl <= MAX_TTL:
            raise ZoneError(
                origin, wire.to_text(owner), f"TTL {ttl} is outside 0..{MAX_TTL} (RFC 2181)"
            )
        if len(rdata) > 65535:
            raise ZoneError(origin, wire.to_text(owner), "rdata longer than 65535 octets")
        record = _RR_HEAD.pack(rtype, IN, ttl, len(rdata)) + rdata
        nodes = self._nodes[apex]
        held = nodes.get(owner)
        if held is None:
            nodes[owner] = record
        elif isinstance(held, bytearray):
            held += record
        else:
            nodes[owner] = bytearray(held) + record

    def finish(self) -> ZoneIndex:
        zones = []
        count = 0
        for apex, nodes in self._nodes.items():
            zone, records = _freeze_zone(self._origins[apex], apex, nodes)
            zones.append(zone)
            count += records
        return ZoneIndex(zones, count)


def _unservable(rtype: int) -> str | None:
    """Why a type can never be zone data, or None if it can."""
    kind = dns.rdatatype.RdataType.make(rtype)
    if rtype in (0, OPT) or dns.rdatatype.is_metatype(kind):
        return f"type {dns.rdatatype.to_text(kind)} is a query or transport type, never zone data"
    return None


def _rdata_wire(zone: str, owner: str, rtype: int, text: str) -> bytes:
    """Rdata in wire form from its presentation form; addresses take a short cut."""
    try:
        if rtype == A:
            return dns.ipv4.inet_aton(text.strip())
        if rtype == AAAA:
            return dns.ipv6.inet_aton(text.strip())
        kind = dns.rdatatype.RdataType.make(rtype)
        return _rdata_bytes(dns.rdata.from_text(dns.rdataclass.IN, kind, text, origin=None))
    except dns.name.NeedAbsoluteNameOrOrigin:
        reason = "names in rdata must be absolute (end with a dot)"
    except (dns.exception.DNSException, ValueError, UnicodeError) as exc:
        reason = str(exc) or type(exc).__name__
    name = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(rtype))
    raise ZoneError(zone, owner, f"cannot parse {name} rdata {text!r}: {reason}")


def _rdata_bytes(rdata: dns.rdata.Rdata) -> bytes:
    data = rdata.to_wire()
    assert data is not None  # no file given, so dnspython returns the bytes
    return data


def _freeze_zone(
    origin: str, apex: bytes, nodes: dict[bytes, bytes | bytearray]
) -> tuple[ServedZone, int]:
    """Check one zone's records and build its lookup structures; return it and its
    record count."""
    frozen: dict[bytes, bytes] = {}
    cuts: set[bytes] = set()
    dnames: set[bytes] = set()
    count = 0
    for owner, held in nodes.items():
        blob, types, records = _freeze_node(origin, apex, owner, held)
        frozen[owner] = blob
        count += records
        if NS in types and owner != apex:
            cuts.add(owner)
        if DNAME in types:
            dnames.add(owner)
    soa, negative_ttl = _check_apex(origin, frozen.get(apex, b""))
    empty, children = _tree(apex, frozen)
    if dnames:
        _check_occlusion(origin, apex, frozen, dnames)
    zone = ServedZone(
        origin=origin,
        apex=apex,
        nodes=frozen,
        empty_nonterminals=frozenset(empty),
        cuts=frozenset(cuts),
        dnames=frozenset(dnames),
        soa=soa,
        negative_ttl=negative_ttl,
        children=children,
        wildcards=sum(1 for name in itertools.chain(frozen, empty) if _is_wildcard(name)),
        record_count=count,
    )
    return zone, count


def _freeze_node(
    origin: str, apex: bytes, owner: bytes, held: bytes | bytearray
) -> tuple[bytes, Iterable[int], int]:
    """One owner's final encoding, the types that matter to the zone's structure (all of
    them, or a single record's type) and its record count; refuse what an owner may not
    hold."""
    if isinstance(held, bytes):
        # One record (a second one turns the value into a bytearray): already final.
        rtype = _RR_HEAD.unpack_from(held)[0]
        if rtype in (NS, DNAME, SOA):
            _check_node(origin, apex, owner, decode_node(held))
        return held, (rtype,), 1
    sets, blob = _merge(bytes(held))
    _check_node(origin, apex, owner, sets)
    return blob, sets.keys(), sum(len(rdatas) for _, rdatas in sets.values())


def _check_apex(origin: str, blob: bytes) -> tuple[bytes, int]:
    """The apex's SOA rdata and the zone's negative TTL; refuse an apex without SOA/NS."""
    apex_sets = decode_node(blob)
    if SOA not in apex_sets:
        raise ZoneError(origin, origin, "no SOA record at the apex; add one")
    if NS not in apex_sets:
        raise ZoneError(origin, origin, "no NS records at the apex; add the zone's name servers")
    soa_ttl, (soa_rdata,) = apex_sets[SOA]
    minimum = struct.unpack_from("!I", soa_rdata, len(soa_rdata) - 4)[0]
    return soa_rdata, min(soa_ttl, minimum)


def _replace_owners(
    zone: ServedZone, owners: frozenset[bytes], rows: Iterable[RecordRow]
) -> ServedZone:
    """``ServedZone.with_owners_replaced``: the changed owners are checked as a build
    checks them, and the empty non-terminals, child counts, wildcards, cuts and DNAMEs
    are updated owner by owner, each step leaving them as a build of that state would."""
    origin, apex = zone.origin, zone.apex
    for owner in owners:
        if not wire.is_at_or_below(owner, apex):
            raise ZoneError(
                origin,
                wire.to_text(owner),
                "data outside the zone; put it in the zone that contains it",
            )
    builder = _Builder()
    builder.add_zone(origin)
    for row in rows:
        builder.add_row(row)
    if builder.apexes() != {apex}:
        raise ValueError(f"rows for zones other than {origin} given to replace its owners")
    fresh = builder.owners(apex)
    stray = fresh.keys() - owners
    if stray:
        raise ValueError(f"rows of owners not being replaced: {wire.to_text(min(stray))}")

    order = sorted(owners)
    frozen = {
        owner: _freeze_node(origin, apex, owner, fresh[owner]) for owner in order if owner in fresh
    }
    # ``dict.copy`` clones the hash table as it is (no rehashing) while few entries were
    # deleted, so owners are replaced in place and deleted only when they go.
    nodes = _copied(zone.nodes)
    empty: set[bytes] | None = None  # copied when the first owner appears or vanishes
    children = zone.children
    wildcards = zone.wildcards
    count = zone.record_count
    for owner in order:
        old = nodes.get(owner)
        if old is not None:
            count -= _count_records(old)
        new = frozen.get(owner)
        if new is not None:
            nodes[owner] = new[0]
            count += new[2]
        elif old is not None:
            del nodes[owner]
        if (old is None) == (new is None):
            continue  # it existed before and still does, or neither
        if empty is None:
            empty = set(zone.empty_nonterminals)
            children = _copied(zone.children)
        assert isinstance(children, dict)
        if new is not None:
            if owner in empty:
                empty.discard(owner)  # it existed already, as an empty non-terminal
            else:
                wildcards += _appear(apex, owner, nodes, empty, children)
        elif children.get(owner):
            empty.add(owner)  # it still exists, for what lies beneath it
        else:
            wildcards -= _vanish(apex, owner, nodes, children, empty)

    cut_now = {owner for owner, (_, types, _) in frozen.items() if NS in types}
    cuts = _members(zone.cuts, owners, cut_now - {apex})
    dname_now = {owner for owner, (_, types, _) in frozen.items() if DNAME in types}
    dnames = _members(zone.dnames, owners, dname_now)
    if apex in owners:
        soa, negative_ttl = _check_apex(origin, nodes.get(apex, b""))
    else:
        soa, negative_ttl = zone.soa, zone.negative_ttl
    if dnames:
        _check_occlusion_of(origin, apex, owners, nodes, children, dnames)
    return ServedZone(
        origin=origin,
        apex=apex,
        nodes=nodes,
        empty_nonterminals=(
            zone.empty_nonterminals if empty is None else frozenset(empty)
        ),
        cuts=cuts,
        dnames=dnames,
        soa=soa,
        negative_ttl=negative_ttl,
        children=children,  # shared when unchanged: no version ever mutates it
        wildcards=wildcards,
        record_count=count,
    )


def _copied(mapping: Mapping[bytes, _V]) -> dict[bytes, _V]:
    return mapping.copy() if isinstance(mapping, dict) else dict(mapping)


def _members(
    before: frozenset[bytes], owners: frozenset[bytes], now: set[bytes]
) -> frozenset[bytes]:
    """A set of owners (cuts, DNAMEs) after ``owners`` changed, of which ``now`` are in
    it; the old set itself when nothing changed."""
    if before.isdisjoint(owners) and not now:
        return before
    return (before - owners) | now


def _count_records(blob: bytes) -> int:
    count = 0
    size = len(blob)
    i = 0
    while i < size:
        i += 10 + _RR_HEAD.unpack_from(blob, i)[3]
        count += 1
    return count


def _is_wildcard(name: bytes) -> bool:
    return name.startswith(b"\x01*")


def _merge(blob: bytes) -> tuple[dict[int, RRset], bytes]:
    """Group an owner's records by type, drop duplicates, give each RRset the lowest
    TTL stated for it (RFC 2181 section 5.2), and re-encode in type order."""
    ttls: dict[int, int] = {}
    rdatas: dict[int, dict[bytes, None]] = {}
    size = len(blob)
    i = 0
    while i < size:
        rtype, _, ttl, length = _RR_HEAD.unpack_from(blob, i)
        start = i + 10
        i = start + length
        ttls[rtype] = min(ttl, ttls.get(rtype, ttl))
        rdatas.setdefault(rtype, {})[blob[start:i]] = None
    sets: dict[int, RRset] = {}
    out = bytearray()
    for rtype in sorted(rdatas):
        ttl = ttls[rtype]
        sets[rtype] = (ttl, tuple(rdatas[rtype]))
        for rdata in rdatas[rtype]:
            out += _RR_HEAD.pack(rtype, IN, ttl, len(rdata))
            out += rdata
    return sets, bytes(out)


def _type_names(types: Iterable[int]) -> str:
    return ", ".join(dns.rdatatype.to_text(dns.rdatatype.RdataType.make(t)) for t in types)


def _check_node(origin: str, apex: bytes, owner: bytes, sets: dict[int, RRset]) -> None:
    name = wire.to_text(owner)
    if SOA in sets:
        if owner != apex:
            raise ZoneError(
                origin,
                name,
                "SOA record below the apex; an SOA belongs only at its zone's own name "
                "(serve the child as a zone of its own)",
            )
        if len(sets[SOA][1]) != 1:
            raise ZoneError(origin, name, "more than one SOA record at the apex; keep one")
    if CNAME in sets:
        others = [t for t in sets if t not in _BESIDE_CNAME]
        if others:
            raise ZoneError(
                origin,
                name,
                f"CNAME beside other data ({_type_names(others)}); a name with a CNAME "
                "may hold nothing else, so remove one or the other",
            )
        if len(sets[CNAME][1]) != 1:
            raise ZoneError(origin, name, "more than one CNAME record; a name may have one")
    if DNAME in sets and len(sets[DNAME][1]) != 1:
        raise ZoneError(origin, name, "more than one DNAME record; a name may have one")


def _tree(apex: bytes, nodes: Mapping[bytes, bytes]) -> tuple[set[bytes], dict[bytes, int]]:
    """The empty non-terminals (names with no records of their own but something beneath
    them) and, for each name with something beneath it, how many existing names lie one
    label below it. The apex always exists and is never an empty non-terminal."""
    empty: set[bytes] = set()
    children: dict[bytes, int] = {}
    for owner in nodes:
        _appear(apex, owner, nodes, empty, children)
    return empty, children


def _appear(
    apex: bytes,
    owner: bytes,
    nodes: Mapping[bytes, bytes],
    empty: set[bytes],
    children: dict[bytes, int],
) -> int:
    """Account for ``owner`` coming into existence (it now has data and did not exist);
    return how many wildcard names came into existence with it."""
    added = int(_is_wildcard(owner))
    name = owner
    while name != apex:
        up = wire.parent(name)
        children[up] = children.get(up, 0) + 1
        if up == apex or up in nodes or up in empty:
            break
        empty.add(up)
        added += _is_wildcard(up)
        name = up
    return added


def _vanish(
    apex: bytes,
    owner: bytes,
    nodes: Mapping[bytes, bytes],
    children: dict[bytes, int],
    empty: set[bytes],
) -> int:
    """Account for ``owner`` ceasing to exist (no data left, nothing beneath it); return
    how many wildcard names ceased to exist with it."""
    removed = int(_is_wildcard(owner))
    name = owner
    while name != apex:
        up = wire.parent(name)
        left = children[up] - 1
        if left:
            children[up] = left
            break
        del children[up]
        if up == apex or up in nodes:
            break
        empty.discard(up)  # an empty non-terminal with nothing beneath it any more
        removed += _is_wildcard(up)
        name = up
    return removed


def _check_occlusion(
    origin: str, apex: bytes, nodes: dict[bytes, bytes], dnames: set[bytes]
) -> None:
    """RFC 6672 section 2.4: nothing may exist beneath a DNAME, since it is never seen."""
    for owner in nodes:
        name = owner
        while name != apex:
            name = wire.parent(name)
            if name in dnames:
                _refuse_occluded(origin, owner, name)


def _check_occlusion_of(  # noqa: PLR0917 - the patched zone's parts, one caller
    origin: str,
    apex: bytes,
    owners: frozenset[bytes],
    nodes: Mapping[bytes, bytes],
    children: Mapping[bytes, int],
    dnames: frozenset[bytes],
) -> None:
    """``_check_occlusion`` for a zone where only ``owners`` changed: a changed owner
    with data beneath a DNAME, or a changed owner that is now a DNAME with something
    beneath it. Any other pair was already there, and already refused."""
    for owner in sorted(owners):
        if owner in nodes:
            name = owner
            while name != apex:
                name = wire.parent(name)
                if name in dnames:
                    _refuse_occluded(origin, owner, name)
        if owner in dnames and children.get(owner):
            below = min(n for n in nodes if n != owner and wire.is_at_or_below(n, owner))
            _refuse_occluded(origin, below, owner)


def _refuse_occluded(origin: str, owner: bytes, dname: bytes) -> None:
    raise ZoneError(
        origin,
        wire.to_text(owner),
        f"data beneath the DNAME at {wire.to_text(dname)} is never served "
        "(RFC 6672); remove it or the DNAME",
    )

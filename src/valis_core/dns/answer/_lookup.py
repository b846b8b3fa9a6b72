"""Resolving a question in the zone index into an encoded entry: one lookup for the plain
and the signed path.

``resolve`` finds the answer to a question (RFC 1034 section 4.3.2; CNAME and DNAME
chains, delegations, wildcards, additional data) and ``encode`` writes it; the signed
path (``signed``) takes its steps (``find``, ``step``, ``next_link``) and adds the
signatures and denial.
"""

from __future__ import annotations

from typing import TypeVar

from valis_core.dns.answer._cache import Reading, ResponseCache, Zones
from valis_core.dns.answer.message import (
    AA,
    QR,
    Entry,
    Writer,
)
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import (
    AAAA,
    ANY,
    CNAME,
    DNAME,
    DS,
    HTTPS,
    MX,
    NAPTR,
    NOERROR,
    NS,
    NXDOMAIN,
    REFUSED,
    SOA,
    SRV,
    SVCB,
    YXDOMAIN,
    A,
    RRset,
    decode_node,
)
from valis_core.dns.zone import ServedZone, ZoneIndex

_V = TypeVar("_V")

try:  # the owner tables' probes (zone.owners), in one C call each
    from valis_core.dns.answer._fastpath import owner_get, owner_has
except ImportError:  # not built: the same in Python

    def owner_get(shards: tuple[dict[bytes, _V], ...], key: bytes, /) -> _V | None:
        return shards[hash(key) & (len(shards) - 1)].get(key)

    def owner_has(shards: tuple[dict[bytes, object], ...], key: bytes, /) -> bool:
        return key in shards[hash(key) & (len(shards) - 1)]


MAX_CHAIN = 12
"""CNAME/DNAME links followed for one answer."""

_REFUSED_ENTRY: Entry = (QR | REFUSED, 0, 0, 0, b"", 0, None)

RR = tuple[bytes, int, int, bytes]
"""One record to write: owner (wire), type, TTL, rdata (uncompressed wire)."""



class Draft:
    """The sections of one answer while it is being found."""

    __slots__ = ("aa", "answer", "authority", "extra", "glue", "listed", "probed", "rcode")

    def __init__(self) -> None:
        self.aa = True
        self.rcode = NOERROR
        self.answer: list[RR] = []
        self.authority: list[RR] = []
        self.glue: list[RR] = []
        self.extra: list[RR] = []
        self.listed: set[tuple[bytes, int]] = set()
        self.probed: list[bytes] = []
        """The names whose records were asked for (``rrset``, ``addresses``), found or
        not: what an answer kept inside a changed zone depends on (``_cache.untouched``)."""

    def negative(self, zone: ServedZone, rcode: int) -> None:
        self.rcode = rcode
        self.authority.append((zone.apex, SOA, zone.negative_ttl, zone.soa))

    def rrset(self, into: list[RR], zone: ServedZone, name: bytes, rtype: int) -> RRset | None:
        """Put the ``rtype`` records ``zone`` holds at ``name`` into ``into``, once per
        answer; return them (``None`` if there are none, or they are already there)."""
        self.probed.append(name)
        blob = owner_get(zone.nodes.shards, name)
        if blob is None or (name, rtype) in self.listed:
            return None
        rrset = decode_node(blob).get(rtype)
        if rrset is not None:
            self.listed.add((name, rtype))
            into.extend(records_of(name, rtype, rrset))
        return rrset

    def addresses(self, into: list[RR], zone: ServedZone, name: bytes) -> None:
        """The A and AAAA records ``zone`` holds at ``name``, once per answer."""
        self.probed.append(name)
        blob = owner_get(zone.nodes.shards, name)
        if blob is None:
            return
        sets = decode_node(blob)
        for rtype in (A, AAAA):
            rrset = sets.get(rtype)
            if rrset is not None and (name, rtype) not in self.listed:
                self.listed.add((name, rtype))
                into.extend(records_of(name, rtype, rrset))


def records_of(owner: bytes, rtype: int, rrset: RRset) -> list[RR]:
    ttl, rdatas = rrset
    return [(owner, rtype, ttl, rdata) for rdata in rdatas]


def resolve(
    index: ZoneIndex, cache: ResponseCache, qname: bytes, qtype: int
) -> tuple[Entry, Reading | None]:
    """The answer to a question, and the lookups it was found through when it is worth
    keeping in the response cache (``_cache.Reading``: the cache keeps it for every zone
    version those lookups give). A question the lookup finds no data for at its first
    link (NXDOMAIN, NODATA) takes the zone's prebuilt negative answer
    (``negative_entry``) and is not kept (``None``): that costs the lookup alone, never an
    encoding. Refusals are not kept either."""
    first = zone = index.zone_for(qname)
    if zone is None:
        return _REFUSED_ENTRY, None
    at_apex = qtype == DS and qname == zone.apex
    if at_apex:
        zone = index.parent_of(zone) or zone
    found = find(zone, qname, qtype)
    if found[0] is None:
        rcode = NOERROR if found[1] else NXDOMAIN
        return negative_entry(cache, zone, rcode, len(qname) - len(zone.apex)), None
    reading = Reading(index, qname, first, at_apex)  # an answer to keep: lookups noted
    draft = Draft()
    name = qname
    seen = {qname}
    plain = True  # every link found a name present (not a denial, nor a wildcard)
    for link in range(MAX_CHAIN):
        if link:
            if qtype == DS and name == zone.apex:
                zone = reading.parent_of(zone) or zone
            found = find(zone, name, qtype)
        if plain and (found[0] is None or (found[0] == FOUND_DATA and zone.has_wildcard
                                           and not owner_has(zone.nodes.shards, name))):
            plain = False  # read from names that do not exist: kept for this version alone
        target = step(zone, name, qtype, found, draft, first=not link)
        if target is None:
            break
        link_to = next_link(reading, seen, target)
        if link_to is None:
            break
        zone, name = link_to
    if plain:  # each link's name is a lookup the reading noted
        reading.reads = tuple(draft.probed)
    return encode(qname, draft), reading


def next_link(
    index: Zones, seen: set[bytes], target: bytes
) -> tuple[ServedZone, bytes] | None:
    """Where a CNAME or DNAME chain goes next: the zone serving ``target`` and its
    lowercased name, noted in ``seen``; None where the chain ends (a loop, or a name no
    served zone holds). The signed path follows chains by the same rule."""
    name = target.lower()
    if name in seen:
        return None
    seen.add(name)
    zone = index.zone_for(name)
    if zone is None:
        return None
    return zone, name


def negative_entry(cache: ResponseCache, zone: ServedZone, rcode: int, at: int) -> Entry:
    """The NXDOMAIN or NODATA answer of ``zone`` for a question whose name holds the
    zone's apex at offset ``at``: the same SOA for every name, so it is encoded once
    per zone version and offset and kept apart from the response cache (a flood of
    random names or types costs a lookup, and never pushes served answers out), across
    swaps that leave the zone as it is."""
    kept = cache.kept
    held = kept.negatives.get((zone.apex, rcode, at))  # ``kept.negative``, inline: a flood's
    if held is not None and held[0] == zone.version:
        return held[1]
    writer = Writer(zone.apex, skip=at)
    start = len(writer.buf)
    writer.record(zone.apex, SOA, zone.negative_ttl, zone.soa)
    entry: Entry = (QR | AA | rcode, 0, 1, 0, bytes(writer.buf[start:]), 0, None)
    kept.keep_negative(zone, rcode, at, entry)
    return entry


Found = tuple[int | None, bytes, dict[int, RRset] | None]
"""Where a lookup ends: the kind (``FOUND_CUT``, ``FOUND_DNAME``, ``FOUND_DATA``, or
``None`` when there is nothing to answer), the owner that decided it (for ``None``: the
name if it exists, else empty) and that owner's records."""

FOUND_CUT, FOUND_DNAME, FOUND_DATA = 1, 2, 3


def find(zone: ServedZone, name: bytes, qtype: int) -> Found:
    """Look ``name`` up in ``zone`` (RFC 1034 section 4.3.2 step 3): a delegation at or
    above it, a DNAME above it, its own records (a CNAME, or the type asked), the
    wildcard's that covers it (RFC 4592), or nothing: NODATA when the name or its
    wildcard exists, NXDOMAIN when neither does."""
    above = _interruption(zone, name, qtype)
    nodes, ents = zone.nodes, zone.empty_nonterminals
    if above is not None:
        owner, is_cut = above
        return (FOUND_CUT if is_cut else FOUND_DNAME), owner, decode_node(nodes[owner])
    blob = owner_get(nodes.shards, name)
    if blob is None:
        if ents.size and owner_has(ents.shards, name):
            return None, name, None
        if zone.has_wildcard:
            encloser = wire.parent(name)
            while not zone.exists(encloser):
                encloser = wire.parent(encloser)
            source = b"\x01*" + encloser
            blob = owner_get(nodes.shards, source)
            if blob is None and owner_has(ents.shards, source):
                return None, source, None
        if blob is None:
            return None, b"", None
    sets = decode_node(blob)
    if qtype == ANY or qtype in sets or (CNAME in sets and qtype != CNAME):
        return FOUND_DATA, name, sets
    return None, name, None


def step(
    zone: ServedZone, name: bytes, qtype: int, found: Found, draft: Draft, *, first: bool
) -> bytes | None:
    """Answer ``name`` from ``zone`` into ``draft`` as the lookup ``found``; return a name
    to chase, if any."""
    kind, owner, sets = found
    if sets is None:
        draft.negative(zone, NOERROR if owner else NXDOMAIN)
        return None
    if kind == FOUND_CUT:
        if first:
            draft.aa = False
        _referral(zone, owner, sets[NS], draft)
        return None
    if kind == FOUND_DNAME:
        ttl, (dname_target,) = sets[DNAME]
        if (owner, DNAME) not in draft.listed:  # a chain through it again: once (RFC 2181 5)
            draft.listed.add((owner, DNAME))
            draft.answer.append((owner, DNAME, ttl, dname_target))
        synthesized = name[: len(name) - len(owner)] + dname_target
        if len(synthesized) > wire.MAX_NAME:
            draft.rcode = YXDOMAIN
            return None
        draft.answer.append((name, CNAME, ttl, synthesized))
        if wire.is_at_or_below(dname_target, owner):
            # A DNAME into its own subtree applies again to every name it makes, so the
            # chain could only grow until MAX_CHAIN or YXDOMAIN, never reaching data
            # (nothing lies beneath a DNAME): it ends at its first synthesis, as NSD's.
            return None
        return synthesized
    cname = sets.get(CNAME)
    if cname is not None and qtype != CNAME:
        ttl, (target,) = cname
        draft.answer.append((name, CNAME, ttl, target))
        return None if qtype == ANY else target
    rtype = min(sets) if qtype == ANY else qtype
    rrset = sets[rtype]
    draft.answer.extend(records_of(name, rtype, rrset))
    if rtype in _POINTING:
        _point(zone, name, rtype, rrset, draft)
    return None


def _referral(zone: ServedZone, cut: bytes, ns: RRset, draft: Draft) -> None:
    """The delegation at ``cut``: its NS in authority, and the addresses of its name
    servers that ``zone`` holds. Those at or beneath the cut (in-domain glue) are
    required: without them the delegation cannot be followed, so a response that cannot
    carry them is truncated (RFC 9471 section 3.1). The others (sibling glue, in-zone
    names) are optional, dropped first when the response is too big (section 3.2)."""
    draft.authority.extend(records_of(cut, NS, ns))
    for target in ns[1]:
        key = target.lower()
        if wire.is_at_or_below(key, cut):
            draft.addresses(draft.glue, zone, key)
    for target in ns[1]:
        key = target.lower()
        if wire.is_at_or_below(key, zone.apex):
            draft.addresses(draft.extra, zone, key)


_POINTING = frozenset({NS, MX, SRV, NAPTR, SVCB, HTTPS})
"""Types whose records name a host whose addresses (or records) go in additional."""


def _point(zone: ServedZone, owner: bytes, rtype: int, rrset: RRset, draft: Draft) -> None:
    """Additional data for an answer RRset that names other hosts: only what the
    answering ``zone`` holds with authority, never another served zone's records
    (resolvers discard them as out of bailiwick, and they would tell which other zones
    this node serves). NS targets may be glue beneath a cut; the others must not be.

    MX and SRV: the targets' A and AAAA. NAPTR (RFC 3403 section 4.2): with the flag S
    the replacement's SRV and their targets' addresses, with A its addresses. SVCB and
    HTTPS (RFC 9460 section 4.1): the TargetName's addresses (``.`` is the owner itself
    in ServiceMode, and no target in AliasMode) and, in AliasMode, the target's records of
    the same type and their own targets' addresses: one alias deep, no further."""
    extra = draft.extra
    if rtype == NS:
        for rdata in rrset[1]:
            draft.addresses(extra, zone, rdata.lower())
        return
    for rdata in rrset[1]:
        if rtype == MX:
            _addresses_held(zone, rdata[2:].lower(), draft)
        elif rtype == SRV:
            _addresses_held(zone, rdata[6:].lower(), draft)
        elif rtype == NAPTR:
            flags, replacement = _naptr_lookup(rdata)
            if b"s" in flags:
                srv = _rrset_held(zone, replacement, SRV, draft)
                for target in srv[1] if srv is not None else ():
                    _addresses_held(zone, target[6:].lower(), draft)
            elif b"a" in flags:
                _addresses_held(zone, replacement, draft)
        else:
            alias = _svcb_target(owner, rdata)
            if alias is None:
                continue
            _addresses_held(zone, alias, draft)
            if rdata[:2] == b"\x00\x00":
                aliased = _rrset_held(zone, alias, rtype, draft)
                for record in aliased[1] if aliased is not None else ():
                    held = _svcb_target(alias, record)
                    if held is not None:
                        _addresses_held(zone, held, draft)


def held_in_zone(zone: ServedZone, name: bytes) -> bool:
    """Whether ``zone`` holds ``name``'s records with authority: in the zone, at no
    delegation point and beneath neither a delegation nor a DNAME."""
    return wire.is_at_or_below(name, zone.apex) and _interruption(zone, name, A) is None


def _addresses_held(zone: ServedZone, name: bytes, draft: Draft) -> None:
    if held_in_zone(zone, name):
        draft.addresses(draft.extra, zone, name)


def _rrset_held(zone: ServedZone, name: bytes, rtype: int, draft: Draft) -> RRset | None:
    if not held_in_zone(zone, name):
        return None
    return draft.rrset(draft.extra, zone, name, rtype)


def _naptr_lookup(rdata: bytes) -> tuple[bytes, bytes]:
    """A NAPTR's flags (lowercased) and its replacement (lowercased wire name): order
    and preference, then flags, services and regexp as character strings, then the
    replacement."""
    i = 4
    flags = rdata[i + 1 : i + 1 + rdata[i]].lower()
    for _ in range(3):
        i += rdata[i] + 1
    return flags, rdata[i:].lower()


def _svcb_target(owner: bytes, rdata: bytes) -> bytes | None:
    """The host an SVCB or HTTPS record points at (lowercased wire name): its
    TargetName, or in ServiceMode the owner when that is ``.``; ``None`` for an
    AliasMode record whose target is ``.`` (the service does not exist)."""
    target, _ = wire.read_name(rdata, 2)
    if target != wire.ROOT:
        return target.lower()
    return None if rdata[:2] == b"\x00\x00" else owner


def _interruption(zone: ServedZone, name: bytes, qtype: int) -> tuple[bytes, bool] | None:
    """The topmost delegation at or above ``name`` (``(cut, True)``), or DNAME strictly
    above it (``(owner, False)``), within ``zone``. DS at a cut belongs to the parent side,
    so the cut at ``name`` itself does not interrupt a DS query."""
    cuts, dnames = zone.cuts, zone.dnames
    if not cuts.size and not dnames.size:
        return None
    cut_shards = cuts.shards
    dname_shards = dnames.shards if dnames.size else None
    apex_size = len(zone.apex)
    size = len(name)
    for offset in reversed(wire.label_offsets(name)):
        suffix = size - offset
        if suffix < apex_size:
            continue
        ancestor = name[offset:]
        if owner_has(cut_shards, ancestor) and not (offset == 0 and qtype == DS):
            return ancestor, True
        if offset and dname_shards is not None and owner_has(dname_shards, ancestor):
            return ancestor, False
    return None


def encode(qname: bytes, draft: Draft) -> Entry:
    writer = Writer(qname)
    start = len(writer.buf)
    for record in (*draft.answer, *draft.authority, *draft.glue):
        writer.record(*record)
    mark = len(writer.buf)
    for record in draft.extra:
        writer.record(*record)
    flags = QR | (AA if draft.aa else 0) | draft.rcode
    buf = writer.buf
    return (
        flags,
        len(draft.answer),
        len(draft.authority),
        len(draft.glue) + len(draft.extra),
        bytes(buf[start:]),
        len(draft.glue),
        bytes(buf[start:mark]) if draft.extra else None,
    )

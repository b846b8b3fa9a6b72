"""A slow, plain authoritative lookup written straight from the RFCs, to judge ``answer``.

It reads the zones as records (``RecordRow``) held in dnspython names and rdatas, and
walks each query the way RFC 1034 section 4.3.2 describes, one label at a time down from
the apex of the nearest served zone, with no index, cache or wire encoding:

- step 2: the zone is the nearest served ancestor of the name; a DS question at a zone's
  apex goes to the served zone above it, if any (RFC 4035 section 3.1.4.1);
- step 3b: a node below the apex holding NS is a delegation: the referral carries that
  NS set and the addresses the zone holds for its name servers (RFC 9471), without AA
  when it answers the question's own name; DS at the cut itself is the parent's data;
- a DNAME at a node strictly above the name (RFC 6672 section 3.2): the DNAME, a CNAME
  synthesized with its TTL, and the lookup goes on with the new name (not when the
  DNAME's target lies beneath its own owner: it would apply to every name it makes);
  YXDOMAIN when the new name is too long;
- step 3c and RFC 4592: when the next label does not exist, the wildcard at the closest
  encloser, if it exists, supplies the records owned by the name (an empty wildcard
  gives NODATA); otherwise NXDOMAIN;
- step 3a: a CNAME (unless CNAME is asked) is answered and the lookup starts again with
  its target while the target is in a served zone, at most ``MAX_CHAIN`` links and
  never twice to one name; the RCODE is the last link's (RFC 6604);
- negative answers carry the last zone's SOA at min(SOA TTL, MINIMUM) (RFC 2308);
- ANY (RFC 8482) is answered with one RRset: the CNAME if the name has one, otherwise its
  lowest-numbered type (the choice this server makes among those the RFC allows);
- step 6, additional data, from the answering zone only and at exactly the names the
  answer points at: A and AAAA of NS, MX and SRV targets; for NAPTR (RFC 3403 section
  4.2) the SRV of the replacement and its targets' addresses with the flag S, the
  replacement's addresses with the flag A; for SVCB and HTTPS (RFC 9460 section 4.1)
  the TargetName's addresses (``.`` in ServiceMode is the owner) and in AliasMode the
  target's records of the same type with their targets' addresses. NS targets may be
  glue beneath a delegation; every other target must be the zone's authoritative data.

An RRset's TTL is the lowest TTL stated for any of its records (RFC 2181 section 5.2).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
from dns.rdtypes.ANY.SOA import SOA
from dns.rdtypes.IN.NAPTR import NAPTR
from dns.rdtypes.svcbbase import SVCBBase

from valis_core.dns.wire.records import RecordRow

MAX_CHAIN = 12
"""CNAME and DNAME links followed for one question (the server's bound)."""

Record = tuple[dns.name.Name, int, int, dns.rdata.Rdata]
"""Owner, type, TTL, rdata."""

A = dns.rdatatype.A
AAAA = dns.rdatatype.AAAA
ADDRESS_TYPES = (A, AAAA)


@attrs.frozen
class Expected:
    """What the RFCs say the response holds: sections compared as sets."""

    rcode: int
    aa: bool
    answer: frozenset[Record]
    authority: frozenset[Record]
    additional: frozenset[Record]


REFUSED = Expected(dns.rcode.REFUSED, False, frozenset(), frozenset(), frozenset())


class Zone:
    """One zone's records by owner and type, and every name that exists in it (owners
    and the empty non-terminals between them and the apex)."""

    def __init__(self, apex: dns.name.Name) -> None:
        self.apex = apex
        self.rrsets: dict[dns.name.Name, dict[int, tuple[int, list[dns.rdata.Rdata]]]] = {}
        self.existing: set[dns.name.Name] = {apex}

    def add(self, owner: dns.name.Name, rtype: int, ttl: int, rdata: dns.rdata.Rdata) -> None:
        types = self.rrsets.setdefault(owner, {})
        held_ttl, rdatas = types.get(rtype, (ttl, []))
        if rdata not in rdatas:
            rdatas.append(rdata)
        types[rtype] = (min(held_ttl, ttl), rdatas)
        name = owner
        while name != self.apex and name not in self.existing:
            self.existing.add(name)
            name = name.parent()

    def records(self, owner: dns.name.Name, rtype: int) -> list[Record]:
        ttl, rdatas = self.rrsets.get(owner, {}).get(rtype, (0, []))
        return [(owner, rtype, ttl, rdata) for rdata in rdatas]

    def has(self, owner: dns.name.Name, rtype: int) -> bool:
        return rtype in self.rrsets.get(owner, {})

    def soa(self) -> Record:
        ttl, (rdata,) = self.rrsets[self.apex][dns.rdatatype.SOA]
        assert isinstance(rdata, SOA)
        return (self.apex, dns.rdatatype.SOA, min(ttl, rdata.minimum), rdata)

    def authoritative(self, name: dns.name.Name) -> bool:
        """Whether ``name``'s records here are the zone's own data: inside it, with no
        delegation at or above it and no DNAME above it (below the apex)."""
        if not name.is_subdomain(self.apex):
            return False
        for depth in range(len(self.apex), len(name) + 1):
            node = name.split(depth)[1]
            if node != self.apex and self.has(node, dns.rdatatype.NS):
                return False
            if node != name and self.has(node, dns.rdatatype.DNAME):
                return False
        return True


class Reference:
    """The served zones, and the answer to each question as the RFCs give it."""

    def __init__(self, rows: Iterable[RecordRow]) -> None:
        self.zones: dict[dns.name.Name, Zone] = {}
        for row in rows:
            apex = dns.name.from_text(row.zone)
            zone = self.zones.setdefault(apex, Zone(apex))
            rtype = dns.rdatatype.from_text(row.rtype)
            rdata = dns.rdata.from_text(dns.rdataclass.IN, rtype, row.rdata)
            zone.add(dns.name.from_text(row.owner), rtype, row.ttl, rdata)

    def zone_for(self, name: dns.name.Name) -> Zone | None:
        """The nearest served zone at or above ``name``."""
        found = [apex for apex in self.zones if name.is_subdomain(apex)]
        if not found:
            return None
        return self.zones[max(found, key=len)]

    def resolve(self, qname: dns.name.Name, qtype: int) -> Expected:
        zone = self.zone_for(qname)
        if zone is None:
            return REFUSED
        state = _State()
        name = qname
        visited = {qname}
        for link in range(MAX_CHAIN):
            if qtype == dns.rdatatype.DS and name == zone.apex:
                above = self.zone_for(zone.apex.parent()) if zone.apex.labels != (b"",) else None
                zone = above or zone
            target = self.lookup(zone, name, qtype, state, first=link == 0)
            if target is None or target in visited:
                break
            visited.add(target)
            next_zone = self.zone_for(target)
            if next_zone is None:
                break
            name, zone = target, next_zone
        return Expected(
            state.rcode,
            state.aa,
            frozenset(state.answer),
            frozenset(state.authority),
            frozenset(state.additional),
        )

    def lookup(
        self, zone: Zone, name: dns.name.Name, qtype: int, state: _State, *, first: bool
    ) -> dns.name.Name | None:
        """RFC 1034 section 4.3.2 step 3 for ``name`` in ``zone``: descend one label at a
        time from the apex. Returns the name to look up next, if any."""
        closest = zone.apex
        for depth in range(len(zone.apex), len(name) + 1):
            node = name.split(depth)[1]
            if node not in zone.existing:
                return self.wildcard(zone, name, closest, qtype, state)
            closest = node
            cut = node != zone.apex and zone.has(node, dns.rdatatype.NS)
            if cut and not (node == name and qtype == dns.rdatatype.DS):
                self.referral(zone, node, state, first=first)
                return None
            if node != name and zone.has(node, dns.rdatatype.DNAME):
                return self.dname(zone, node, name, state)
        return self.data(zone, name, name, qtype, state)

    def referral(self, zone: Zone, cut: dns.name.Name, state: _State, *, first: bool) -> None:
        if first:
            state.aa = False
        ns = zone.records(cut, dns.rdatatype.NS)
        state.authority += ns
        for _, _, _, rdata in ns:
            target = rdata.target  # type: ignore[attr-defined]
            if target.is_subdomain(zone.apex):
                for rtype in ADDRESS_TYPES:
                    state.additional += zone.records(target, rtype)

    def dname(
        self, zone: Zone, owner: dns.name.Name, name: dns.name.Name, state: _State
    ) -> dns.name.Name | None:
        (record,) = zone.records(owner, dns.rdatatype.DNAME)
        state.answer.append(record)
        _, _, ttl, rdata = record
        try:
            synthesized = name.relativize(owner).concatenate(rdata.target)  # type: ignore[attr-defined]
        except dns.name.NameTooLong:
            state.rcode = dns.rcode.YXDOMAIN
            return None
        cname = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.CNAME,
                                    synthesized.to_text())
        state.answer.append((name, dns.rdatatype.CNAME, ttl, cname))
        if rdata.target.is_subdomain(owner):  # type: ignore[attr-defined]
            return None  # into its own subtree: it would apply to every name it makes
        return synthesized

    def wildcard(
        self,
        zone: Zone,
        name: dns.name.Name,
        encloser: dns.name.Name,
        qtype: int,
        state: _State,
    ) -> dns.name.Name | None:
        """RFC 4592 section 3.3.1: the source of synthesis is ``*`` at the closest
        encloser; without one the name does not exist."""
        source = dns.name.Name((b"*", *encloser.labels))
        if source not in zone.existing:
            state.negative(zone, dns.rcode.NXDOMAIN)
            return None
        return self.data(zone, source, name, qtype, state)

    def data(
        self,
        zone: Zone,
        node: dns.name.Name,
        owner: dns.name.Name,
        qtype: int,
        state: _State,
    ) -> dns.name.Name | None:
        """The records at ``node`` (the name itself or a wildcard), answered as owned by
        ``owner``."""
        types = zone.rrsets.get(node, {})
        if dns.rdatatype.CNAME in types and qtype != dns.rdatatype.CNAME:
            ((_, _, ttl, rdata),) = zone.records(node, dns.rdatatype.CNAME)
            state.answer.append((owner, dns.rdatatype.CNAME, ttl, rdata))
            if qtype == dns.rdatatype.ANY:
                return None
            target: dns.name.Name = rdata.target  # type: ignore[attr-defined]
            return target
        rtype = min(types) if qtype == dns.rdatatype.ANY and types else qtype
        if rtype not in types:
            state.negative(zone, dns.rcode.NOERROR)
            return None
        records = [(owner, rtype, ttl, rdata) for _, _, ttl, rdata in zone.records(node, rtype)]
        state.answer += records
        self.additional(zone, records, state)
        return None

    def additional(self, zone: Zone, records: list[Record], state: _State) -> None:
        """Step 6: what the answer's records point at, from ``zone``'s own data."""
        for owner, rtype, _, rdata in records:
            if rtype == dns.rdatatype.NS:
                target = rdata.target  # type: ignore[attr-defined]
                for address in ADDRESS_TYPES:
                    state.additional += zone.records(target, address)
            elif rtype == dns.rdatatype.MX:
                self.addresses(zone, rdata.exchange, state)  # type: ignore[attr-defined]
            elif rtype == dns.rdatatype.SRV:
                self.addresses(zone, rdata.target, state)  # type: ignore[attr-defined]
            elif rtype == dns.rdatatype.NAPTR:
                assert isinstance(rdata, NAPTR)
                flags = rdata.flags.lower()
                if b"s" in flags:
                    if zone.authoritative(rdata.replacement):
                        srv = zone.records(rdata.replacement, dns.rdatatype.SRV)
                        state.additional += srv
                        for _, _, _, found in srv:
                            self.addresses(zone, found.target, state)  # type: ignore[attr-defined]
                elif b"a" in flags:
                    self.addresses(zone, rdata.replacement, state)
            elif rtype in (dns.rdatatype.SVCB, dns.rdatatype.HTTPS):
                assert isinstance(rdata, SVCBBase)
                target = service_target(owner, rdata)
                if target is None:
                    continue
                self.addresses(zone, target, state)
                if rdata.priority == 0 and zone.authoritative(target):
                    aliased = zone.records(target, rtype)
                    state.additional += aliased
                    for _, _, _, found in aliased:
                        assert isinstance(found, SVCBBase)
                        further = service_target(target, found)
                        if further is not None:
                            self.addresses(zone, further, state)

    def addresses(self, zone: Zone, name: dns.name.Name, state: _State) -> None:
        if zone.authoritative(name):
            for rtype in ADDRESS_TYPES:
                state.additional += zone.records(name, rtype)


def service_target(owner: dns.name.Name, rdata: SVCBBase) -> dns.name.Name | None:
    """RFC 9460 section 2.5: TargetName ``.`` is the owner in ServiceMode and means no
    service in AliasMode."""
    if rdata.target != dns.name.root:
        return rdata.target
    return owner if rdata.priority else None


class _State:
    """The response while the lookup fills it."""

    def __init__(self) -> None:
        self.rcode: int = dns.rcode.NOERROR
        self.aa = True
        self.answer: list[Record] = []
        self.authority: list[Record] = []
        self.additional: list[Record] = []

    def negative(self, zone: Zone, rcode: int) -> None:
        self.rcode = rcode
        self.authority.append(zone.soa())

"""``answer`` agrees with a slow reference written straight from the RFCs
(``reference_resolver``) over generated zones full of the cases that decide an answer:
wildcards, empty non-terminals, DNAMEs, delegations with and without glue, CNAME chains
within and across served zones, a served child zone, and the records whose targets bring
additional data (NS, MX, SRV, NAPTR, SVCB, HTTPS). RCODE, AA and every section are
compared as sets, over TCP so that no size limit trims them."""

from __future__ import annotations

import itertools

import dns.flags
import dns.message
import dns.name
import dns.rdatatype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.property.random_zones import Draw, make_valid, mixed_case
from tests.property.reference_resolver import Expected, Record, Reference
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

PARENT = "example.com."
CHILD = "c.example.com."
OTHER = "example.org."
LABELS = ("a", "b", "c", "*", "ns", "x")
TYPES = (
    "A", "A", "AAAA", "TXT", "MX", "SRV", "CNAME", "CNAME", "CNAME", "NS", "NS", "DNAME",
    "DNAME", "DS", "NAPTR", "SVCB", "HTTPS",
)
QTYPES = (
    "A", "AAAA", "TXT", "MX", "SRV", "CNAME", "NS", "DNAME", "DS", "SOA", "NAPTR", "SVCB",
    "HTTPS", "ANY", "TYPE65280",
)
LONG = ".".join(["l" * 60] * 3) + "." + OTHER  # 198 octets: a DNAME to it can overflow
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def names_under(apex: str, depth: int) -> st.SearchStrategy[str]:
    labels = st.lists(st.sampled_from(LABELS), min_size=0, max_size=depth)
    return labels.map(lambda chosen: "".join(label + "." for label in chosen) + apex)


def rdata_for(rtype: str, target: str, number: int) -> str:
    if rtype == "NAPTR":
        flag = ("S", "A", "U", "")[number % 4]
        return f'{number % 7} {number % 5} "{flag}" "SIP+D2U" "" {target}'
    if rtype in ("SVCB", "HTTPS"):
        return f"{number % 2} {target}" + (" alpn=h2" if number % 2 else "")
    return {
        "A": f"192.0.2.{number % 256}",
        "AAAA": f"2001:db8::{number:x}",
        "TXT": f'"t{number}"',
        "MX": f"{number % 50} {target}",
        "SRV": f"0 {number % 9} 53 {target}",
        "CNAME": target,
        "NS": target,
        "DNAME": LONG if number % 4 == 0 else target,
        "DS": f"{number} 8 2 {'ab' * 32}",
    }[rtype]


@st.composite
def zones(draw: st.DrawFn) -> list[RecordRow]:
    """A parent zone, maybe a served child zone delegated from it and an unrelated zone.
    Owners and targets come from one small pool of names a few labels deep, so records
    point at each other (CNAME chains and loops, DNAMEs onto other owners, NS and MX at
    names with or without addresses) and wildcards and empty non-terminals abound; other
    targets lie outside every served zone, are the root or are very long."""
    apexes = [PARENT]
    if draw(st.booleans()):
        apexes.append(CHILD)
    if draw(st.booleans()):
        apexes.append(OTHER)
    pool = draw(st.lists(
        st.one_of(names_under(PARENT, 3), names_under(CHILD, 2), names_under(OTHER, 2)),
        min_size=4, max_size=12,
    ))
    targets = st.one_of(
        st.sampled_from(pool), st.sampled_from(pool), names_under(PARENT, 2),
        st.sampled_from(["elsewhere.test.", ".", LONG]),
    )
    rows: list[RecordRow] = []
    for apex in apexes:
        minimum = draw(st.integers(0, 7200))
        soa_ttl = draw(st.sampled_from([60, 3600]))
        rows.append(RecordRow(apex, apex, "SOA", soa_ttl, f"ns.{apex} h.{apex} 1 2 3 4 {minimum}"))
        rows.append(RecordRow(apex, apex, "NS", 3600, f"ns.{apex}"))
        rows.append(RecordRow(apex, f"ns.{apex}", "A", 3600, "192.0.2.53"))
        own = [name for name in pool if zone_of(name, apexes) == apex]
        owners = st.one_of(st.sampled_from(own), names_under(apex, 3)) if own else names_under(
            apex, 3)
        entries = draw(st.lists(
            st.tuples(owners, st.sampled_from(TYPES), targets, st.integers(0, 999)),
            max_size=25,
        ))
        for owner, rtype, target, number in entries:
            if rtype in ("NS", "DS") and owner == apex:
                continue
            if target == "." and rtype not in ("SVCB", "HTTPS", "NAPTR"):
                continue
            rdata = rdata_for(rtype, target, number)
            rows.append(RecordRow(apex, owner, rtype, 300 + number % 3, rdata))
        wildcards = draw(st.lists(
            st.tuples(owners, st.sampled_from(["A", "TXT", "MX", "CNAME"]), targets,
                      st.integers(0, 999)),
            max_size=3,
        ))
        for owner, rtype, target, number in wildcards:
            if target != ".":
                rows.append(RecordRow(apex, "*." + owner, rtype, 300,
                                      rdata_for(rtype, target, number)))
        if apex == PARENT and CHILD in apexes:
            rows.append(RecordRow(PARENT, CHILD, "NS", 3600, f"ns.{CHILD}"))
            rows.append(RecordRow(PARENT, f"ns.{CHILD}", "A", 3600, "192.0.2.54"))
    for number, chain in enumerate(draw(st.lists(chains(apexes, targets), max_size=3))):
        rows.extend(chain_rows(chain, number, apexes))
    return [row for row in make_valid(rows) if not beneath_child(row)]


@st.composite
def chains(draw: st.DrawFn, apexes: list[str], targets: st.SearchStrategy[str]) -> list[str]:
    """The names of a CNAME chain, each link's owner a fresh name in a served zone (a
    leading label of its own keeps it free of other data), ending at a pool name, a name
    outside, or one of its own links (a loop)."""
    links = draw(st.lists(
        st.sampled_from(apexes).flatmap(lambda apex: names_under(apex, 2)),
        min_size=1, max_size=5,
    ))
    names = [f"k{i}.{name}" for i, name in enumerate(links)]
    end = draw(st.one_of(targets, st.sampled_from(names)))
    return [*names, end]


def chain_rows(chain: list[str], number: int, apexes: list[str]) -> list[RecordRow]:
    """The CNAME records of one chain, its names made distinct from other chains'."""
    fresh = {name: f"n{number}{name}" for name in chain[:-1]}
    rows = []
    for owner, target in itertools.pairwise(chain):
        if target == ".":
            break
        rows.append(RecordRow(zone_of(owner, apexes), fresh[owner], "CNAME", 300,
                              fresh.get(target, target)))
    return rows


def zone_of(name: str, apexes: list[str]) -> str:
    """The deepest served zone that holds ``name`` (empty: none does)."""
    held = dns.name.from_text(name)
    return max((apex for apex in apexes if held.is_subdomain(dns.name.from_text(apex))),
               key=len, default="")


def beneath_child(row: RecordRow) -> bool:
    """A parent-zone record at or beneath the served child's apex other than its
    delegation and glue: a zone cannot hold data on the child's side of the cut."""
    if row.zone != PARENT or not dns.name.from_text(row.owner).is_subdomain(
        dns.name.from_text(CHILD)
    ):
        return False
    return row.owner not in (CHILD, f"ns.{CHILD}") or row.rtype not in ("NS", "A", "DS")


def question(draw: Draw, rows: list[RecordRow]) -> tuple[str, str]:
    """A name that exists, lies beneath one that does (a wildcard's label replaced, a
    label or two prepended, one of them long enough to overflow a DNAME's target), or
    anywhere in or out of the served zones; a type held there or any other."""
    owners = sorted({row.owner for row in rows})
    served = sorted({row.zone for row in rows})
    prefixes = st.sampled_from(["a.", "b.x.", "*.", "zz.", "q" * 63 + ".", "q" * 63 + ".r."])
    dnames = sorted({row.owner for row in rows if row.rtype == "DNAME"}) or owners
    name = draw(st.one_of(
        st.sampled_from(owners),
        st.sampled_from(owners),
        st.tuples(prefixes, st.sampled_from(dnames)).map("".join),
        st.sampled_from(owners).map(lambda owner: owner.replace("*.", "w.", 1)),
        st.tuples(prefixes, st.sampled_from(owners)).map("".join),
        st.sampled_from(served).flatmap(lambda apex: names_under(apex, 3)),
        st.just("elsewhere.test."),
    ))
    present = sorted({row.rtype for row in rows if row.owner == name})
    use_present = bool(present) and draw(st.booleans())
    return mixed_case(draw, name), draw(st.sampled_from(present if use_present else QTYPES))


def records(section: list[dns.rrset.RRset]) -> frozenset[Record]:
    return frozenset(
        (rrset.name, rrset.rdtype, rrset.ttl, rdata) for rrset in section for rdata in rrset
    )


def observed(snapshot: Snapshot, name: str, rtype: str) -> Expected:
    query = dns.message.make_query(name, rtype, use_edns=0, payload=1232)
    raw = answer(snapshot, query.to_wire(), transport=Transport.TCP)
    assert raw is not None
    response = dns.message.from_wire(raw)
    return Expected(
        response.rcode(),
        bool(response.flags & dns.flags.AA),
        records(response.answer),
        records(response.authority),
        records(response.additional),
    )


@SETTINGS
@given(st.data())
def test_answers_agree_with_the_rfc_reference(data: st.DataObject) -> None:
    rows = data.draw(zones())
    snapshot = Snapshot(ZoneIndex.from_records(rows))
    reference = Reference(rows)
    for _ in range(12):
        name, rtype = question(data.draw, rows)
        expected = reference.resolve(dns.name.from_text(name), dns.rdatatype.from_text(rtype))
        assert observed(snapshot, name, rtype) == expected, (name, rtype)

"""Zones and queries drawn at random for the answer properties: ``zones`` draws a parent
zone, a child zone beneath it and another zone beside them, each with every record shape
the answer function takes (CNAME, DNAME, delegation, wildcard, glue), made valid by
``make_valid``; ``queries`` draws a query at those names (or near them, outside them,
mixed case) with the size limit its response must keep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dns.flags
import dns.message
from hypothesis import strategies as st

from valis_core.dns.answer import SERVER_PAYLOAD, Transport
from valis_core.dns.wire.records import RecordRow

# What draws a value: a composite's ``draw`` or ``st.data()``'s.
Draw = Callable[[st.SearchStrategy[Any]], Any]

PARENT = "example.com."
CHILD = "sub.example.com."
OTHER = "example.org."
LABELS = ("a", "b", "www", "*", "sub", "x")
TYPES = ("A", "AAAA", "TXT", "MX", "CNAME", "CNAME", "NS", "DNAME", "DNAME", "SRV", "DS")
QTYPES = (
    "A", "AAAA", "TXT", "MX", "CNAME", "NS", "DNAME", "SRV", "DS", "SOA", "ANY", "TYPE65280",
)



def relative_names(depth: int = 3) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(LABELS), min_size=0, max_size=depth).map(
        lambda labels: "".join(label + "." for label in labels)
    )


def rdata_for(rtype: str, target: str, number: int) -> str:
    return {
        "A": f"192.0.2.{number % 256}",
        "AAAA": f"2001:db8::{number:x}",
        "TXT": f'"t{"x" * (number % 250)}"',
        "MX": f"{number % 50} {target}",
        "CNAME": target,
        "NS": target,
        "DNAME": target,
        "SRV": f"0 {number % 9} 53 {target}",
        "DS": f"{number} 8 2 {'ab' * 32}",
    }[rtype]


@st.composite
def zones(draw: st.DrawFn) -> list[RecordRow]:
    """A few zones (a parent, maybe a served child beneath it, maybe an unrelated zone),
    with records kept valid: one CNAME per name and nothing beside it, one DNAME and
    nothing beneath it, NS below the apex making delegations."""
    apexes = [PARENT]
    if draw(st.booleans()):
        apexes.append(CHILD)
    if draw(st.booleans()):
        apexes.append(OTHER)
    targets = st.one_of(
        relative_names().map(lambda rel: rel + PARENT),
        relative_names(2).map(lambda rel: rel + OTHER),
        st.just("elsewhere.test."),
    )
    rows: list[RecordRow] = []
    for apex in apexes:
        minimum = draw(st.integers(0, 7200))
        rows.append(RecordRow(apex, apex, "SOA", 3600, f"ns.{apex} h.{apex} 1 2 3 4 {minimum}"))
        rows.append(RecordRow(apex, apex, "NS", 3600, f"ns.{apex}"))
        rows.append(RecordRow(apex, f"ns.{apex}", "A", 3600, "192.0.2.53"))
        for letter in "abc":  # an RRset too big for 512 octets
            rows.append(RecordRow(apex, f"big.{apex}", "TXT", 60, f'"{letter * 200}"'))
        entries = draw(
            st.lists(
                st.tuples(relative_names(2), st.sampled_from(TYPES), targets,
                          st.integers(0, 4000)),
                max_size=30,
            )
        )
        for rel, rtype, target, number in entries:
            owner = rel + apex
            if rtype in ("NS", "DS") and owner == apex:
                continue
            rdata = rdata_for(rtype, target, number)
            rows.append(RecordRow(apex, owner, rtype, number % 3600, rdata))
        if apex == PARENT and CHILD in apexes:
            rows.append(RecordRow(PARENT, CHILD, "NS", 3600, f"ns.{CHILD}"))
            rows.append(RecordRow(PARENT, f"ns.{CHILD}", "A", 3600, "192.0.2.53"))
    return make_valid(rows)


def make_valid(rows: list[RecordRow]) -> list[RecordRow]:
    by_owner: dict[tuple[str, str], list[RecordRow]] = {}
    for row in rows:
        by_owner.setdefault((row.zone, row.owner.lower()), []).append(row)
    kept: list[RecordRow] = []
    for (zone, owner), held in by_owner.items():
        types = {row.rtype for row in held}
        drop_cname = "CNAME" in types and (len(types) > 1 or owner == zone)
        seen: set[str] = set()
        for row in held:
            if drop_cname and row.rtype == "CNAME":
                continue
            if row.rtype in ("CNAME", "DNAME"):
                if row.rtype in seen:
                    continue
                seen.add(row.rtype)
            kept.append(row)
    dnames = {(row.zone, row.owner) for row in kept if row.rtype == "DNAME"}
    beneath = {
        (zone, owner)
        for zone, owner in dnames
        for row in kept
        if row.zone == zone and row.owner != owner and row.owner.endswith("." + owner)
    }
    return [row for row in kept if not (row.rtype == "DNAME" and (row.zone, row.owner) in beneath)]


def mixed_case(draw: Draw, name: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    return "".join(c.upper() if flip else c for c, flip in zip(name, flips, strict=True))


@st.composite
def queries(draw: st.DrawFn, rows: list[RecordRow]) -> tuple[bytes, int, Transport]:
    """A query (wire), the size limit its response must keep, and its transport."""
    owners = sorted({row.owner for row in rows})
    served = sorted({row.zone for row in rows})
    name = draw(
        st.one_of(
            st.sampled_from(owners),
            st.sampled_from(owners),
            st.tuples(relative_names(2), st.sampled_from(owners)).map("".join),
            st.tuples(relative_names(3), st.sampled_from(served)).map("".join),
            st.sampled_from(["example.net.", "com.", ".", "x.example.net.", OTHER]),
        )
    )
    present = sorted({row.rtype for row in rows if row.owner == name})
    prefer_present = bool(present) and draw(st.booleans())
    rtype = draw(st.sampled_from(present if prefer_present else QTYPES))
    name = mixed_case(draw, name)
    edns = draw(st.one_of(st.none(), st.sampled_from([0, 100, 512, 1232, 4096, 65535])))
    message = dns.message.make_query(
        name,
        rtype,
        use_edns=edns is not None,
        payload=edns or 0,
        want_dnssec=draw(st.booleans()),
    )
    message.id = draw(st.integers(0, 0xFFFF))
    echoed = [0, dns.flags.RD, dns.flags.CD, dns.flags.RD | dns.flags.CD]
    message.flags = draw(st.sampled_from(echoed))
    transport = draw(st.sampled_from(list(Transport)))
    wire = message.to_wire()
    sent = dns.message.from_wire(wire)  # want_dnssec implies EDNS even when not asked
    if transport is Transport.TCP:
        limit = 65535
    elif sent.edns < 0:
        limit = 512
    else:
        limit = max(512, min(sent.payload, SERVER_PAYLOAD))
    return wire, limit, transport


@st.composite
def queries_and_floods(draw: st.DrawFn, rows: list[RecordRow], most: int) -> list[bytes]:
    """Up to ``most`` of ``queries`` (wire form) and up to 4 names under the zones' apexes
    that do not exist, as a flood asks them (the zones' negative answers)."""
    apexes = sorted({row.zone for row in rows})
    labels = st.text("abcxyz0-", min_size=1, max_size=6)
    flood = draw(st.lists(
        st.tuples(labels, st.sampled_from(apexes), st.sampled_from(["A", "MX", "TYPE4321"])),
        max_size=4))
    wires = [wire for wire, _limit, _transport in
             draw(st.lists(queries(rows), min_size=1, max_size=most))]
    return wires + [dns.message.make_query(f"{label}.{apex}", rtype).to_wire()
                    for label, apex, rtype in flood]

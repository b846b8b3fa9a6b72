"""Properties of ``answer`` over generated zones and generated queries, and over hostile
bytes: every response parses, echoes the ID and the question byte for byte, carries AA
exactly when the server is authoritative for the name asked, fits the transport's size
limit, and the hand-decoded fast path agrees with the dnspython-parsed general path."""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdatatype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.property.random_zones import PARENT, queries, zones
from valis_core.dns.answer import Transport, answer, answer_general
from valis_core.dns.answer._cache import ResponseCache
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

# By path: the package's face exports the ``answer`` function under the module's name.
answer_module = importlib.import_module("valis_core.dns.answer._answer")

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def authoritative(rows: list[RecordRow], qname: dns.name.Name, qtype: int) -> bool | None:
    """Whether the server is authoritative for the name asked (None: it serves no zone
    containing it). Worked out from the rows with dnspython names, independently of the
    index: the deepest served zone, its delegations and DNAMEs above the name."""
    apexes = sorted({dns.name.from_text(row.zone) for row in rows}, key=len, reverse=True)
    containing = [apex for apex in apexes if qname.is_subdomain(apex)]
    if not containing:
        return None
    zone = containing[0]
    if qtype == dns.rdatatype.DS and qname == zone and len(containing) > 1:
        zone = containing[1]
    own = [row for row in rows if dns.name.from_text(row.zone) == zone]
    cuts = {dns.name.from_text(r.owner) for r in own if r.rtype == "NS"} - {zone}
    dnames = {dns.name.from_text(r.owner) for r in own if r.rtype == "DNAME"}
    for depth in range(len(zone), len(qname) + 1):
        ancestor = qname.split(depth)[1]
        if ancestor in cuts and not (ancestor == qname and qtype == dns.rdatatype.DS):
            return False
        if ancestor != qname and ancestor in dnames:
            return True
    return True


@SETTINGS
@given(st.data())
def test_every_response_parses_echoes_and_fits_with_aa_exactly_when_authoritative(
    data: st.DataObject,
) -> None:
    rows = data.draw(zones())
    index = ZoneIndex.from_records(rows)
    for _ in range(8):
        wire, limit, transport = data.draw(queries(rows))
        raw = answer(index, wire, transport=transport)
        assert raw is not None
        assert raw == answer_general(index, wire, transport=transport)
        assert len(raw) <= limit
        assert raw[:2] == wire[:2]
        question = wire[12 : len(wire) - (11 if struct.unpack_from("!H", wire, 10)[0] else 0)]
        assert raw[12 : 12 + len(question)] == question
        response = dns.message.from_wire(raw)
        asked = dns.message.from_wire(wire)
        assert response.flags & (dns.flags.RD | dns.flags.CD) == asked.flags & (
            dns.flags.RD | dns.flags.CD
        )
        assert (response.edns >= 0) == (asked.edns >= 0)
        expected = authoritative(rows, asked.question[0].name, asked.question[0].rdtype)
        aa = bool(response.flags & dns.flags.AA)
        if expected is None:
            assert response.rcode() == dns.rcode.REFUSED
            assert not aa
        else:
            assert response.rcode() in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN, dns.rcode.YXDOMAIN)
            assert aa is expected
        if response.flags & dns.flags.TC:
            assert not response.answer
            assert not response.authority


def never_raises(query: bytes) -> None:
    """The careful answer path, not the catch-all wrapper, must cope with any input: a
    response (if any) parses and carries the query's ID; and the inlined fast path in
    ``answer`` must agree with it wherever it takes a query on."""
    index = EXAMPLE
    for tcp in (False, True):
        raw = answer_module._answer(index, ResponseCache(), query, tcp, general=False)
        general = answer_module._answer(index, ResponseCache(), query, tcp, general=True)
        transport = Transport.TCP if tcp else Transport.UDP
        assert answer(index, query, transport=transport) == raw
        for response in (raw, general):
            if response is None:
                assert len(query) < 12 or query[2] & 0x80
                continue
            if (response[2] >> 3) & 0xF == dns.opcode.UPDATE:
                # dnspython reads an UPDATE's question as its zone section and insists
                # on an SOA there, so the refusal is read from the header instead.
                assert response[:2] == query[:2]
                assert response[2] & 0x80
                assert response[3] & 0xF == dns.rcode.NOTIMP
                continue
            parsed = dns.message.from_wire(response)
            assert parsed.id == struct.unpack_from("!H", query)[0]
            assert parsed.flags & dns.flags.QR


EXAMPLE = ZoneIndex.from_records(
    [
        RecordRow(PARENT, PARENT, "SOA", 3600, f"ns.{PARENT} h.{PARENT} 1 2 3 4 5"),
        RecordRow(PARENT, PARENT, "NS", 3600, f"ns.{PARENT}"),
        RecordRow(PARENT, f"ns.{PARENT}", "A", 3600, "192.0.2.53"),
        RecordRow(PARENT, f"*.{PARENT}", "TXT", 3600, '"w"'),
    ]
)


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(query: bytes) -> None:
    never_raises(query)


@settings(deadline=None)
@given(st.binary(min_size=12, max_size=12), st.binary(max_size=80))
def test_random_bytes_after_a_query_header_never_raise(header: bytes, rest: bytes) -> None:
    flags_cleared = header[:2] + bytes([header[2] & 0x7F]) + header[3:4] + b"\x00\x01" + header[6:]
    never_raises(flags_cleared + rest)


MUTATIONS: list[Callable[[bytearray, int, int], None]] = [
    lambda b, i, v: b.__setitem__(i % len(b), v),
    lambda b, i, v: b.insert(i % (len(b) + 1), v),
    lambda b, i, v: b.__delitem__(i % len(b)),
    lambda b, i, v: b.__delitem__(slice(i % len(b), None)),
]


@settings(deadline=None)
@given(
    st.sampled_from(["www.example.com.", "example.com.", "x.y.example.com.", "example.net."]),
    st.sampled_from(["A", "TXT", "ANY", "DS"]),
    st.booleans(),
    st.lists(
        st.tuples(st.integers(0, len(MUTATIONS) - 1), st.integers(0, 400), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_queries_never_raise(
    name: str, rtype: str, edns: bool, mutations: list[tuple[int, int, int]]
) -> None:
    private = dns.edns.GenericOption(dns.edns.OptionType.make(65001), b"\x01\x02")
    options: list[Any] = [private] if edns else []
    wire = bytearray(
        dns.message.make_query(name, rtype, use_edns=edns, options=options).to_wire()
    )
    for which, at, value in mutations:
        if wire:
            MUTATIONS[which](wire, at, value)
    never_raises(bytes(wire))

"""The compiled UDP fast path against its oracle, ``answer``: over generated zones and
queries (hostile bytes too), whatever C answers is byte for byte what ``answer`` gives,
and C answers exactly the queries whose question ``answer`` keeps in its cache and that
take the plain path; everything else is handed to Python."""

from __future__ import annotations

import struct

import dns.message
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.property.test_answer_properties import queries, zones
from valis_core.dns import fastpath
from valis_core.dns._fastpath import Table, key
from valis_core.dns.answer import CACHE_ENTRIES, Transport, answer
from valis_core.dns.records import RecordRow
from valis_core.dns.snapshot import Snapshot
from valis_core.dns.zone import ZoneIndex

UDP = Transport.UDP
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def snapshot_of(rows: list[RecordRow]) -> Snapshot:
    return Snapshot(ZoneIndex.from_records(rows))


def teach(table: Table, snapshot: Snapshot, query: bytes) -> bytes | None:
    """Answer ``query`` in Python and copy its cached entry into ``table``, as the serve
    loop does after Python answers a datagram C handed back."""
    response = answer(snapshot, query, transport=UDP)
    question = key(query)
    if question is not None:
        entry = snapshot.cache.get(question)
        if entry is not None:
            table.put(question, entry)
    return response


@st.composite
def mutated(draw: st.DrawFn, wire: bytes) -> bytes:
    """``wire`` changed the ways a hostile or odd client changes a query."""
    kind = draw(st.sampled_from(
        ["same", "header", "truncate", "flip", "append", "pointer", "opt", "options",
         "opt-version", "opt-extended", "counts", "class", "transfer"]
    ))
    data = bytearray(wire)
    if kind == "header":  # any ID and flag bits (QR, opcode, AA, TC, Z, AD, RCODE)
        data[0:4] = draw(st.binary(min_size=4, max_size=4))
    elif kind == "truncate":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif kind == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    elif kind == "append":
        data += draw(st.binary(min_size=1, max_size=16))
    elif kind == "pointer":  # the question name compressed (to the header)
        qend = 12
        while qend < len(data) and data[qend]:
            qend += data[qend] + 1
        data[12:qend + 1] = b"\xc0\x0c"
    elif kind in ("opt", "options", "opt-version", "opt-extended"):
        base = without_additional(bytes(data))
        payload = draw(st.integers(0, 0xFFFF))
        flags = draw(st.sampled_from([0, 0x8000, 0x0001, 0xFFFF]))
        version = 1 if kind == "opt-version" else 0
        extended = draw(st.integers(1, 255)) if kind == "opt-extended" else 0
        options = b""
        if kind == "options":
            options = struct.pack("!HH", draw(st.sampled_from([3, 8, 10, 12, 65001])), 2) + b"ab"
        opt = b"\x00" + struct.pack("!HHBBHH", 41, payload, extended, version, flags,
                                   len(options)) + options
        data = bytearray(base[:10] + b"\x00\x01" + base[12:] + opt)
    elif kind == "counts":
        at = draw(st.sampled_from([4, 6, 8, 10]))
        data[at:at + 2] = draw(st.binary(min_size=2, max_size=2))
    elif kind == "class":
        data[-2:] = draw(st.sampled_from([b"\x00\x03", b"\x00\xff", b"\x00\xfe", b"\x01\x01"]))
    elif kind == "transfer" and not data[10:12].strip(b"\x00"):
        data[-4:-2] = draw(st.sampled_from([b"\x00\xfc", b"\x00\xfb"]))
    return bytes(data)


def without_additional(wire: bytes) -> bytes:
    """``wire`` (one question, no records) with its additional section cut off."""
    qend = 12
    while wire[qend]:
        qend += wire[qend] + 1
    return wire[:10] + b"\x00\x00" + wire[12:qend + 5]


@SETTINGS
@given(st.data())
def test_what_c_answers_is_byte_for_byte_what_answer_gives(data: st.DataObject) -> None:
    rows = data.draw(zones())
    snapshot = snapshot_of(rows)
    table = Table(CACHE_ENTRIES)
    asked = data.draw(st.lists(queries(rows), min_size=1, max_size=8))
    plain = [wire for wire, _limit, _transport in asked]
    for wire in plain:
        teach(table, snapshot, wire)
    for wire in plain:
        for query in (wire, data.draw(mutated(wire)), data.draw(mutated(wire))):
            expected = answer(snapshot, query, transport=UDP)
            fast = table.answer(query)
            question = key(query)
            held = question is not None and question in snapshot.cache
            if fast is None:
                assert not held, f"C handed back a question it holds: {query.hex()}"
            else:
                assert fast == expected, f"C and answer differ for {query.hex()}"
                assert held


@SETTINGS
@given(st.data())
def test_c_answers_every_plain_query_whose_question_python_cached(data: st.DataObject) -> None:
    rows = data.draw(zones())
    snapshot = snapshot_of(rows)
    table = Table(CACHE_ENTRIES)
    for wire, _limit, _transport in data.draw(st.lists(queries(rows), min_size=1, max_size=8)):
        teach(table, snapshot, wire)
        message = dns.message.from_wire(wire)
        question = key(wire)
        assert question is not None  # a dnspython query: one question, at most a bare OPT
        assert question == wire[12:12 + len(question) - 2].lower() + struct.pack(
            "!H", message.question[0].rdtype
        )
        if question in snapshot.cache:
            assert table.answer(wire) == answer(snapshot, wire, transport=UDP)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_garbage_is_handed_to_python_or_answered_as_python_would(garbage: bytes) -> None:
    snapshot = snapshot_of(EXAMPLE_ROWS)
    table = Table(16)
    for name, rtype in (("www.example.com.", "A"), ("example.com.", "SOA")):
        teach(table, snapshot, dns.message.make_query(name, rtype).to_wire())
    fast = table.answer(garbage)
    if fast is not None:
        assert fast == answer(snapshot, garbage, transport=UDP)


EXAMPLE_ROWS = [
    RecordRow("example.com.", "example.com.", "SOA", 3600,
              "ns.example.com. h.example.com. 1 2 3 4 300"),
    RecordRow("example.com.", "example.com.", "NS", 3600, "ns.example.com."),
    RecordRow("example.com.", "ns.example.com.", "A", 3600, "192.0.2.53"),
    RecordRow("example.com.", "www.example.com.", "A", 300, "192.0.2.80"),
]


def test_a_full_table_is_emptied_and_fills_again() -> None:
    snapshot = snapshot_of(EXAMPLE_ROWS)
    table = Table(2)
    asked = [dns.message.make_query(name, rtype).to_wire() for name, rtype in (
        ("www.example.com.", "A"), ("example.com.", "SOA"), ("example.com.", "NS"))]
    for wire in asked:
        teach(table, snapshot, wire)
    assert len(table) == 1  # the third entry found the table full: emptied, then kept
    assert table.answer(asked[2]) == answer(snapshot, asked[2], transport=UDP)
    assert table.answer(asked[0]) is None


def test_the_table_refuses_malformed_entries_with_an_error() -> None:
    table = Table(4)
    good = b"\x03www\x00\x00\x01"
    with pytest.raises(ValueError, match="7 fields"):
        table.put(good, (1, 2))
    with pytest.raises(ValueError, match="65535"):
        table.put(good, (0x10000, 0, 0, 0, b"", 0, None))
    with pytest.raises(TypeError, match="bytes"):
        table.put(good, (0, 0, 0, 0, "body", 0, None))
    with pytest.raises(ValueError, match="257"):
        table.put(b"\x00" * 300, (0, 0, 0, 0, b"", 0, None))
    assert len(table) == 0


def test_the_build_under_test_has_the_compiled_path() -> None:
    assert fastpath.COMPILED
    assert fastpath.path_name() == "compiled"

"""The compiled UDP fast path against its oracle, ``answer``: over generated zones (with
wildcards, delegations, DNAMEs, child zones, CNAME chains) and queries (hostile bytes
too), whatever C answers is byte for byte what ``answer`` gives; C answers every plain
query whose question ``answer`` keeps in its cache, and a flood's negative answers once
it has learnt them; everything else is handed to Python. On a node signing some of its
zones (online with compact denial or NSEC3, or without the key here) the same holds with
the signer, and C hands back every DO=1 question to a signed zone."""

from __future__ import annotations

import gc
import struct
import weakref
from typing import TYPE_CHECKING

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.property.random_zones import queries, zones
from tests.property.two_zones import EXAMPLE_ROWS, PLAIN, SIGNED, TWO_ZONES
from valis_core.dns import dnssec
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer._fastpath import Table
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.wire import from_text
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

if TYPE_CHECKING:
    from valis_core.dns.answer._fastpath import Table

pytestmark = pytest.mark.usefixtures("compiled")  # every test here asks C

UDP = Transport.UDP
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def snapshot_of(rows: list[RecordRow]) -> Snapshot:
    return Snapshot(ZoneIndex.from_records(rows))


def table_of(snapshot: Snapshot) -> Table:
    table = fastpath.table_for(snapshot)
    assert table is not None
    return table


def new_table(entries: int) -> Table:
    """A bare table of ``entries`` (imported here: the module collects in a tree that has
    not built the extension, and its tests skip there)."""
    from valis_core.dns.answer._fastpath import Table

    return Table(entries)


def teach(table: Table, snapshot: Snapshot, query: bytes) -> bytes | None:
    """Ask C, and when it hands the query back answer it in Python and let the table
    learn, as the serve loop does; the response."""
    fast, key, wanted = table.ask(query)
    if fast is not None:
        return fast
    response = answer(snapshot, query, transport=UDP)
    fastpath.learn(table, snapshot, key, wanted)
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
        if kind == "options":  # cookies, client subnet, padding...; whole or broken
            for _ in range(draw(st.sampled_from([1, 2, 3, 64, 65]))):
                value = draw(st.binary(max_size=8))
                options += struct.pack("!HH", draw(st.sampled_from([3, 8, 10, 12, 65001])),
                                       len(value)) + value
            options = options[: draw(st.sampled_from([len(options), len(options) - 1, 3]))]
        rdlen = len(options) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        opt = b"\x00" + struct.pack("!HHBBHH", 41, payload, extended, version, flags,
                                   max(0, rdlen)) + options
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
    table = table_of(snapshot)
    asked = data.draw(st.lists(queries(rows), min_size=1, max_size=8))
    plain = [wire for wire, _limit, _transport in asked]
    for wire in plain:
        assert teach(table, snapshot, wire) == answer(snapshot, wire, transport=UDP)
    # What the table was taught; answering a mutated query below caches its question in
    # Python's cache without teaching the table, so that cache is no measure after this.
    taught = frozenset(snapshot.cache)
    for wire in plain:
        for query in (wire, data.draw(mutated(wire)), data.draw(mutated(wire))):
            expected = answer(snapshot, query, transport=UDP)
            fast, key, _wanted = table.ask(query)
            if fast is None:
                held = key is not None and key in taught
                assert not held, f"C handed back a question it holds: {query.hex()}"
            else:
                assert fast == expected, f"C and answer differ for {query.hex()}"


@SETTINGS
@given(st.data())
def test_c_answers_every_plain_query_whose_question_python_cached(data: st.DataObject) -> None:
    rows = data.draw(zones())
    snapshot = snapshot_of(rows)
    table = table_of(snapshot)
    for wire, _limit, _transport in data.draw(st.lists(queries(rows), min_size=1, max_size=8)):
        teach(table, snapshot, wire)
        fast, key, _wanted = table.ask(wire)
        if fast is not None:
            assert fast == answer(snapshot, wire, transport=UDP)
            continue
        message = dns.message.from_wire(wire)
        assert key is not None  # a dnspython query: one question, at most one OPT
        assert key == wire[12:12 + len(key) - 2].lower() + struct.pack(
            "!H", message.question[0].rdtype
        )
        assert key not in snapshot.cache


@SETTINGS
@given(st.data())
def test_negative_answers_match_answer_wherever_c_gives_them(data: st.DataObject) -> None:
    """Random names and types under every generated zone: C's NXDOMAIN and NODATA (and
    everything else it answers) are answer's bytes, in zones with wildcards, delegations
    and DNAMEs too (where C hands the question back instead)."""
    rows = data.draw(zones())
    snapshot = snapshot_of(rows)
    table = table_of(snapshot)
    owners = sorted({row.owner for row in rows})
    apexes = sorted({row.zone for row in rows})
    labels = st.text("abcxyz0*-", min_size=1, max_size=6).filter(lambda label: label != "*")
    names = st.one_of(
        st.sampled_from(owners),
        st.tuples(labels, st.sampled_from(owners)).map(lambda pair: f"{pair[0]}.{pair[1]}"),
        st.tuples(labels, st.sampled_from(apexes)).map(lambda pair: f"{pair[0]}.{pair[1]}"),
    )
    types = st.one_of(st.integers(1, 65535), st.sampled_from([1, 2, 5, 6, 28, 39, 43, 255])
                      ).map(dns.rdatatype.RdataType.make)
    for _ in range(12):
        message = dns.message.make_query(data.draw(names), data.draw(types), use_edns=None)
        wire = message.to_wire()
        for _twice in range(2):
            assert teach(table, snapshot, wire) == answer(snapshot, wire, transport=UDP)


def test_a_flood_inside_a_plain_zone_is_answered_in_c_once_learnt() -> None:
    snapshot = snapshot_of(EXAMPLE_ROWS)
    table = table_of(snapshot)
    for name, rtype in (("nothere.example.com.", "A"), ("www.example.com.", "TYPE1234")):
        first = dns.message.make_query(name, rtype).to_wire()
        teach(table, snapshot, first)
    # the negative answer is kept per offset of the apex: names of the first one's length
    cases: tuple[tuple[str, str | int, int], ...] = (
        ("another.example.com.", "A", 3), ("www.example.com.", 4321, 0),
        ("OtherNm.example.com.", "MX", 3),
    )
    for name, qtype, rcode in cases:
        wire = dns.message.make_query(name, dns.rdatatype.RdataType.make(qtype)).to_wire()
        fast, _key, _wanted = table.ask(wire)
        assert fast is not None
        assert fast == answer(snapshot, wire, transport=UDP)
        assert fast[3] & 0x0F == rcode


@settings(deadline=None)
@given(st.binary(max_size=600))
def test_garbage_is_handed_to_python_or_answered_as_python_would(garbage: bytes) -> None:
    snapshot = snapshot_of(EXAMPLE_ROWS)
    table = table_of(snapshot)
    for name, rtype in (("www.example.com.", "A"), ("example.com.", "SOA"),
                        ("nothere.example.com.", "A"), ("www.example.com.", "TXT")):
        teach(table, snapshot, dns.message.make_query(name, rtype).to_wire())
    fast, _key, _wanted = table.ask(garbage)
    if fast is not None:
        assert fast == answer(snapshot, garbage, transport=UDP)



def test_the_sockets_serving_one_snapshot_share_its_table_and_it_goes_with_the_snapshot(
) -> None:
    snapshot = snapshot_of(EXAMPLE_ROWS)
    table = fastpath.shared_table(snapshot)
    assert table is not None
    assert fastpath.shared_table(snapshot) is table
    wire = dns.message.make_query("www.example.com.", "A").to_wire()
    teach(table, snapshot, wire)  # learnt through one socket, answered for the other
    shared = fastpath.shared_table(snapshot)
    assert shared is not None
    assert shared.ask(wire)[0] == answer(snapshot, wire, transport=UDP)
    other = snapshot_of(EXAMPLE_ROWS)
    assert fastpath.shared_table(other) is not table
    held = weakref.ref(snapshot)
    del table, shared, snapshot
    gc.collect()
    assert held() is None  # a shared table keeps no snapshot alive once it is served no more


def test_a_full_table_is_emptied_and_fills_again() -> None:
    snapshot = snapshot_of(EXAMPLE_ROWS)
    table = new_table(2)
    asked = [dns.message.make_query(name, rtype).to_wire() for name, rtype in (
        ("www.example.com.", "A"), ("example.com.", "SOA"), ("example.com.", "NS"))]
    for wire in asked:
        teach(table, snapshot, wire)
    assert len(table) == 1  # the third entry found the table full: emptied, then kept
    assert table.ask(asked[2])[0] == answer(snapshot, asked[2], transport=UDP)
    assert table.ask(asked[0])[0] is None


def test_a_table_knows_which_zones_an_entry_was_read_from_until_it_is_emptied() -> None:
    """``Table.reading``: what a move of a zone asks before it compares entries or
    answers the changed owners again (``fastpath._patched``)."""
    snapshot = snapshot_of(TWO_ZONES)
    table = fastpath.shared_table(snapshot)
    assert table is not None
    plain, signed = from_text(PLAIN).lower(), from_text(SIGNED).lower()
    assert not table.reading(plain)
    assert not table.reading(signed)
    assert not table.reading(from_text("not-served.example.").lower())
    teach(table, snapshot, dns.message.make_query(f"nothere.{PLAIN}", "A").to_wire())
    assert not table.reading(plain)  # a negative answer is the zone's, read from no entry
    teach(table, snapshot, dns.message.make_query(f"www.{PLAIN}", "A").to_wire())
    assert table.reading(plain)
    assert not table.reading(signed)
    table.clear()
    assert not table.reading(plain)
    with pytest.raises(TypeError):
        table.reading("a text apex")  # type: ignore[arg-type]


def test_the_table_refuses_malformed_entries_with_an_error() -> None:
    table = new_table(4)
    good = b"\x03www\x00\x00\x01"
    with pytest.raises(ValueError, match="7 fields"):
        table.put(good, (1, 2))
    with pytest.raises(ValueError, match="65535"):
        table.put(good, (0x10000, 0, 0, 0, b"", 0, None))
    with pytest.raises(TypeError, match="bytes"):
        table.put(good, (0, 0, 0, 0, "body", 0, None))
    with pytest.raises(ValueError, match="257"):
        table.put(b"\x00" * 300, (0, 0, 0, 0, b"", 0, None))
    with pytest.raises(KeyError):
        table.negative(b"\x07example\x00", 3, 0, (0x8403, 0, 1, 0, b"", 0, None))
    with pytest.raises(ValueError, match="wire name"):
        table.zone(b"\x07example", {}, frozenset(), None, False)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        table.zone(b"\x07example\x00", [], frozenset(), None, False)  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # an owner table's shards are 2**k dicts
        table.zone(b"\x07example\x00", ({}, {}, {}), ({},), None, False)
    with pytest.raises(TypeError):
        table.zone(b"\x07example\x00", ({},), ({}, frozenset()), None, False)  # type: ignore[arg-type]
    assert len(table) == 0


def test_the_build_under_test_has_the_compiled_path() -> None:
    assert fastpath.COMPILED
    assert fastpath.path_name() == "compiled"


def test_many_zones_each_answer_for_their_own_names() -> None:
    """Hundreds of zones (the table's zone lookup grows as they are added), a child zone
    beneath one of them and a name beneath no zone: C finds the deepest zone as
    ``ZoneIndex.zone_for`` does, or hands the question back."""
    rows = []
    for number in range(300):
        apex = f"z{number}.test."
        rows.append(RecordRow(apex, apex, "SOA", 3600, f"ns.{apex} h.{apex} 1 2 3 4 {number}"))
        rows.append(RecordRow(apex, apex, "NS", 3600, f"ns.{apex}"))
        rows.append(RecordRow(apex, f"www.{apex}", "A", 300, "192.0.2.80"))
    child = "sub.z7.test."
    rows.append(RecordRow(child, child, "SOA", 3600, f"ns.{child} h.{child} 1 2 3 4 99"))
    rows.append(RecordRow(child, child, "NS", 3600, f"ns.{child}"))
    snapshot = snapshot_of(rows)
    table = table_of(snapshot)
    names = [f"nope.z{number}.test." for number in range(0, 300, 7)]
    names += [f"nope.{child}", "nope.sub.z8.test.", "nope.elsewhere.", "www.z9.test."]
    for name in names:
        for rtype in ("A", "TXT"):
            wire = dns.message.make_query(name, rtype).to_wire()
            for _twice in range(2):
                assert teach(table, snapshot, wire) == answer(snapshot, wire, transport=UDP)
    fast, _key, _wanted = table.ask(dns.message.make_query(f"nope.{child}", "A").to_wire())
    assert fast is not None
    assert b"\x03sub\x02z7\x04test\x00" in fast.lower()  # the child's SOA, not the parent's


NOW = 1_800_000_000
SIGNING_KEYS = (dnssec.ZoneKey(dnssec.generate_key(13)), dnssec.ZoneKey(dnssec.generate_key(15)))
SIGNING_QTYPES = (
    "DNSKEY", "CDS", "CDNSKEY", "NSEC3PARAM", "RRSIG", "NSEC", "NSEC3", "TYPE128", "DS", "SOA",
    "A", "TXT", "ANY", "TYPE4321",
)
HOW_SIGNED = ("unsigned", "compact", "nsec3", "without its key")


@st.composite
def signed_snapshot(draw: st.DrawFn, rows: list[RecordRow]) -> Snapshot:
    """The zones of ``rows``, each unsigned, signed online (compact denial or NSEC3), or
    signed without its key here, as drawn."""
    keys: dict[bytes, dnssec.ZoneKey | None] = {}
    chains: dict[bytes, Nsec3Params] = {}
    for origin in sorted({row.zone for row in rows}):
        how = draw(st.sampled_from(HOW_SIGNED))
        apex = from_text(origin).lower()
        if how != "unsigned":
            keys[apex] = None if how == "without its key" else draw(st.sampled_from(SIGNING_KEYS))
        if how == "nsec3":
            chains[apex] = Nsec3Params(draw(st.sampled_from([0, 1])), draw(st.binary(max_size=4)))
    signer = Signer(keys, clock=lambda: NOW, nsec3=chains)
    return Snapshot(ZoneIndex.from_records(rows), signer=signer)


@st.composite
def signing_queries(draw: st.DrawFn, rows: list[RecordRow]) -> list[bytes]:
    """A question for a served name (an apex often) of a type signing changes or not,
    asked with DO=0 (with or without EDNS) and with DO=1, in either order."""
    owners = sorted({row.owner for row in rows})
    apexes = sorted({row.zone for row in rows})
    name = draw(st.one_of(
        st.sampled_from(apexes), st.sampled_from(owners),
        st.sampled_from(apexes).map(lambda apex: f"nope.{apex}"),
    ))
    name = name.upper() if draw(st.booleans()) else name
    rtype = draw(st.sampled_from(SIGNING_QTYPES))
    edns = draw(st.sampled_from([None, 512, 1232, 4096]))
    asked = [
        dns.message.make_query(name, rtype, use_edns=edns is not None, payload=edns or 0,
                               id=draw(st.integers(0, 0xFFFF))).to_wire(),
        dns.message.make_query(name, rtype, payload=edns or 1232, want_dnssec=True,
                               id=draw(st.integers(0, 0xFFFF))).to_wire(),
    ]
    return asked if draw(st.booleans()) else asked[::-1]


def signed_zone_asked(snapshot: Snapshot, query: bytes) -> bool:
    """Whether ``query`` (a dnspython query) asks a zone the snapshot's signer signs
    (for DS at an apex, the zone above, as the signer takes it)."""
    message = dns.message.from_wire(query)
    question = message.question[0]
    wire_name = question.name.to_wire()
    assert wire_name is not None
    qname = wire_name.lower()
    zone = snapshot.index.zone_for(qname)
    if zone is None or snapshot.signer is None:
        return False
    if question.rdtype == dns.rdatatype.DS and qname == zone.apex:
        zone = snapshot.index.parent_of(zone) or zone
    return zone.apex in snapshot.signer.zones


@SETTINGS
@given(st.data())
def test_with_some_zones_signed_what_c_answers_is_what_answer_gives_with_the_signer(
    data: st.DataObject,
) -> None:
    rows = data.draw(zones())
    snapshot = data.draw(signed_snapshot(rows))
    table = table_of(snapshot)
    # each zone's NODATA at its apex first: C knows it when the apex's key types come
    asked = [dns.message.make_query(apex, "TYPE4321").to_wire()
             for apex in sorted({row.zone for row in rows})]
    asked += [wire for wire, _limit, _transport in data.draw(
        st.lists(queries(rows), min_size=1, max_size=6))]
    for pair in data.draw(st.lists(signing_queries(rows), min_size=1, max_size=6)):
        asked += pair
    for query in asked:
        assert teach(table, snapshot, query) == answer(snapshot, query, transport=UDP)
    for query in asked:
        for sent in (query, data.draw(mutated(query))):
            fast, _key, _wanted = table.ask(sent)
            if fast is not None:
                assert fast == answer(snapshot, sent, transport=UDP), sent.hex()
        message = dns.message.from_wire(query)
        if message.ednsflags & dns.flags.DO and signed_zone_asked(snapshot, query):
            assert table.ask(query)[0] is None, "C answered a DO=1 question to a signed zone"


def two_zones(nsec3: bool = False) -> Snapshot:
    apex = from_text(SIGNED)
    signer = Signer({apex: SIGNING_KEYS[0]}, clock=lambda: NOW,
                    nsec3={apex: Nsec3Params()} if nsec3 else None)
    return Snapshot(ZoneIndex.from_records(TWO_ZONES), signer=signer)


@pytest.mark.parametrize("nsec3", [False, True])
def test_a_signed_zones_do0_answers_and_floods_are_answered_in_c_once_learnt(nsec3: bool) -> None:
    snapshot = two_zones(nsec3)
    table = table_of(snapshot)
    for name, rtype in ((f"www.{SIGNED}", "A"), (f"nope.{SIGNED}", "A"), (SIGNED, "MX"),
                        (f"www.{PLAIN}", "A")):
        for do in (False, True):
            teach(table, snapshot, dns.message.make_query(name, rtype, want_dnssec=do).to_wire())
    for name, rtype, do in ((f"www.{SIGNED}", "A", False), (f"nopx.{SIGNED}", "A", False),
                            (SIGNED, "TXT", False), (f"www.{PLAIN}", "A", True),
                            (f"www.{PLAIN}", "A", False)):
        query = dns.message.make_query(name, rtype, want_dnssec=do).to_wire()
        fast, _key, _wanted = table.ask(query)
        assert fast is not None, (name, rtype, do)
        assert fast == answer(snapshot, query, transport=UDP)


@pytest.mark.parametrize("rtype", ["DNSKEY", "CDS", "CDNSKEY", "NSEC3PARAM"])
def test_the_key_records_at_a_signed_apex_are_the_signers_even_with_do0(rtype: str) -> None:
    snapshot = two_zones(nsec3=True)
    table = table_of(snapshot)
    nodata = dns.message.make_query(SIGNED, "TXT", want_dnssec=False).to_wire()
    teach(table, snapshot, nodata)  # the apex's NODATA, which C then gives other types
    assert table.ask(nodata)[0] is not None
    query = dns.message.make_query(SIGNED, rtype, want_dnssec=False).to_wire()
    for _twice in range(2):
        assert teach(table, snapshot, query) == answer(snapshot, query, transport=UDP)
    assert table.ask(query)[0] is None
    assert dns.message.from_wire(answer(snapshot, query, transport=UDP) or b"").answer


def test_a_zone_turned_signed_gets_a_table_that_does_not_answer_its_apex_keys() -> None:
    """A table is its snapshot's, and a signing change makes a new snapshot: the NODATA
    C learnt for DNSKEY at the apex while unsigned is not in the new one's table."""
    unsigned = Snapshot(ZoneIndex.from_records(TWO_ZONES))
    before = table_of(unsigned)
    query = dns.message.make_query(SIGNED, "DNSKEY", want_dnssec=False).to_wire()
    for _twice in range(2):
        teach(before, unsigned, query)
    assert before.ask(query)[0] == answer(unsigned, query, transport=UDP)
    signed = Snapshot(unsigned.index, signer=two_zones().signer)
    after = table_of(signed)
    assert after.ask(query)[0] is None
    assert teach(after, signed, query) != before.ask(query)[0]


def test_a_zone_signed_without_its_key_here_is_answered_by_python_only() -> None:
    snapshot = Snapshot(ZoneIndex.from_records(TWO_ZONES),
                        signer=Signer({from_text(SIGNED): None}, clock=lambda: NOW))
    table = table_of(snapshot)
    for name in (f"www.{SIGNED}", f"nope.{SIGNED}"):
        query = dns.message.make_query(name, "A", want_dnssec=False).to_wire()
        for _twice in range(2):
            response = teach(table, snapshot, query)
        assert table.ask(query)[0] is None
        assert response is not None
        assert response[3] & 0x0F == dns.rcode.SERVFAIL


def test_ds_at_a_childs_apex_follows_how_the_parent_is_signed() -> None:
    """DS at a child zone's apex is the parent's answer: a signed parent's with DO=1 is
    Python's, though the child is unsigned."""
    child = "sub.signed.example."
    rows = [*TWO_ZONES,
            RecordRow(SIGNED, child, "NS", 3600, f"ns.{child}"),
            RecordRow(SIGNED, child, "DS", 3600, f"12345 13 2 {'ab' * 32}"),
            RecordRow(child, child, "SOA", 3600, f"ns.{child} h.{child} 1 2 3 4 300"),
            RecordRow(child, child, "NS", 3600, f"ns.{child}")]
    snapshot = Snapshot(ZoneIndex.from_records(rows), signer=two_zones().signer)
    table = table_of(snapshot)
    for do, in_c in ((False, True), (True, False)):  # DO=0 first: C holds the entry
        query = dns.message.make_query(child, "DS", want_dnssec=do).to_wire()
        for _twice in range(2):
            assert teach(table, snapshot, query) == answer(snapshot, query, transport=UDP)
        fast = table.ask(query)[0]
        assert (fast is not None) is in_c

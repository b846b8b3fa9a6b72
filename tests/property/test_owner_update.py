"""RFC 2136 UPDATE as decided by ``valis_core.owner.update``: applying then re-reading
gives the RRsets a plain model of the RFC expects; a failing prerequisite changes
nothing; the serial goes up whenever anything changed; what the zone index would refuse
is REFUSED with nothing to write."""

from __future__ import annotations

from collections.abc import Iterable

import dns.rdata
import dns.rdatatype
import pytest
from dns.rcode import Rcode
from hypothesis import given, settings
from hypothesis import strategies as st

from valis_core.dns.wire.records import CLASS_ANY as ANY
from valis_core.dns.wire.records import CLASS_NONE as NONE
from valis_core.dns.wire.records import IN, RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.serial import next_serial, serial_gt
from valis_core.owner.update import (
    UpdateOutcome,
    UpdateRequest,
    UpdateRR,
    apply_update,
    owners_to_read,
    target_zone,
)

ZONE = "example.test."
NS_RDATA = "ns1.example.test."
NAMES = ["example.test.", "a.example.test.", "b.example.test.", "c.d.example.test."]
DATA = {
    "A": ["192.0.2.1", "192.0.2.2", "192.0.2.3"],
    "TXT": ['"one"', '"two"'],
    "MX": ["10 mail.example.test.", "20 mx.example.test."],
}
TTL = 300


def soa(serial: int) -> RecordRow:
    return RecordRow(
        ZONE, ZONE, "SOA", TTL, f"ns1.example.test. hostmaster.example.test. {serial} 7200 "
        "3600 1209600 300"
    )


def base_rows(serial: int) -> list[RecordRow]:
    return [
        soa(serial),
        RecordRow(ZONE, ZONE, "NS", TTL, NS_RDATA),
        RecordRow(ZONE, "ns1.example.test.", "A", TTL, "192.0.2.53"),
    ]


def rdata_wire(rtype: str, text: str) -> bytes:
    wire = dns.rdata.from_text("IN", rtype, text).to_wire()
    assert wire is not None
    return wire


def code(rtype: str) -> int:
    return int(dns.rdatatype.from_text(rtype))


records = st.tuples(st.sampled_from(NAMES), st.sampled_from(sorted(DATA))).flatmap(
    lambda nt: st.tuples(st.just(nt[0]), st.just(nt[1]), st.sampled_from(DATA[nt[1]]))
)
serials = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2**31 - 1, 2**32 - 1]))

# Update operations: (kind, name, type, rdata); the apex's NS may be deleted too.
adds = records.map(lambda r: ("add", *r))
rr_deletes = st.one_of(records, st.just((ZONE, "NS", NS_RDATA))).map(lambda r: ("del_rr", *r))
set_deletes = st.tuples(
    st.sampled_from(NAMES), st.sampled_from([*sorted(DATA), "NS", "SOA"])
).map(lambda r: ("del_rrset", r[0], r[1], ""))
name_deletes = st.sampled_from(NAMES).map(lambda n: ("del_name", n, "", ""))
operations = st.lists(st.one_of(adds, rr_deletes, set_deletes, name_deletes), max_size=8)


def as_update_rr(op: tuple[str, str, str, str]) -> UpdateRR:
    kind, name, rtype, rdata = op
    if kind == "add":
        return UpdateRR(name, IN, code(rtype), TTL, rdata_wire(rtype, rdata))
    if kind == "del_rr":
        return UpdateRR(name, NONE, code(rtype), 0, rdata_wire(rtype, rdata))
    if kind == "del_rrset":
        return UpdateRR(name, ANY, code(rtype), 0)
    return UpdateRR(name, ANY, int(dns.rdatatype.ANY), 0)


Model = dict[tuple[str, str], set[str]]


def model_of(rows: Iterable[RecordRow]) -> Model:
    found: Model = {}
    for row in rows:
        if row.rtype != "SOA":
            found.setdefault((row.owner.lower(), row.rtype), set()).add(row.rdata)
    return found


def model_apply(model: Model, ops: list[tuple[str, str, str, str]]) -> Model:
    """RFC 2136 §3.4.2 for adds and deletes of plain data, spelled out on sets."""
    held = {key: set(values) for key, values in model.items()}
    for kind, name, rtype, rdata in ops:
        apex = name == ZONE
        if kind == "add":
            held.setdefault((name, rtype), set()).add(rdata)
        elif kind == "del_rrset":
            if not (apex and rtype in ("NS", "SOA")):
                held.pop((name, rtype), None)
        elif kind == "del_name":
            for key in [k for k in held if k[0] == name]:
                if not (apex and key[1] in ("NS", "SOA")):
                    del held[key]
        else:
            values = held.get((name, rtype), set())
            if apex and rtype == "NS" and values == {rdata}:
                continue
            values.discard(rdata)
    return {key: values for key, values in held.items() if values}


def after(rows: list[RecordRow], outcome: UpdateOutcome) -> list[RecordRow]:
    gone = set(outcome.deletes)
    assert gone <= set(rows)
    return [row for row in rows if row not in gone] + list(outcome.adds)


def the_serial(rows: Iterable[RecordRow]) -> int:
    (found,) = [row for row in rows if row.rtype == "SOA"]
    return int(found.rdata.split()[2])


def full_check(rows: list[RecordRow]):  # type: ignore[no-untyped-def]
    index = ZoneIndex.from_records(rows)

    def check(owners: tuple[str, ...], changed: tuple[RecordRow, ...]) -> None:
        index.with_owners_replaced(ZONE, owners, changed)

    return check


def decide(request: UpdateRequest, rows: list[RecordRow], check: bool = True) -> UpdateOutcome:
    zone = target_zone(request, [ZONE])
    assert zone == ZONE
    wanted = set(owners_to_read(request, ZONE))
    read = [row for row in rows if row.owner.lower() in wanted]
    return apply_update(
        request, ZONE, read, served=[ZONE], check=full_check(rows) if check else None
    )


@settings(deadline=None)
@given(st.lists(records, max_size=8), operations, serials)
def test_applying_then_rereading_gives_the_rrsets_the_rfc_describes(
    initial: list[tuple[str, str, str]], ops: list[tuple[str, str, str, str]], serial: int
) -> None:
    rows = base_rows(serial) + list(
        {RecordRow(ZONE, n, t, TTL, r) for n, t, r in initial}
    )
    request = UpdateRequest(zone=ZONE, updates=tuple(as_update_rr(op) for op in ops))
    outcome = decide(request, rows)
    assert outcome.rcode == Rcode.NOERROR, outcome.reason
    result = after(rows, outcome)
    expected = model_apply(model_of(rows), ops)
    assert model_of(result) == expected
    assert outcome.changed == (expected != model_of(rows))
    ZoneIndex.from_records(result)  # still servable


SPELLINGS = {
    ("TXT", '"one"'): ["one"],
    ("TXT", '"two"'): ["two"],
    ("MX", "10 mail.example.test."): ["10 MAIL.Example.Test."],
    ("MX", "20 mx.example.test."): ["20 MX.EXAMPLE.TEST."],
}
"""Other spellings an operator may store of the same record (a row each; the zone serves
the record once)."""

spelled = records.flatmap(
    lambda r: st.lists(st.sampled_from([r[2], *SPELLINGS.get((r[1], r[2]), [])]), min_size=1,
                       max_size=2, unique=True)
    .map(lambda texts: [(r[0], r[1], text) for text in texts]))
"""A record stored as one row or as two spelling it."""


def canonical(rtype: str, text: str) -> str:
    return dns.rdata.from_text("IN", rtype, text).to_digestable().hex()


def served_model(rows: Iterable[RecordRow]) -> Model:
    """The records served: rows spelling one record are one."""
    found: Model = {}
    for row in rows:
        if row.rtype != "SOA":
            found.setdefault((row.owner.lower(), row.rtype), set()).add(
                canonical(row.rtype, row.rdata))
    return found


@settings(deadline=None)
@given(st.lists(spelled, max_size=6).map(lambda each: [r for rows in each for r in rows]),
       operations)
def test_an_update_changes_the_records_served_however_the_rows_spell_them(
    initial: list[tuple[str, str, str]], ops: list[tuple[str, str, str, str]]
) -> None:
    """A deleted record leaves with every row spelling it, and a record given a new TTL
    keeps no row of the old one: otherwise the zone would still serve it."""
    stored = {(n.lower(), t, r): RecordRow(ZONE, n, t, TTL, r) for n, t, r in initial}
    rows = base_rows(1) + list(stored.values())  # unique as records_no_duplicate keeps them
    request = UpdateRequest(zone=ZONE, updates=tuple(as_update_rr(op) for op in ops))
    outcome = decide(request, rows)
    assert outcome.rcode == Rcode.NOERROR, outcome.reason
    result = after(rows, outcome)
    canonical_ops = [(kind, name, rtype, canonical(rtype, rdata) if rdata else rdata)
                     for kind, name, rtype, rdata in ops]
    assert served_model(result) == model_apply(served_model(rows), canonical_ops)
    assert len(set(outcome.deletes)) == len(outcome.deletes)


def test_a_new_ttl_for_a_record_two_rows_spell_leaves_one_row_holding_it() -> None:
    spellings = [RecordRow(ZONE, "a.example.test.", "TXT", TTL, text) for text in ('"one"', "one")]
    rows = base_rows(1) + spellings
    request = UpdateRequest(zone=ZONE, updates=(
        UpdateRR("a.example.test.", IN, code("TXT"), 600, rdata_wire("TXT", '"one"')),))
    outcome = decide(request, rows)
    assert outcome.rcode == Rcode.NOERROR, outcome.reason
    assert [row for row in after(rows, outcome) if row.rtype == "TXT"] == [
        RecordRow(ZONE, "a.example.test.", "TXT", 600, '"one"')]


@settings(deadline=None)
@given(st.lists(records, max_size=8), operations, serials)
def test_the_serial_goes_up_exactly_when_the_zone_changed(
    initial: list[tuple[str, str, str]], ops: list[tuple[str, str, str, str]], serial: int
) -> None:
    rows = base_rows(serial) + list({RecordRow(ZONE, n, t, TTL, r) for n, t, r in initial})
    outcome = decide(UpdateRequest(zone=ZONE, updates=tuple(map(as_update_rr, ops))), rows)
    new = the_serial(after(rows, outcome))
    if outcome.changed:
        assert serial_gt(new, serial)
        assert new == outcome.serial == next_serial(serial)
    else:
        assert new == serial


def failing_prerequisite(rows: list[RecordRow]) -> st.SearchStrategy[tuple[UpdateRR, Rcode]]:
    in_use = {row.owner for row in rows}
    present = {(row.owner, row.rtype) for row in rows}
    unused = [name for name in NAMES if name not in in_use]
    absent = [(n, t) for n in NAMES for t in DATA if (n, t) not in present]
    options: list[st.SearchStrategy[tuple[UpdateRR, Rcode]]] = [
        st.sampled_from(sorted(in_use)).map(
            lambda n: (UpdateRR(n, NONE, int(dns.rdatatype.ANY), 0), Rcode.YXDOMAIN)
        ),
        st.sampled_from(sorted(present)).map(
            lambda p: (UpdateRR(p[0], NONE, code(p[1]), 0), Rcode.YXRRSET)
        ),
        st.just((UpdateRR(ZONE, IN, code("NS"), 0, rdata_wire("NS", "other.test.")),
                 Rcode.NXRRSET)),
    ]
    if unused:
        options.append(st.sampled_from(unused).map(
            lambda n: (UpdateRR(n, ANY, int(dns.rdatatype.ANY), 0), Rcode.NXDOMAIN)
        ))
    if absent:
        options.append(st.sampled_from(absent).map(
            lambda p: (UpdateRR(p[0], ANY, code(p[1]), 0), Rcode.NXRRSET)
        ))
    return st.one_of(options)


@settings(deadline=None)
@given(st.data(), st.lists(records, max_size=8), operations)
def test_a_failing_prerequisite_changes_nothing(
    data: st.DataObject, initial: list[tuple[str, str, str]], ops: list[tuple[str, str, str, str]]
) -> None:
    rows = base_rows(7) + list({RecordRow(ZONE, n, t, TTL, r) for n, t, r in initial})
    prerequisite, rcode = data.draw(failing_prerequisite(rows))
    holding = UpdateRR(ZONE, ANY, code("SOA"), 0)  # the apex SOA exists: holds
    request = UpdateRequest(
        zone=ZONE, prerequisites=(holding, prerequisite), updates=tuple(map(as_update_rr, ops))
    )
    outcome = decide(request, rows)
    assert outcome.rcode == rcode
    assert not outcome.changed


@settings(deadline=None)
@given(st.lists(records, max_size=8), operations)
def test_prerequisites_that_hold_change_nothing_about_the_outcome(
    initial: list[tuple[str, str, str]], ops: list[tuple[str, str, str, str]]
) -> None:
    rows = base_rows(7) + list({RecordRow(ZONE, n, t, TTL, r) for n, t, r in initial})
    holding = [UpdateRR(ZONE, ANY, int(dns.rdatatype.ANY), 0)]
    holding += [UpdateRR(ZONE, IN, code("NS"), 0, rdata_wire("NS", NS_RDATA))]
    holding += [UpdateRR(n, IN, code(t), 0, rdata_wire(t, r)) for n, t, r in initial]
    updates = tuple(map(as_update_rr, ops))
    plain = decide(UpdateRequest(zone=ZONE, updates=updates), rows)
    guarded = decide(UpdateRequest(zone=ZONE, prerequisites=tuple(holding), updates=updates), rows)
    assert guarded == plain


# --- the RFC's special cases, one example each ----------------------------------------


def add(name: str, rtype: str, rdata: str, ttl: int = TTL) -> UpdateRR:
    return UpdateRR(name, IN, code(rtype), ttl, rdata_wire(rtype, rdata))


ROWS = [*base_rows(10), RecordRow(ZONE, "www.example.test.", "A", TTL, "192.0.2.80")]


@pytest.mark.parametrize(("policy", "serial"), [
    (None, 11), ("increment", 11), ("keep", 11), ("unixtime", 1_790_000_000),
    ("dateserial", 2026_09_21_00),
])
def test_the_serial_goes_up_by_the_zones_policy(policy: str | None, serial: int) -> None:
    request = UpdateRequest(zone=ZONE, updates=(add("new.example.test.", "A", "192.0.2.9"),))
    outcome = apply_update(request, ZONE, ROWS, served=[ZONE], policy=policy,
                           now=1_790_000_000.0)
    assert outcome.serial == serial
    assert the_serial(after(ROWS, outcome)) == serial


def test_a_zone_the_node_does_not_serve_is_notauth() -> None:
    outcome = target_zone(UpdateRequest(zone="other.test."), [ZONE])
    assert isinstance(outcome, UpdateOutcome)
    assert outcome.rcode == Rcode.NOTAUTH
    below = target_zone(UpdateRequest(zone="www.example.test."), [ZONE])
    assert isinstance(below, UpdateOutcome)
    assert below.rcode == Rcode.NOTAUTH
    chaos = target_zone(UpdateRequest(zone=ZONE, zone_class=3), [ZONE])
    assert isinstance(chaos, UpdateOutcome)
    assert chaos.rcode == Rcode.NOTAUTH
    assert target_zone(UpdateRequest(zone="EXAMPLE.test."), ["example.test"]) == ZONE


@pytest.mark.parametrize(
    ("rr", "rcode"),
    [
        (add("www.other.test.", "A", "192.0.2.1"), Rcode.NOTZONE),
        (add("x.child.example.test.", "A", "192.0.2.1"), Rcode.NOTZONE),
        (UpdateRR("www.example.test.", IN, int(dns.rdatatype.ANY), 0, b""), Rcode.FORMERR),
        (UpdateRR("www.example.test.", IN, int(dns.rdatatype.AXFR), 0, b""), Rcode.FORMERR),
        (UpdateRR("www.example.test.", ANY, code("A"), 60), Rcode.FORMERR),
        (UpdateRR("www.example.test.", ANY, int(dns.rdatatype.AXFR), 0), Rcode.FORMERR),
        (UpdateRR("www.example.test.", NONE, int(dns.rdatatype.ANY), 0), Rcode.FORMERR),
        (UpdateRR("www.example.test.", 3, code("A"), 0, b"\x01\x02\x03\x04"), Rcode.FORMERR),
        (UpdateRR("www.example.test.", IN, code("A"), 60, b"\x01\x02"), Rcode.FORMERR),
    ],
)
def test_the_prescan_refuses_before_anything_is_applied(rr: UpdateRR, rcode: Rcode) -> None:
    request = UpdateRequest(zone=ZONE, updates=(add("new.example.test.", "A", "192.0.2.9"), rr))
    outcome = apply_update(request, ZONE, ROWS, served=[ZONE, "child.example.test."])
    assert outcome.rcode == rcode
    assert not outcome.changed


def test_an_soa_replaces_the_zones_only_with_a_higher_serial() -> None:
    higher = soa(11).rdata.replace("hostmaster", "admin")
    outcome = decide(UpdateRequest(zone=ZONE, updates=(add(ZONE, "SOA", higher),)), ROWS)
    assert outcome.serial == 11
    assert outcome.adds == (RecordRow(ZONE, ZONE, "SOA", TTL, higher),)
    lower = decide(UpdateRequest(zone=ZONE, updates=(add(ZONE, "SOA", soa(9).rdata),)), ROWS)
    assert not lower.changed
    elsewhere = add("www.example.test.", "SOA", soa(12).rdata)
    assert not decide(UpdateRequest(zone=ZONE, updates=(elsewhere,)), ROWS).changed


def test_an_update_with_a_new_serial_and_data_is_not_bumped_again() -> None:
    updates = (add(ZONE, "SOA", soa(50).rdata), add("n.example.test.", "A", "192.0.2.7"))
    outcome = decide(UpdateRequest(zone=ZONE, updates=updates), ROWS)
    assert outcome.serial == 50


def test_a_cname_beside_other_data_is_ignored_and_a_cname_replaces_a_cname() -> None:
    beside = decide(
        UpdateRequest(zone=ZONE, updates=(add("www.example.test.", "CNAME", "x.test."),)), ROWS
    )
    assert not beside.changed
    rows = [*base_rows(10), RecordRow(ZONE, "alias.example.test.", "CNAME", TTL, "a.test.")]
    outcome = decide(
        UpdateRequest(
            zone=ZONE,
            updates=(
                add("alias.example.test.", "CNAME", "b.test."),
                add("alias.example.test.", "A", "192.0.2.1"),
            ),
        ),
        rows,
    )
    assert {(r.rtype, r.rdata) for r in outcome.adds if r.rtype != "SOA"} == {
        ("CNAME", "b.test.")
    }


def test_adding_to_an_rrset_gives_the_whole_rrset_the_new_ttl() -> None:
    outcome = decide(
        UpdateRequest(zone=ZONE, updates=(add("www.example.test.", "A", "192.0.2.81", 60),)),
        ROWS,
    )
    www = [r for r in after(ROWS, outcome) if r.owner == "www.example.test."]
    assert {(r.rdata, r.ttl) for r in www} == {("192.0.2.80", 60), ("192.0.2.81", 60)}


def test_what_the_zone_index_refuses_is_refused_with_nothing_to_write() -> None:
    updates = (
        add("www.example.test.", "DNAME", "elsewhere.test."),
        add("deep.www.example.test.", "A", "192.0.2.1"),
    )
    outcome = decide(UpdateRequest(zone=ZONE, updates=updates), ROWS)
    assert outcome.rcode == Rcode.REFUSED
    assert "DNAME" in outcome.reason
    assert not outcome.changed


def test_owner_names_compare_without_case_and_rdata_names_too() -> None:
    rows = [*base_rows(10), RecordRow(ZONE, "Mail.example.test.", "MX", TTL, "10 MX.example.test.")]
    request = UpdateRequest(
        zone=ZONE,
        prerequisites=(UpdateRR("mail.EXAMPLE.test.", IN, code("MX"), 0,
                                rdata_wire("MX", "10 mx.example.test.")),),
        updates=(UpdateRR("MAIL.example.test.", NONE, code("MX"), 0,
                          rdata_wire("MX", "10 mx.EXAMPLE.test.")),),
    )
    outcome = decide(request, rows)
    assert outcome.rcode == Rcode.NOERROR
    assert RecordRow(ZONE, "Mail.example.test.", "MX", TTL, "10 MX.example.test.") in (
        outcome.deletes
    )


@given(st.integers(0, 2**32 - 1))
def test_next_serial_is_always_greater(serial: int) -> None:
    assert serial_gt(next_serial(serial), serial)
    assert not serial_gt(serial, next_serial(serial))

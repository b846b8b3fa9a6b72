"""Replacing a few owners of a served zone (``ZoneIndex.with_owners_replaced``) gives
exactly the index a full build of the changed record set gives: the same records, empty
non-terminals, delegations, DNAMEs, wildcards, SOA, counts and answers, and a refusal
exactly when the full build refuses. Patches are applied one after another, as a running
zone source applies them, so the bookkeeping carried from version to version is tested
too."""

from __future__ import annotations

import dns.message
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from valis_core.dns import wire
from valis_core.dns.answer import Transport, answer
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex

Z = "example.com."
CHILD = "sub.example.com."
SOA_TEXT = f"ns1.{Z} hostmaster.{Z} 1 7200 3600 1209600 300"
BASE = [
    RecordRow(Z, Z, "SOA", 3600, SOA_TEXT),
    RecordRow(Z, Z, "NS", 3600, f"ns1.{Z}"),
]

# A small name space, so generated zones are dense with empty non-terminals, wildcards,
# delegations with glue, DNAMEs and names that come and go.
RELATIVE = ["", "a", "b", "*", "a.a", "b.a", "*.a", "x.*.a", "a.b.a", "ns.d", "d", "x.d"]
NAMES = [f"{rel}.{Z}" if rel else Z for rel in RELATIVE]

RDATA = {
    "A": st.sampled_from(["192.0.2.1", "192.0.2.2", "198.51.100.7"]),
    "AAAA": st.sampled_from(["2001:db8::1", "2001:db8::2"]),
    "TXT": st.sampled_from(['"one"', '"two"']),
    "MX": st.sampled_from([f"10 a.{Z}", "20 mail.example.net."]),
    "NS": st.sampled_from([f"ns.d.{Z}", f"ns1.{Z}", "ns.example.net."]),
    "DS": st.just("12345 8 2 " + "ab" * 32),
    "CNAME": st.sampled_from([f"a.{Z}", "www.example.net."]),
    "DNAME": st.sampled_from(["example.net.", f"b.{Z}"]),
    "SOA": st.just(f"ns1.{Z} hostmaster.{Z} 2 7200 3600 1209600 60"),
}
# Weighted towards the types that do not refuse a zone, so most examples build.
TYPES = ["A"] * 6 + ["AAAA", "TXT", "TXT", "MX", "NS", "NS", "DS", "CNAME", "DNAME", "SOA"]


@st.composite
def records_at(draw: st.DrawFn, owners: list[str]) -> list[RecordRow]:
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        owner = draw(st.sampled_from(owners))
        if draw(st.booleans()):
            owner = owner.upper()  # owners compare case-insensitively
        rtype = draw(st.sampled_from(TYPES))
        ttl = draw(st.sampled_from([60, 300]))
        rows.append(RecordRow(Z, owner, rtype, ttl, draw(RDATA[rtype])))
    return rows


@st.composite
def patch(draw: st.DrawFn) -> tuple[list[str], list[RecordRow]]:
    """Some owners (present or not) and every record they hold afterwards."""
    owners = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    rows = draw(records_at(owners))
    if Z in owners and draw(st.integers(0, 9)):
        rows += BASE  # the apex mostly keeps its SOA and NS
    return owners, rows


def key(name: str) -> bytes:
    return wire.from_text(name).lower()


def build(rows: list[RecordRow]) -> ZoneIndex | ZoneError:
    """The full build; a zone left with no records at all is no zone to serve."""
    if not rows:
        return ZoneError(Z, Z, "no records")
    try:
        return ZoneIndex.from_records(rows)
    except ZoneError as exc:
        return exc


def state(zone: ServedZone) -> tuple[object, ...]:
    return (
        zone.origin,
        zone.apex,
        dict(zone.nodes),
        zone.empty_nonterminals,
        zone.cuts,
        zone.dnames,
        dict(zone.children),
        zone.wildcards,
        zone.has_wildcard,
        zone.soa,
        zone.negative_ttl,
        zone.record_count,
    )


def responses(index: ZoneIndex) -> list[bytes | None]:
    out = []
    for name in [*NAMES, f"q.b.a.{Z}", f"q.x.d.{Z}", f"nope.{Z}", f"q.q.{Z}"]:
        for rtype in ("A", "TXT", "NS", "DS"):
            query = dns.message.make_query(name, rtype, id=4242)
            out.append(answer(index, query.to_wire(), transport=Transport.TCP))
    return out


def assert_same(patched: ZoneIndex, built: ZoneIndex) -> None:
    assert patched.zones == built.zones
    assert patched.record_count == built.record_count
    for origin in built.zones:
        ours = patched.zone_for(key(origin))
        theirs = built.zone_for(key(origin))
        assert ours is not None
        assert theirs is not None
        assert state(ours) == state(theirs)
    assert responses(patched) == responses(built)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_at(NAMES), st.lists(patch(), min_size=1, max_size=4))
def test_replacing_owners_equals_building_the_changed_zone(
    extra: list[RecordRow], patches: list[tuple[list[str], list[RecordRow]]]
) -> None:
    rows = BASE + extra
    served = build(rows)
    if isinstance(served, ZoneError):
        return  # nothing served, nothing to patch
    for owners, new_rows in patches:
        replaced = {key(owner) for owner in owners}
        changed = [row for row in rows if key(row.owner) not in replaced] + new_rows
        expected = build(changed)
        if isinstance(expected, ZoneError):
            with pytest.raises(ZoneError) as refused:
                served.with_owners_replaced(Z, owners, new_rows)
            assert refused.value.zone == Z
            continue  # the source keeps serving the last good version
        zone = served.zone_for(key(Z))
        assert zone is not None
        before = state(zone)
        patched = served.with_owners_replaced(Z, owners, new_rows)
        assert state(zone) == before  # the version being served is never touched
        assert_same(patched, expected)
        served, rows = patched, changed


def test_a_patch_leaves_other_zones_shared_and_the_old_version_untouched() -> None:
    rows = [
        *BASE,
        RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.1"),
        RecordRow(Z, CHILD, "NS", 300, f"ns.{CHILD}"),
        RecordRow(Z, f"ns.{CHILD}", "A", 300, "192.0.2.9"),
        RecordRow(CHILD, CHILD, "SOA", 300, f"ns.{CHILD} h.{CHILD} 1 1 1 1 1"),
        RecordRow(CHILD, CHILD, "NS", 300, f"ns.{CHILD}"),
        RecordRow(CHILD, f"ns.{CHILD}", "A", 300, "192.0.2.9"),
    ]
    old = ZoneIndex.from_records(rows)
    before = responses(old)
    new_www = RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.77")
    patched = old.with_owners_replaced(Z, [f"www.{Z}", f"x.y.{Z}"], [new_www])
    assert responses(old) == before  # a query on the old version sees only the old one
    expected = ZoneIndex.from_records([new_www if r.owner == f"www.{Z}" else r for r in rows])
    assert_same(patched, expected)
    child_old, child_new = old.zone_for(key(CHILD)), patched.zone_for(key(CHILD))
    assert child_old is not None
    assert child_new is not None
    assert child_new is child_old  # shared whole: a zone belongs to no index version
    assert patched.parent_of(child_new) is patched.zone_for(key(Z))
    assert old.parent_of(child_old) is old.zone_for(key(Z))


def test_a_row_outside_the_replaced_owners_is_a_caller_error() -> None:
    index = ZoneIndex.from_records(BASE)
    stray = RecordRow(Z, f"b.{Z}", "A", 300, "192.0.2.1")
    with pytest.raises(ValueError, match=r"not being replaced: b\.example\.com\."):
        index.with_owners_replaced(Z, [f"a.{Z}"], [stray])


def test_an_owner_outside_the_zone_is_refused() -> None:
    index = ZoneIndex.from_records(BASE)
    with pytest.raises(ZoneError, match="data outside the zone"):
        index.with_owners_replaced(Z, ["www.example.net."], [])

"""The catalog zone (RFC 9432) rendered from a catalog's membership: whatever members join
and leave, in any order, each member is one PTR at its own unique ID, the IDs are unique
and a member's ID never changes while it stays, the schema version is "2", the zone is
one the index serves, and the stored records are brought to the rendering by exactly
the difference."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.catalog import (
    Catalog,
    CatalogError,
    catalog_records,
    record_changes,
    soa_record,
)

NAME = "catalog.invalid."
ZONES = [f"z{i}.test." for i in range(8)]

operations = st.lists(
    st.tuples(
        st.booleans(),  # join (else leave)
        st.sampled_from(ZONES),
        st.none() | st.sampled_from(["a", "signed", "tsig key 2"]),
    ),
    max_size=30,
)
# Few distinct IDs, so draws collide with held ones and the catalog must draw again.
drawn_ids = st.lists(st.sampled_from([f"id{i}" for i in range(12)]), min_size=64, max_size=64)


def fresh_from(ids: list[str]) -> Iterator[str]:
    while True:
        yield from ids


def check(catalog: Catalog) -> None:
    name = catalog.name
    rows = catalog_records(catalog)
    ptrs = [r for r in rows if r.rtype == "PTR" and not r.owner.startswith("coo.")]
    assert sorted(r.rdata for r in ptrs) == sorted(m.zone for m in catalog.members)
    assert len({m.unique_id for m in catalog.members}) == len(catalog.members)
    for member in catalog.members:
        assert [r.owner for r in ptrs if r.rdata == member.zone] == [
            f"{member.unique_id}.zones.{name}"]
        groups = [r.rdata for r in rows if r.owner == f"group.{member.unique_id}.zones.{name}"]
        assert groups == ([] if member.group is None else [f'"{member.group}"'])
        moving = [r.rdata for r in rows if r.owner == f"coo.{member.unique_id}.zones.{name}"]
        assert moving == ([] if member.coo is None else [member.coo])
    assert [r.rdata for r in rows if r.owner == f"version.{name}"] == ['"2"']
    assert [r.rdata for r in rows if r.rtype == "NS"] == ["invalid."]
    ZoneIndex.from_records([soa_record(name), *rows])


@settings(max_examples=scaled(0.5))
@given(operations, drawn_ids)
def test_members_appear_once_with_unique_ids_kept_while_they_stay(
    ops: list[tuple[bool, str, str | None]], ids: list[str]
) -> None:
    fresh = fresh_from(ids)
    catalog = Catalog(NAME)
    for join, zone, group in ops:
        before = {m.zone: m.unique_id for m in catalog.members}
        try:
            catalog = (catalog.with_member(zone, group, lambda: next(fresh)) if join
                       else catalog.without_member(zone))
        except CatalogError:
            # Only when every ID the draws can give is held: none is reused.
            assert len({*ids} - {*before.values()}) == 0
            continue
        after = {m.zone: m.unique_id for m in catalog.members}
        for other, held in before.items():
            if other != zone or join:
                assert after[other] == held  # others', and a rejoiner's own, IDs stay
        check(catalog)


@settings(max_examples=scaled(0.5))
@given(operations, operations, drawn_ids)
def test_the_stored_catalog_is_brought_to_the_rendering_by_the_difference(
    first: list[tuple[bool, str, str | None]], then: list[tuple[bool, str, str | None]],
    ids: list[str],
) -> None:
    fresh = fresh_from(ids)

    def apply(catalog: Catalog, ops: list[tuple[bool, str, str | None]]) -> Catalog:
        for join, zone, group in ops:
            with contextlib.suppress(CatalogError):
                catalog = (catalog.with_member(zone, group, lambda: next(fresh)) if join
                           else catalog.without_member(zone))
        return catalog

    old = apply(Catalog(NAME), first)
    new = apply(old, then)
    stray = RecordRow(NAME, f"stray.{NAME}", "TXT", 0, '"x"')
    held = [soa_record(NAME), *catalog_records(old), stray]
    deletes, adds = record_changes(held, new)
    result = [r for r in held if r not in deletes] + list(adds)
    assert sorted(result, key=repr) == sorted([soa_record(NAME), *catalog_records(new)],
                                              key=repr)
    assert stray in deletes
    assert soa_record(NAME) not in deletes


OTHER = "other.invalid."


def _applied(catalog: Catalog, ops: list[tuple[bool, str, str | None]],
             fresh: Iterator[str]) -> Catalog:
    for join, zone, group in ops:
        with contextlib.suppress(CatalogError):
            catalog = (catalog.with_member(zone, group, lambda: next(fresh)) if join
                       else catalog.without_member(zone))
    return catalog


@settings(max_examples=scaled(0.5))
@given(operations, operations, st.lists(st.tuples(st.sampled_from(ZONES), st.booleans())),
       drawn_ids)
def test_a_member_moving_away_carries_coo_and_joins_the_new_catalog_under_its_id(
    ops_old: list[tuple[bool, str, str | None]], ops_new: list[tuple[bool, str, str | None]],
    moves: list[tuple[str, bool]], ids: list[str],
) -> None:
    """RFC 9432 section 4.4.1: a member moving to another catalog carries one coo PTR
    naming it, until it stays after all; the new catalog lists it in its group, under the
    same unique ID when that one is free there (its consumers keep the zone as it is),
    and every other member of either catalog is untouched."""
    fresh = fresh_from(ids)
    old = _applied(Catalog(NAME), ops_old, fresh)
    new = _applied(Catalog(OTHER), ops_new, fresh)
    for zone, stay in moves:
        held = old.member(zone)
        if held is None:
            continue
        others_old = [m for m in old.members if m.zone != zone]
        others_new = [m for m in new.members if m.zone != zone]
        before_new = new.member(zone)
        old = old.with_coo(zone, NAME if stay else OTHER)
        check(old)
        assert old.member(zone) == attrs.evolve(held, coo=None if stay else OTHER)
        assert [m for m in old.members if m.zone != zone] == others_old
        if stay:
            continue
        try:
            new = new.with_joining(held, lambda: next(fresh))
        except CatalogError:  # every ID the draws give is held there
            assert held.unique_id in {m.unique_id for m in others_new}
            continue
        check(new)
        joined = new.member(zone)
        assert joined is not None
        assert (joined.group, joined.coo) == (held.group, before_new and before_new.coo)
        if before_new is not None:
            assert joined.unique_id == before_new.unique_id
        elif held.unique_id not in {m.unique_id for m in others_new}:
            assert joined.unique_id == held.unique_id
        assert [m for m in new.members if m.zone != zone] == others_new

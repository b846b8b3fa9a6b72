"""An NSEC3 chain carried from zone version to version (``nsec3.chain_for`` from the last
version's chain) is the chain built whole, whatever the patches between them replaced:
names that come and go with the empty non-terminals above them, delegation points set
over names a patch leaves in place (they leave the chain) or taken away from above them
(they join it), back from the later version to the earlier, and versions neither of
which descends from the other as far as its ``lineage`` remembers (compared name by
name). Beneath it, the persistent sorted ring
the chain keeps its hashes in (``valis_core.dns.dnssec.ring``) holds after any change
what a sorted list holds, and the ring it was changed from is left as it was."""

from __future__ import annotations

import bisect

from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns import wire
from valis_core.dns.dnssec import nsec3
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.dnssec.ring import Ring
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex

Z = "carry.test."
BASE = [
    RecordRow(Z, Z, "SOA", 3600, f"ns.{Z} h.{Z} 1 7200 3600 1209600 60"),
    RecordRow(Z, Z, "NS", 3600, f"ns.{Z}"),
]
OWNERS = [f"{rel}.{Z}" for rel in (
    "a", "b.a", "*.a", "d", "ns.d", "x.d", "y.x.d", "z.y.x.d", "m", "n.m", "o.n.m",
)]
"""Owners in a few subtrees, any of which a patch may make a delegation point over
names it leaves in place."""
RDATA = {"A": "192.0.2.1", "TXT": '"t"', "NS": f"ns.d.{Z}", "DS": "1 13 2 " + "ab" * 32}
PARAMS = st.sampled_from([Nsec3Params(), Nsec3Params(2, b"\xab")])


@st.composite
def records(draw: st.DrawFn, owners: list[str]) -> list[RecordRow]:
    return [RecordRow(Z, owner, rtype, 300, RDATA[rtype])
            for owner in owners
            for rtype in draw(st.sets(st.sampled_from(sorted(RDATA)), max_size=2))]


@st.composite
def patches(draw: st.DrawFn) -> list[tuple[list[str], list[RecordRow]]]:
    """Patches, each of a few owners and every record they hold afterwards."""
    out = []
    for _ in range(draw(st.integers(1, 5))):
        owners = draw(st.lists(st.sampled_from(OWNERS), min_size=1, max_size=3, unique=True))
        out.append((owners, draw(records(owners))))
    return out


def built(rows: list[RecordRow]) -> ZoneIndex | None:
    try:
        return ZoneIndex.from_records(rows)
    except ZoneError:
        return None


def zone_of(index: ZoneIndex) -> ServedZone:
    (zone,) = index.served()
    return zone


def assert_whole(chain: nsec3.Chain, zone: ServedZone, params: Nsec3Params) -> None:
    whole = nsec3.chain_for(zone, params)
    assert list(chain.ring) == list(whole.ring)
    assert list(chain.records()) == list(whole.records())


@given(records(OWNERS), patches(), PARAMS)
def test_a_chain_carried_across_patches_is_the_chain_built_whole(
    extra: list[RecordRow], changes: list[tuple[list[str], list[RecordRow]]],
    params: Nsec3Params,
) -> None:
    rows = BASE + extra
    index = built(rows)
    if index is None:
        return
    chain = nsec3.chain_for(zone_of(index), params)
    for owners, new in changes:
        try:
            patched = index.with_owners_replaced(Z, owners, new)
        except ZoneError:
            continue
        replaced = {wire.from_text(owner) for owner in owners}
        rows = [row for row in rows if wire.from_text(row.owner) not in replaced] + new
        zone = zone_of(patched)
        carried = nsec3.chain_for(zone, params, chain)
        assert_whole(carried, zone, params)
        assert_whole(chain, zone_of(index), params)  # the last version's, untouched
        back = nsec3.chain_for(zone_of(index), params, carried)  # the last one asked again
        assert_whole(back, zone_of(index), params)
        apart = built(rows)  # the same records built apart: no lineage to follow
        assert apart is not None
        assert_whole(nsec3.chain_for(zone, params, nsec3.chain_for(zone_of(apart), params)),
                     zone, params)
        index, chain = patched, carried


def test_a_chain_carried_past_what_the_lineage_remembers_is_still_whole() -> None:
    index = ZoneIndex.from_records(BASE)
    params = Nsec3Params()
    first = nsec3.chain_for(zone_of(index), params)
    for number in range(1100):  # more patches than a lineage remembers
        name = f"h{number}.{Z}"
        index = index.with_owners_replaced(Z, [name], [RecordRow(Z, name, "A", 300, "192.0.2.1")])
    zone = zone_of(index)
    assert zone.lineage.since(first.zone.lineage) is None
    assert_whole(nsec3.chain_for(zone, params, first), zone, params)


ITEMS = st.sets(st.binary(min_size=1, max_size=2), max_size=120)


@given(ITEMS, st.lists(st.tuples(ITEMS, ITEMS), min_size=1, max_size=4),
       st.sampled_from([2, 4, 8]), st.lists(st.binary(max_size=2), min_size=1, max_size=8))
def test_a_changed_ring_holds_what_a_sorted_list_holds(
    start: set[bytes], changes: list[tuple[set[bytes], set[bytes]]], chunk: int,
    keys: list[bytes],
) -> None:
    ring, held = Ring.of(start, chunk), set(start)
    for drop, add in changes:
        removed, added = drop & held, add - held - drop
        before = list(ring)
        changed = ring.changed(removed, added)
        assert list(ring) == before  # the old ring is left as it was
        held = (held - removed) | added
        model = sorted(held)
        assert list(changed) == model
        assert len(changed) == len(model)
        assert changed.firsts == tuple(part[0] for part in changed.chunks)
        assert all(0 < len(part) <= 2 * chunk for part in changed.chunks)
        for key in keys:
            at = bisect.bisect_left(model, key)
            assert changed.at_or_after(key) == (model[at] if at < len(model) else None)
            if model:
                assert changed.before(key) == model[at - 1]  # -1: the last, wrapping
                after = bisect.bisect_right(model, key)
                assert changed.after(key) == model[after % len(model)]
        ring = changed


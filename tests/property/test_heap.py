"""The resident's heap policy (``valis_core.heap``): a full load pauses the collector
and, for the resident, freezes what it made; a frozen zone version that a change
replaces is still freed, by reference counts alone, so freezing after full loads does
not make memory grow across changes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from valis_core.dns.zone import ZoneIndex
from valis_core.heap import PLAIN_HEAP, RESIDENT_HEAP


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as a test found it: enabled, nothing frozen by the test left so."""
    was = gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        yield
    finally:
        if gc.get_freeze_count() != frozen:
            gc.unfreeze()
        if was:
            gc.enable()


def _zones(count: int) -> ZoneIndex:
    text = "@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ 3600 IN NS ns1\n" \
        "ns1 3600 IN A 192.0.2.53\nwww 300 IN A 192.0.2.80\nsub 300 IN NS ns.sub\n" \
        "ns.sub 300 IN A 192.0.2.81\n*.wild 300 IN A 192.0.2.82\n"
    return ZoneIndex.from_zone_texts((text, f"z{i}.example.") for i in range(count))


def test_a_load_pauses_the_collector_and_enables_it_again_once_the_outermost_ends(
    collector: None,
) -> None:
    gc.enable()
    with PLAIN_HEAP.bulk():
        assert not gc.isenabled()
        with PLAIN_HEAP.bulk():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0 or not PLAIN_HEAP.freeze


def test_a_load_leaves_a_collector_disabled_before_it_disabled(collector: None) -> None:
    gc.disable()
    with PLAIN_HEAP.bulk():
        pass
    assert not gc.isenabled()


def test_the_resident_freezes_what_a_load_made_and_nothing_else_does(
    collector: None,
) -> None:
    gc.unfreeze()
    with PLAIN_HEAP.bulk():
        kept = _zones(3)
    assert gc.get_freeze_count() == 0
    with RESIDENT_HEAP.bulk():
        kept = _zones(3)
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)  # frozen, not untracked: still freed by reference counts


def test_a_frozen_zone_version_replaced_by_a_change_is_freed_without_the_collector(
    collector: None,
) -> None:
    """What a change replaces in an index frozen after its load (the zone's version,
    the index) is freed as soon as nothing refers to it: zone versions, indexes and
    lineages hold no reference cycle, so the collector, which never walks frozen
    objects, is not needed for them (a version's lineage lives on in its successors'
    until the last of them goes)."""
    with RESIDENT_HEAP.bulk():
        index = _zones(50)
    gc.disable()  # the collector cannot be what frees them below
    zone = index.zone_for(b"\x02z7\x07example\x00")
    assert zone is not None
    refs: list[Callable[[], object]] = [weakref.ref(index), weakref.ref(zone)]
    lineage = weakref.ref(zone.lineage)
    changed = index.with_owners_replaced("z7.example.", ["www.z7.example."], [])
    again = changed.with_owners_replaced("z7.example.", ["www.z7.example."], [])
    del index, zone, changed
    assert all(ref() is None for ref in refs)
    assert again.zone_for(b"\x03www\x02z7\x07example\x00") is not None
    now = again.zone_for(b"\x02z7\x07example\x00")
    assert now is not None
    assert now.lineage.before is not None
    assert lineage() is now.lineage.before.before  # remembered by its successors alone
    del again, now
    assert lineage() is None

"""A new version of one zone from the old one: a few owners' records replaced.

``ZoneIndex.with_owners_replaced`` lands here. The changed owners are checked as a build
checks them, and the empty non-terminals, child counts, wildcards, cuts and DNAMEs are
updated owner by owner, each step leaving them as a build of that state would; the
unchanged parts are shared with the old version, which nothing ever mutates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import DNAME, NS, RecordRow, ZoneError, count_records
from valis_core.dns.zone._served import ServedZone
from valis_core.dns.zone.build import (
    Builder,
    appear,
    check_apex,
    freeze_node,
    refuse_occluded,
    vanish,
)

_V = TypeVar("_V")


def replace_owners(
    zone: ServedZone, owners: frozenset[bytes], rows: Iterable[RecordRow]
) -> ServedZone:
    """``ZoneIndex.with_owners_replaced``: the changed owners are checked as a build
    checks them, and the empty non-terminals, child counts, wildcards, cuts and DNAMEs
    are updated owner by owner, each step leaving them as a build of that state would."""
    origin, apex = zone.origin, zone.apex
    for owner in owners:
        if not wire.is_at_or_below(owner, apex):
            raise ZoneError(
                origin,
                wire.to_text(owner),
                "data outside the zone; put it in the zone that contains it",
            )
    builder = Builder()
    builder.add_zone(origin)
    for row in rows:
        builder.add_row(row)
    if builder.apexes() != {apex}:
        raise ValueError(f"rows for zones other than {origin} given to replace its owners")
    fresh = builder.owners(apex)
    stray = fresh.keys() - owners
    if stray:
        raise ValueError(f"rows of owners not being replaced: {wire.to_text(min(stray))}")

    order = sorted(owners)
    frozen = {
        owner: freeze_node(origin, apex, owner, fresh[owner]) for owner in order if owner in fresh
    }
    # ``dict.copy`` clones the hash table as it is (no rehashing) while few entries were
    # deleted, so owners are replaced in place and deleted only when they go.
    nodes = _copied(zone.nodes)
    empty: set[bytes] | None = None  # copied when the first owner appears or vanishes
    children = zone.children
    wildcards = zone.wildcards
    count = zone.record_count
    for owner in order:
        old = nodes.get(owner)
        if old is not None:
            count -= count_records(old)
        new = frozen.get(owner)
        if new is not None:
            nodes[owner] = new[0]
            count += new[2]
        elif old is not None:
            del nodes[owner]
        if (old is None) == (new is None):
            continue  # it existed before and still does, or neither
        if empty is None:
            empty = set(zone.empty_nonterminals)
            children = _copied(zone.children)
        assert isinstance(children, dict)
        if new is not None:
            if owner in empty:
                empty.discard(owner)  # it existed already, as an empty non-terminal
            else:
                wildcards += appear(apex, owner, nodes, empty, children)
        elif children.get(owner):
            empty.add(owner)  # it still exists, for what lies beneath it
        else:
            wildcards -= vanish(apex, owner, nodes, children, empty)

    cut_now = {owner for owner, (_, types, _) in frozen.items() if NS in types}
    cuts = _members(zone.cuts, owners, cut_now - {apex})
    dname_now = {owner for owner, (_, types, _) in frozen.items() if DNAME in types}
    dnames = _members(zone.dnames, owners, dname_now)
    if apex in owners:
        soa, negative_ttl = check_apex(origin, nodes.get(apex, b""))
    else:
        soa, negative_ttl = zone.soa, zone.negative_ttl
    if dnames:
        _check_occlusion_of(origin, apex, owners, nodes, children, dnames)
    return ServedZone(
        origin=origin,
        apex=apex,
        nodes=nodes,
        empty_nonterminals=(
            zone.empty_nonterminals if empty is None else frozenset(empty)
        ),
        cuts=cuts,
        dnames=dnames,
        soa=soa,
        negative_ttl=negative_ttl,
        children=children,  # shared when unchanged: no version ever mutates it
        wildcards=wildcards,
        record_count=count,
        lineage=zone.lineage.patched(owners),
    )


def _copied(mapping: Mapping[bytes, _V]) -> dict[bytes, _V]:
    return mapping.copy() if isinstance(mapping, dict) else dict(mapping)


def _members(
    before: frozenset[bytes], owners: frozenset[bytes], now: set[bytes]
) -> frozenset[bytes]:
    """A set of owners (cuts, DNAMEs) after ``owners`` changed, of which ``now`` are in
    it; the old set itself when nothing changed."""
    if before.isdisjoint(owners) and not now:
        return before
    return (before - owners) | now


def _check_occlusion_of(  # noqa: PLR0917 - the patched zone's parts, one caller
    origin: str,
    apex: bytes,
    owners: frozenset[bytes],
    nodes: Mapping[bytes, bytes],
    children: Mapping[bytes, int],
    dnames: frozenset[bytes],
) -> None:
    """``build.occluded`` for a zone where only ``owners`` changed: a changed owner
    with data beneath a DNAME, or a changed owner that is now a DNAME with something
    beneath it. Any other pair was already there, and already refused."""
    for owner in sorted(owners):
        if owner in nodes:
            name = owner
            while name != apex:
                name = wire.parent(name)
                if name in dnames:
                    refuse_occluded(origin, owner, name)
        if owner in dnames and children.get(owner):
            below = min(n for n in nodes if n != owner and wire.is_at_or_below(n, owner))
            refuse_occluded(origin, below, owner)

"""A new version of one zone from the old one: a few owners' records replaced.

``ZoneIndex.with_owners_replaced`` lands here. The changed owners are checked as a build
checks them, and the empty non-terminals, child counts, wildcards, cuts and DNAMEs are
updated owner by owner, each step leaving them as a build of that state would; the
unchanged parts are shared with the old version, which nothing ever mutates: every table
of a zone is an ``owners`` table, and a change copies only the shards it writes to, so
it costs O(owners changed), whatever the zone's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import DNAME, NS, RecordRow, ZoneError, count_records
from valis_core.dns.zone._served import ServedZone
from valis_core.dns.zone.build import Builder, check_apex, freeze_node
from valis_core.dns.zone.owners import OwnerSet
from valis_core.dns.zone.tree import appear, refuse_occluded, vanish


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
    # Drafts copy a shard of the old version's tables the first time they write to it:
    # the new version shares every other shard (``owners``).
    nodes = zone.nodes.draft()
    empty = zone.empty_nonterminals.draft()
    children = zone.children.draft()
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
        if new is not None:
            if owner in empty:
                empty.discard(owner)  # it existed already, as an empty non-terminal
            else:
                wildcards += appear(apex, owner, nodes, empty, children)
        elif children.get(owner, 0):
            empty.add(owner)  # it still exists, for what lies beneath it
        else:
            wildcards -= vanish(apex, owner, nodes, children, empty)

    cut_now = {owner for owner, (_, types, _) in frozen.items() if NS in types}
    cuts = _members(zone.cuts, owners, cut_now - {apex})
    dname_now = {owner for owner, (_, types, _) in frozen.items() if DNAME in types}
    dnames = _members(zone.dnames, owners, dname_now)
    new_nodes = nodes.finish_map()
    if apex in owners:
        soa, negative_ttl = check_apex(origin, new_nodes.get(apex, b""))
    else:
        soa, negative_ttl = zone.soa, zone.negative_ttl
    new_children = children.finish_map()
    if dnames:
        _check_occlusion_of(origin, apex, owners, new_nodes, new_children, dnames)
    return ServedZone(
        origin=origin,
        apex=apex,
        nodes=new_nodes,
        empty_nonterminals=empty.finish_set(),
        cuts=cuts,
        dnames=dnames,
        soa=soa,
        negative_ttl=negative_ttl,
        children=new_children,
        wildcards=wildcards,
        record_count=count,
        lineage=zone.lineage.patched(owners),
    )


def _members(before: OwnerSet, owners: frozenset[bytes], now: set[bytes]) -> OwnerSet:
    """A set of owners (cuts, DNAMEs) after ``owners`` changed, of which ``now`` are in
    it; the old set itself when nothing changed."""
    if before.isdisjoint(owners) and not now:
        return before
    draft = before.draft()
    for owner in owners:
        if owner in now:
            draft.add(owner)
        else:
            draft.discard(owner)
    return draft.finish_set()


def _check_occlusion_of(  # noqa: PLR0917 - the patched zone's parts, one caller
    origin: str,
    apex: bytes,
    owners: frozenset[bytes],
    nodes: Mapping[bytes, bytes],
    children: Mapping[bytes, int],
    dnames: OwnerSet,
) -> None:
    """``tree.occluded`` for a zone where only ``owners`` changed: a changed owner
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

"""The name tree's bookkeeping, shared by a build and a patch: which names exist only for
what lies beneath them (empty non-terminals), how many names lie one label below each,
how many existing names are wildcards, and what a DNAME hides (RFC 6672 section 2.4)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping

from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import ZoneError, is_wildcard
from valis_core.dns.zone.owners import Counts, Names


def tree(
    apex: bytes, nodes: Mapping[bytes, bytes]
) -> tuple[set[bytes], dict[bytes, int], int]:
    """The empty non-terminals (names with no records of their own but something beneath
    them), for each name with something beneath it how many existing names lie one
    label below it, and how many existing names are wildcards. The apex always exists
    and is never an empty non-terminal."""
    empty: set[bytes] = set()
    children: dict[bytes, int] = {}
    wildcards = 0
    for owner in nodes:
        wildcards += appear(apex, owner, nodes, empty, children)
    return empty, children, wildcards


def appear(
    apex: bytes,
    owner: bytes,
    nodes: Container[bytes],
    empty: Names,
    children: Counts,
) -> int:
    """Account for ``owner`` coming into existence (it now has data and did not exist);
    return how many wildcard names came into existence with it."""
    added = int(is_wildcard(owner))
    name = owner
    while name != apex:
        up = wire.parent(name)
        children[up] = children.get(up, 0) + 1
        if up == apex or up in nodes or up in empty:
            break
        empty.add(up)
        added += is_wildcard(up)
        name = up
    return added


def vanish(
    apex: bytes,
    owner: bytes,
    nodes: Container[bytes],
    children: Counts,
    empty: Names,
) -> int:
    """Account for ``owner`` ceasing to exist (no data left, nothing beneath it); return
    how many wildcard names ceased to exist with it."""
    removed = int(is_wildcard(owner))
    name = owner
    while name != apex:
        up = wire.parent(name)
        left = children[up] - 1
        if left:
            children[up] = left
            break
        del children[up]
        if up == apex or up in nodes:
            break
        empty.discard(up)  # an empty non-terminal with nothing beneath it any more
        removed += is_wildcard(up)
        name = up
    return removed


def occluded(
    apex: bytes, nodes: Iterable[bytes], dnames: set[bytes]
) -> Iterator[tuple[bytes, bytes]]:
    """RFC 6672 section 2.4: nothing may exist beneath a DNAME, since it is never seen.
    Each owner of ``nodes`` that does, with the DNAME owner above it."""
    if not dnames:
        return
    for owner in nodes:
        name = owner
        while name != apex:
            name = wire.parent(name)
            if name in dnames:
                yield owner, name
                break


def refuse_occluded(origin: str, owner: bytes, dname: bytes) -> None:
    raise occlusion_error(origin, owner, dname)


def occlusion_error(origin: str, owner: bytes, dname: bytes) -> ZoneError:
    return ZoneError(
        origin,
        wire.to_text(owner),
        f"data beneath the DNAME at {wire.to_text(dname)} is never served "
        "(RFC 6672); remove it or the DNAME",
    )

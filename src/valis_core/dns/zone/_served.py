"""One served zone as the answer path reads it (``ServedZone``): frozen, and shared
between index versions (``ZoneIndex``, in ``_index``, holds them; ``build`` makes them and
``_patch`` makes a zone's next version from its last).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import attrs

from valis_core.dns.wire import names as wire
from valis_core.dns.zone.owners import OwnerMap, OwnerSet

PAST_PATCHES = 1024
"""How many of the patches before a version its ``Lineage`` remembers: what is derived
from a version is often brought up to date only when next asked for (a zone taking 50
changes a second, an NSEC3 chain asked for once in 20 seconds)."""
PAST_OWNERS = 1 << 16
"""How many replaced owners in all it remembers (a bulk change forgets the rest)."""


@attrs.frozen(eq=False)
class Lineage:
    """Where a zone version came from, for what is derived from one version and carried
    to the next (an NSEC3 chain, the kept answers, the compiled table): the lineage of
    the version it was patched from (``before``) and the owners that patch replaced,
    back to the last ``PAST_PATCHES`` patches (and ``PAST_OWNERS`` owners) at least. A
    built version remembers none. Marks are bare objects, so what holds a mark keeps no
    version alive; a lineage keeps only older lineages (marks and owners), no version.

    Why a chain: a patch costs O(1) however much is remembered (a tuple of every patch
    remembered, copied at each one, took 7.8 us a patch with 1 024 remembered, the
    chain 1.5 us). A chain that has grown to twice what is remembered is made again
    from its newest part (``_kept``): a thousand patches' work once every thousand
    patches, and what a version holds stays bounded."""

    before: Lineage | None = attrs.field(default=None, repr=False)  # a chain: not recursed
    """The lineage of the version this one was patched from; ``None``: built, or the
    oldest version remembered."""
    replaced: frozenset[bytes] = frozenset()
    """The owners the patch from ``before`` replaced."""
    patches: int = 0
    """The patches along ``before`` (what it holds, not what it remembers)."""
    owners: int = 0
    """The owners they replaced, in all."""
    mark: object = attrs.field(factory=object)

    def since(self, before: Lineage) -> frozenset[bytes] | None:
        """The owners replaced on the way from the version ``before`` is the lineage of
        to this one; ``None`` when this one does not remember it (another build, a
        branch of its own, or further back than it remembers)."""
        return self.since_mark(before.mark)

    def since_mark(self, before: object) -> frozenset[bytes] | None:
        """``since`` the version whose lineage's ``mark`` is ``before`` (a mark keeps
        no version alive, nor its patches' owners); newest first: most asked is the
        last swap."""
        if before is self.mark:
            return frozenset()
        found: list[frozenset[bytes]] = []
        for node in self._remembered():
            found.append(node.replaced)
            if node.before is not None and node.before.mark is before:
                return found[0] if len(found) == 1 else frozenset().union(*found)
        return None

    def patched(self, owners: frozenset[bytes]) -> Lineage:
        """The lineage of the version a patch of ``owners`` makes from this one."""
        lineage = Lineage(self, owners, self.patches + 1, self.owners + len(owners))
        if lineage.patches > 2 * PAST_PATCHES or lineage.owners > 2 * PAST_OWNERS:
            return lineage._kept()
        return lineage

    def _kept(self) -> Lineage:
        """This lineage made again of what it remembers (each version's mark kept), the
        older patches let go."""
        steps = list(self._remembered())
        oldest = steps[-1].before if steps else None
        made = Lineage(mark=self.mark if oldest is None else oldest.mark)
        for step in reversed(steps):
            made = Lineage(made, step.replaced, made.patches + 1,
                           made.owners + len(step.replaced), step.mark)
        return made

    def _remembered(self) -> Iterator[Lineage]:
        """The lineages along this one's chain whose patches it remembers, newest first
        (each stands for the patch from its ``before``): at most ``PAST_PATCHES``, and
        no more than ``PAST_OWNERS`` owners in all."""
        owners, node, count = 0, self, 0
        while node.before is not None and count < PAST_PATCHES:
            owners += len(node.replaced)
            if owners > PAST_OWNERS:
                return
            yield node
            count += 1
            node = node.before


_VERSIONS = itertools.count(1)


@attrs.frozen(eq=False)
class ServedZone:
    """One zone as the answer path reads it: frozen, and shared between index versions.

    ``nodes`` maps each owner (lowercased wire form) to its records, encoded as
    ``records`` says (read them with ``decode_node``); ``empty_nonterminals`` are names
    that exist only because something lies beneath them; ``cuts`` are delegation points
    (NS below the apex, including their own DS); ``dnames`` are DNAME owners.
    ``children`` counts, for every name with something beneath it, the names one label
    below it that exist (have data or are empty non-terminals), and ``wildcards`` how
    many existing names are wildcards: the bookkeeping that lets ``replace_owners``
    keep the empty non-terminals and ``has_wildcard`` right without walking the whole
    zone. All five are persistent tables (``owners``): the next version of a zone shares
    every shard of them its change did not touch, and no version is ever mutated.
    ``version`` tells this version apart from every other made in this process: what
    the answers kept across swaps are checked against (``answer._cache``).
    """

    origin: str
    apex: bytes
    nodes: OwnerMap[bytes]
    empty_nonterminals: OwnerSet
    cuts: OwnerSet
    dnames: OwnerSet
    soa: bytes
    negative_ttl: int
    children: OwnerMap[int]
    wildcards: int
    record_count: int
    lineage: Lineage = attrs.field(factory=Lineage)
    """The patches this version came by (``replace_owners`` extends it)."""
    has_wildcard: bool = attrs.field(init=False)
    version: int = attrs.field(init=False, factory=lambda: next(_VERSIONS))

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "has_wildcard", self.wildcards > 0)

    def exists(self, name: bytes) -> bool:
        """Whether ``name`` (lowercased wire form) exists in this zone, data or not."""
        nodes, ents = self.nodes, self.empty_nonterminals  # shards picked inline (owners)
        slot = hash(name)
        return name in nodes.shards[slot & nodes.mask] or (
            ents.size > 0 and name in ents.shards[slot & ents.mask]
        )

    def wildcard_covering(self, name: bytes) -> bytes | None:
        """The wildcard owner (``*.`` and the closest encloser, RFC 4592) that answers
        for ``name`` (lowercased wire form, at or below the apex), or ``None``: ``name``
        exists, lies at or beneath a delegation or DNAME, or no wildcard covers it."""
        if not self.has_wildcard or self.exists(name):
            return None
        encloser = wire.parent(name)
        while not self.exists(encloser) and len(encloser) > len(self.apex):
            encloser = wire.parent(encloser)
        source = b"\x01*" + encloser
        if not self.exists(source):
            return None
        above = encloser
        cuts, dnames = self.cuts, self.dnames
        while True:
            slot = hash(above)
            if above in cuts.shards[slot & cuts.mask] or above in dnames.shards[slot & dnames.mask]:
                return None
            if len(above) <= len(self.apex):
                return source
            above = wire.parent(above)

"""The zone index: every served zone's records, checked once and looked up by hash.

An index is built in one go from rows (``ZoneIndex.from_records``) or from RFC 1035
master files (``ZoneIndex.from_zone_text``) by ``build``, and never changes
afterwards; a reload builds a new index and the serve loop swaps it in whole.
``ZoneIndex.with_owners_replaced`` makes the new version of one zone from the old one by
replacing a few owners' records (``_patch``): its cost follows the owners changed,
not the size of the zone nor the number of zones, and its result is the index a full
build would give. ``ZoneIndex.with_zone`` puts one zone's new version (or a new zone)
in an index the same way.

Both ``ServedZone`` and ``ZoneIndex`` are immutable by construction: a zone knows nothing
of the index that serves it (the index keeps the map from each apex to the nearest
enclosing zone it serves, ``parent_of``, by looking), so one zone can be shared by any number of
index versions without a copy.

Names are compared case-insensitively: the index keys every owner by its lowercased
wire form, and answers carry owners in lowercase (the question itself is always echoed
exactly as asked). Rdata keeps the case it was given.

Every lookup the answer path makes is a probe of one dict (a shard of a persistent
owner table, ``owners``): the records of each owner, the empty non-terminals, the
delegation points and the DNAME owners are precomputed, so a query costs the same against
a million-record zone as against a ten-record one, and so does a change of one owner. To
keep a million records affordable, each owner's records are one ``bytes`` value (see
``records``).
"""

from __future__ import annotations

from collections.abc import Iterable

from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone._patch import replace_owners
from valis_core.dns.zone._served import ServedZone
from valis_core.dns.zone.build import Builder, read_master_into, zone_shape
from valis_core.dns.zone.owners import OwnerMap


class ZoneIndex:
    """Every served zone, immutable once built; ``zone_for`` finds the deepest one and
    ``parent_of`` the zone enclosing another.

    The zones are held by apex in a persistent ``OwnerMap``: ``with_zone`` and
    ``with_owners_replaced`` make the next index sharing every shard of it, and the
    sorted zone names too while the set of zones is the same, so one zone's change costs
    the index O(1) zones, however many it serves.

    The answer path's cache of encoded responses is not here: it belongs to the
    ``Snapshot`` serving this index (``valis_core.dns.answer.snapshot``).
    """

    __slots__ = ("__weakref__", "_by_apex", "_origins", "_record_count")

    def __init__(self, zones: Iterable[ServedZone], record_count: int) -> None:
        """Combine built zones (from this or other indexes: a zone belongs to none) into
        one index. The ``from_*`` constructors are the usual way in."""
        self._by_apex: OwnerMap[ServedZone] = OwnerMap({zone.apex: zone for zone in zones})
        self._origins = tuple(sorted(zone.origin for zone in self._by_apex.values()))
        self._record_count = record_count

    @classmethod
    def _made(
        cls, by_apex: OwnerMap[ServedZone], origins: tuple[str, ...], record_count: int
    ) -> ZoneIndex:
        index = cls.__new__(cls)
        index._by_apex = by_apex
        index._origins = origins
        index._record_count = record_count
        return index

    @classmethod
    def from_records(cls, rows: Iterable[RecordRow]) -> ZoneIndex:
        """Index rows spanning any number of zones; raise ``ZoneError`` on the first
        zone that cannot be served."""
        builder = Builder()
        for row in rows:
            builder.add_row(row)
        return cls(*builder.finish())

    @classmethod
    def from_zone_text(cls, text: str, origin: str | None = None) -> ZoneIndex:
        """Index one RFC 1035 master file (see ``parse_zone_text`` for ``origin``)."""
        return cls.from_zone_texts([(text, origin)])

    @classmethod
    def from_zone_texts(cls, sources: Iterable[tuple[str, str | None]]) -> ZoneIndex:
        """Index several master files, one zone each, as ``(text, origin)`` pairs."""
        builder = Builder()
        for text, origin in sources:
            read_master_into(text, origin, builder.add_wire)
        return cls(*builder.finish())

    def with_owners_replaced(
        self, zone: str, owners: Iterable[str], rows: Iterable[RecordRow]
    ) -> ZoneIndex:
        """A new index with ``owners`` (absolute names) of the served ``zone`` holding
        exactly ``rows``; the other zones are shared. Raises ``ZoneError`` if the result
        cannot be served, exactly when building the whole changed zone would,
        ``ValueError`` for a row of another zone or of an owner not listed, and
        ``KeyError`` for a zone this index does not serve. This index is left as it
        was."""
        apex = zone_shape(zone)[0]
        old = self._by_apex.get(apex)
        if old is None:
            raise KeyError(zone)
        keys = []
        for owner in owners:
            try:
                keys.append(wire.from_text(owner).lower())
            except wire.BadName as exc:
                raise ZoneError(old.origin, owner, f"bad owner name: {exc}") from None
        return self.with_zone(replace_owners(old, frozenset(keys), rows))

    def with_zone(self, zone: ServedZone) -> ZoneIndex:
        """A new index serving ``zone`` in place of the zone of its apex (or beside the
        others, if none is served there); every other zone is shared, and this index is
        left as it was. Costs O(1) zones, and O(zones) only when one is added."""
        old = self._by_apex.get(zone.apex)
        if old is zone:
            return self
        draft = self._by_apex.draft()
        draft[zone.apex] = zone
        origins = self._origins
        count = self._record_count + zone.record_count
        if old is None:
            origins = tuple(sorted((*origins, zone.origin)))
        else:
            count -= old.record_count
        return ZoneIndex._made(draft.finish_map(), origins, count)

    @property
    def zones(self) -> tuple[str, ...]:
        """The served zones' names, lowercase with a trailing dot, sorted."""
        return self._origins

    @property
    def record_count(self) -> int:
        """How many distinct records are served (duplicates in the input count once)."""
        return self._record_count

    def served(self) -> tuple[ServedZone, ...]:
        """Every served zone."""
        return tuple(self._by_apex.values())

    def parent_of(self, zone: ServedZone) -> ServedZone | None:
        """The nearest zone enclosing ``zone`` that this index also serves (found by
        looking, so it follows every version of the zones above)."""
        if zone.apex == wire.ROOT:
            return None
        return self.zone_for(wire.parent(zone.apex))

    def changed_from(self, older: ZoneIndex) -> frozenset[bytes]:
        """The apexes (lowercased wire form) whose zone is not the very same version in
        ``older`` and here: changed, added or dropped. What a cache of answers kept
        across a swap from ``older`` to this index must forget (and only that).

        O(zones changed) when one index was made from the other (``with_zone``,
        ``with_owners_replaced``, any number of steps apart: they share the shards of
        the zones neither changed); O(zones) for indexes built apart."""
        if older is self:
            return frozenset()
        return frozenset(self._by_apex.differing(older._by_apex))

    def zone_for(self, name: bytes) -> ServedZone | None:
        """The deepest served zone at or above ``name`` (lowercased wire form)."""
        zones = self._by_apex
        shards, mask = zones.shards, zones.mask  # the shard picked inline: a hot loop
        one = shards[0]  # the only shard of an index of fewer than SHARD_OWNERS zones
        i = 0
        while True:
            suffix = name[i:]
            zone: ServedZone | None = (shards[hash(suffix) & mask] if mask else one).get(suffix)
            if zone is not None:
                return zone
            if not name[i]:
                return None
            i += name[i] + 1

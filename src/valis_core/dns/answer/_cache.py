"""The encoded responses a snapshot answers from (``ResponseCache``), what a holder's
snapshots keep across swaps (``Kept``), and their bounds.

A swap changes a few zones; every answer read only from zones it did not change stays
right. So each response found is kept twice: in the snapshot's own ``ResponseCache``,
read first and as before (one dictionary probe, whatever swapped since), and in the
``Kept`` every snapshot of one ``IndexHolder`` shares, beside the zone versions it was
read from (each name the lookup asked ``ZoneIndex.zone_for``, and the version of the zone
it got, ``ServedZone.version``: a number, so an old version is never kept alive by its
answers). A
question a snapshot's own cache lacks is looked up there, and its kept answer taken
when every one of those lookups gives the very same zone version in this snapshot's
index (``fresh``): a swap costs nothing, and no answer is ever taken for another
version, an older snapshot still answering (a TCP answer in flight) included. An answer
depends on more than its question's zone (a CNAME or DNAME chain into another served
zone, a DS at a child apex answered from the parent, a chain leaving the served zones
that a zone added later would catch): each lookup is noted (``Reading``), so each such
zone is checked, and a zone added or dropped beneath a lookup's name changes what
``zone_for`` gives for it.

Inside a changed zone most answers still stand: a change of one host leaves every other
host's address as it was. An unsigned answer whose lookups all gave one zone, and that
found only names present there (no denial, no wildcard: those read names that do not
exist), notes the names it read (``Reading.reads``: each name looked up, each name
whose records it asked for, found or not). A later version of that zone takes it
(``KeptAnswers.still``) when the patches between them (``Lineage.since_mark``) replaced
none of those names nor an ancestor of one beneath the apex (``untouched``): those are
all a lookup of a present name reads (its records, a delegation or DNAME above it). The
apex only counts as a name read: its SOA serial moves with every change, so the answers
that carry the SOA (denials) or read the apex are made again.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Protocol

from valis_core.dns.answer.message import Entry
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import DS
from valis_core.dns.zone import ServedZone, ZoneIndex

CACHE_ENTRIES = 65536
"""Encoded responses kept per snapshot, and kept across swaps (least recently used go
first)."""

NEGATIVE_ENTRIES = 4096
"""Prebuilt negative answers kept: one per zone version, RCODE and offset of the zone's
apex in the question; past this many (thousands of zones) they are built afresh."""

Names = tuple[bytes, ...]
"""The names an answer's lookups asked of ``ZoneIndex.zone_for`` (``parent_of`` is
``zone_for`` of the apex's parent), in order."""

Versions = tuple[int, ...]
"""The version of the zone each of those lookups gave (``ServedZone.version``; 0: no
served zone)."""

Kept = tuple[Entry, Names, Versions, tuple[object, ...] | None, object, Names | None]
"""A response kept across swaps: the entry, the lookups it was read through, for a
signed answer how each of those zones was signed (``signed.signing_of``; ``None`` for
an unsigned one), and for an unsigned answer read inside the one zone all its lookups
gave, the ``Lineage.mark`` of the version it was read from and the names it read there
(each name looked up, each name whose records it asked for, found or not; ``None``,
``None``: taken only by that very zone version). Only bytes, numbers and a bare mark:
the collector never follows it, and it keeps no zone version alive."""

SINCE_KEPT = 1024
"""Owners changed between two versions of a zone, remembered (``KeptAnswers.changed``)."""


class Zones(Protocol):
    """What the answer path asks of a zone index while it finds an answer."""

    def zone_for(self, name: bytes) -> ServedZone | None: ...

    def parent_of(self, zone: ServedZone) -> ServedZone | None: ...


class Reading:
    """A zone index as one answer reads it, its lookups noted (``kept``)."""

    __slots__ = ("index", "names", "reads", "zones")

    def __init__(self, index: ZoneIndex, qname: bytes, zone: ServedZone | None,
                 parent: bool) -> None:
        """Begin with the lookup that found ``zone`` for ``qname`` and, with ``parent``
        (DS at its apex), the one that found the zone above it."""
        self.index = index
        self.names = [qname]
        self.zones = [zone]
        self.reads: Names | None = None
        """The names the answer read inside its zone beyond those it looked up
        (``_lookup.resolve`` says, for an unsigned answer that read only names present
        there); ``None``: not known."""
        if parent and zone is not None:
            self.parent_of(zone)

    @classmethod
    def question(cls, index: ZoneIndex, qname: bytes, qtype: int) -> Reading:
        """The lookups that find the zone answering ``qname`` and ``qtype`` (for DS at
        an apex, the parent's), as the answer path finds it."""
        zone = index.zone_for(qname)
        return cls(index, qname, zone, zone is not None and qtype == DS and qname == zone.apex)

    def zone_for(self, name: bytes) -> ServedZone | None:
        zone = self.index.zone_for(name)
        self.names.append(name)
        self.zones.append(zone)
        return zone

    def parent_of(self, zone: ServedZone) -> ServedZone | None:
        parent = self.index.parent_of(zone)
        if zone.apex != wire.ROOT:  # the root's parent is none, whatever is served
            self.names.append(wire.parent(zone.apex))
            self.zones.append(parent)
        return parent

    def kept(self, entry: Entry, signing: tuple[object, ...] | None) -> Kept:
        """``entry`` as kept, with what it read inside its zone when every lookup gave
        one zone and ``reads`` is known."""
        zones = self.zones
        first = zones[0]
        reads = self.reads
        if len(zones) == 1:  # most answers: one lookup, one zone
            names: Names = (self.names[0],)
            if reads is None or first is None:
                return entry, names, (0 if first is None else first.version,), signing, \
                    None, None
            return entry, names, (first.version,), signing, first.lineage.mark, \
                names + reads if reads else names
        names = tuple(self.names)
        versions = tuple([0 if zone is None else zone.version for zone in zones])
        if reads is None or first is None or not all(zone is first for zone in zones):
            return entry, names, versions, signing, None, None
        return entry, names, versions, signing, first.lineage.mark, names + reads


def fresh(names: Names, versions: Versions, index: ZoneIndex) -> bool:
    """Whether every lookup noted gives the very same zone version in ``index``: then the
    answer found through them is ``index``'s answer too."""
    for name, version in zip(names, versions, strict=True):
        zone = index.zone_for(name)
        if (0 if zone is None else zone.version) != version:
            return False
    return True


def untouched(reads: Names, changed: frozenset[bytes], apex: bytes) -> bool:
    """Whether no owner in ``changed`` is a name in ``reads`` or an ancestor of one
    beneath ``apex``: the names whose records, delegation or DNAME a lookup of those
    names reads (``_lookup.find``, ``held_in_zone``). The apex itself only as a name
    read: its SOA changes with every change, and a DNAME there would occlude every name
    beneath it, which a zone refuses (``tree.refuse_occluded``)."""
    size = len(apex)
    for name in reads:
        if name in changed:
            return False
        above = name
        while len(above) > size:
            above = wire.parent(above)
            if len(above) > size and above in changed:
                return False
    return True


def reach(held: Kept, index: ZoneIndex) -> tuple[bytes, ...] | None:
    """What ``held`` read inside its zone as the compiled table keeps it (``Table.put``'s
    reads): each name it read and each ancestor of one beneath the apex, the names whose
    change ``untouched`` looks for; ``None`` unless ``held`` is known to have read only
    inside the zone ``index`` gives for it, at that zone's version."""
    mark, reads = held[4], held[5]
    if reads is None:
        return None
    zone = index.zone_for(held[1][0])
    if zone is None or zone.lineage.mark is not mark:
        return None
    size = len(zone.apex)
    names: list[bytes] = []
    for name in reads:
        if name not in names:
            names.append(name)
        above = name
        while len(above) > size:
            above = wire.parent(above)
            if len(above) > size and above not in names:
                names.append(above)
    return tuple(names)


def dependencies(names: Names, index: ZoneIndex) -> tuple[bytes, ...]:
    """The apexes of the zones an answer's lookups give in ``index`` (``b""``: a lookup
    finds none), each once: what the compiled table ties an entry to."""
    apexes: list[bytes] = []
    for name in names:
        zone = index.zone_for(name)
        apex = b"" if zone is None else zone.apex
        if apex not in apexes:
            apexes.append(apex)
    return tuple(apexes)


class KeptAnswers:
    """What every snapshot of one holder shares across swaps: the responses found, each
    with the lookups it was read through (``answers``), and the zones' negative answers
    by (apex, RCODE, offset), each with the zone version it was made from
    (``negatives``)."""

    __slots__ = ("__weakref__", "answers", "negatives", "since")

    def __init__(self) -> None:
        self.answers: collections.OrderedDict[bytes, Kept] = collections.OrderedDict()
        self.negatives: dict[tuple[bytes, int, int], tuple[int, Entry]] = {}
        self.since: dict[tuple[int, object], frozenset[bytes] | None] = {}

    def take(
        self, key: bytes, index: ZoneIndex,
        signing: Callable[[list[ServedZone | None]], tuple[object, ...]] | None = None,
    ) -> Entry | None:
        """The response kept for ``key`` if it is ``index``'s too: an unsigned one, or
        with ``signing`` (how the signer now signs each zone it was read from) a signed
        one made by a signer that signed them the same."""
        held = self.answers.get(key)
        if held is None or (held[3] is None) != (signing is None):
            return None
        if not fresh(held[1], held[2], index):
            now = None if signing is not None else self.still(held, index)
            if now is None:
                return None
            self.answers[key] = held = now  # fresh for this version from now on
        if signing is not None and held[3] != signing([index.zone_for(n) for n in held[1]]):
            return None
        self.touch(key)
        return held[0]

    def still(self, held: Kept, index: ZoneIndex) -> Kept | None:
        """``held`` made fresh for ``index`` when its zone moved on by patches that
        changed nothing it read (``untouched``): every lookup still gives one zone,
        whose lineage remembers the version it was read from (so a version of the same
        zone: a lineage is a zone's own)."""
        mark, reads = held[4], held[5]
        if reads is None:
            return None
        names = held[1]
        zone = index.zone_for(names[0])
        if zone is None:
            return None
        apex = zone.apex
        if zone.dnames.size and apex in zone.dnames:
            return None
        for name in names[1:]:
            if index.zone_for(name) is not zone:
                return None
        lineage = zone.lineage
        if mark is not lineage.mark and lineage.before is not None \
                and not untouched(reads, lineage.replaced, apex):
            # The last patch replaced what it read: touched, whatever came before (an
            # answer at an owner just changed, asked again at once: ``_answered_again``),
            # without the union of every patch since its version.
            return None
        changed = self.changed(zone, mark)
        if changed is None or not untouched(reads, changed, apex):
            return None
        return held[0], names, (zone.version,) * len(names), None, zone.lineage.mark, reads

    def changed(self, zone: ServedZone, mark: object) -> frozenset[bytes] | None:
        """The owners replaced since the version of ``zone``'s apex whose lineage's mark
        is ``mark`` (``Lineage.since_mark``), remembered: every answer kept from that
        version asks the same."""
        key = (zone.version, mark)
        since = self.since
        if key in since:
            return since[key]
        changed = zone.lineage.since_mark(mark)
        if len(since) >= SINCE_KEPT:
            since.clear()
        since[key] = changed
        return changed

    def touch(self, key: bytes) -> None:
        try:  # noqa: SIM105 - as the response cache: least recently used go first
            self.answers.move_to_end(key)
        except KeyError:  # evicted meanwhile by a caller on another thread
            pass

    def keep(self, key: bytes, kept: Kept) -> None:
        answers = self.answers
        answers[key] = kept
        if len(answers) > CACHE_ENTRIES:
            try:  # noqa: SIM105 - contextlib.suppress costs more per miss
                answers.popitem(last=False)
            except KeyError:  # emptied meanwhile by a caller on another thread
                pass

    def negative(self, zone: ServedZone, rcode: int, at: int) -> Entry | None:
        held = self.negatives.get((zone.apex, rcode, at))
        if held is None or held[0] != zone.version:
            return None
        return held[1]

    def keep_negative(self, zone: ServedZone, rcode: int, at: int, entry: Entry) -> None:
        negatives = self.negatives
        if len(negatives) >= NEGATIVE_ENTRIES:
            negatives.clear()
        negatives[(zone.apex, rcode, at)] = (zone.version, entry)


class ResponseCache(collections.OrderedDict[bytes, Entry]):
    """One snapshot's encoded responses, keyed by question (the answer path's first
    probe), and the ``KeptAnswers`` it shares with the holder's other snapshots."""

    def __init__(self, kept: KeptAnswers | None = None) -> None:
        super().__init__()
        self.kept = KeptAnswers() if kept is None else kept

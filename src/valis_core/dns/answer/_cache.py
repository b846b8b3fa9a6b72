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

Kept = tuple[Entry, Names, Versions, tuple[object, ...] | None]
"""A response kept across swaps: the entry, the lookups it was read through, and for a
signed answer how each of those zones was signed (``signed.signing_of``); ``None`` for
an unsigned one. Only bytes and numbers (an unsigned one): the collector never follows
it, and it keeps no zone version alive."""


class Zones(Protocol):
    """What the answer path asks of a zone index while it finds an answer."""

    def zone_for(self, name: bytes) -> ServedZone | None: ...

    def parent_of(self, zone: ServedZone) -> ServedZone | None: ...


class Reading:
    """A zone index as one answer reads it, its lookups noted (``kept``)."""

    __slots__ = ("index", "names", "zones")

    def __init__(self, index: ZoneIndex, qname: bytes, zone: ServedZone | None,
                 parent: bool) -> None:
        """Begin with the lookup that found ``zone`` for ``qname`` and, with ``parent``
        (DS at its apex), the one that found the zone above it."""
        self.index = index
        self.names = [qname]
        self.zones = [zone]
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
        zones = self.zones
        if len(zones) == 1:  # most answers: one lookup, one zone
            zone = zones[0]
            return entry, (self.names[0],), (0 if zone is None else zone.version,), signing
        versions = tuple([0 if zone is None else zone.version for zone in zones])
        return entry, tuple(self.names), versions, signing


def fresh(names: Names, versions: Versions, index: ZoneIndex) -> bool:
    """Whether every lookup noted gives the very same zone version in ``index``: then the
    answer found through them is ``index``'s answer too."""
    for name, version in zip(names, versions, strict=True):
        zone = index.zone_for(name)
        if (0 if zone is None else zone.version) != version:
            return False
    return True


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

    __slots__ = ("__weakref__", "answers", "negatives")

    def __init__(self) -> None:
        self.answers: collections.OrderedDict[bytes, Kept] = collections.OrderedDict()
        self.negatives: dict[tuple[bytes, int, int], tuple[int, Entry]] = {}

    def take(
        self, key: bytes, index: ZoneIndex,
        signing: Callable[[list[ServedZone | None]], tuple[object, ...]] | None = None,
    ) -> Entry | None:
        """The response kept for ``key`` if it is ``index``'s too: an unsigned one, or
        with ``signing`` (how the signer now signs each zone it was read from) a signed
        one made by a signer that signed them the same."""
        held = self.answers.get(key)
        if held is None or (held[3] is None) != (signing is None) \
                or not fresh(held[1], held[2], index):
            return None
        if signing is not None and held[3] != signing([index.zone_for(n) for n in held[1]]):
            return None
        self.touch(key)
        return held[0]

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

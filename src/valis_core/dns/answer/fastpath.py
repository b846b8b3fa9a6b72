"""The compiled UDP fast path: whether this build has it, and the table it answers from.

A Python server pays a few microseconds of interpreter work per datagram before any
answering starts: a socket call in, a socket call out, the header checks. The C
extension ``valis_core.dns.answer._fastpath`` (source ``_fastpath.c``, built by ``setup.py``
when ``make venv`` installs the package and by ``make build`` in the tree it freezes)
takes that work for the common case. Its ``Pump`` receives a batch with one
``recvmmsg``, answers in C every query the ``Table`` can answer that takes the plain path
(class IN, at most one OPT of version 0 with whole options, no TSIG, neither AXFR nor
IXFR), hands the others back to ``answer``, and sends the whole batch with one
``sendmmsg``.

The table answers two kinds of question, each with the very entry ``answer`` keeps:

- one ``answer`` holds in the snapshot's response cache (copied in by ``learn`` after
  Python answered the question once);
- a flood's question (a random name, a random type at a name that exists), whose
  lookup ends at once in NXDOMAIN or NODATA: C reads the zone's own ``nodes`` and
  empty non-terminals (``table_for`` hands over the shards of these persistent tables,
  ``zone.owners``; C picks the shard by the key's Python hash), and answers with the zone's
  prebuilt negative answer (``learn`` copies it in the first time). It does so only where
  that is provably ``answer``'s answer: never for DS or ANY, never at or beneath a
  delegation or DNAME (C then hands the question back), never a missing name in a zone
  with a wildcard.

On a node signing some zones (the snapshot has a signer) the table knows how each zone
is signed, and C answers only what the signer leaves to the unsigned path, whose bytes
are the entries it holds (``signed.Signer.entry`` decides): any question to a
zone not signed, whatever its DO bit, and a question with DO=0 to a zone signed here,
except DNSKEY, CDS, CDNSKEY and NSEC3PARAM at its apex (the signer's data whatever the
DO bit). DO=1 to a signed zone, DS at an apex (the parent's zone decides), and every
question to a zone signed without its key here (SERVFAIL) go to Python.

A table answers for one snapshot at a time, and so for one signer (a snapshot's signer
never changes; a signing change makes a new snapshot). The UDP loops serving one
holder's snapshots (a socket each: IPv4, IPv6, each address) share one table
(``shared_table``), made for the first snapshot they serve; what one socket's queries
taught it answers the others'. When they move to a new snapshot the table moves with
them, in what the swap changed: each zone whose version (or signing) differs is
dropped and given again, added or dropped (``Table.drop``, ``Table.zone``; and
``Table.enclosing`` for the zone above one added or dropped); a zone whose new version
came from the old by patches moves in place instead (``Table.moved``), and each entry
read from it alone that read none of the owners replaced (``_cache.reach``, kept with
the entry by ``put``) stays. In the same write the zone's NXDOMAIN and NODATA answers
the table was taught are given again (the new version's, each RCODE and offset: a move
forgets them, since the SOA they carry moves with every change), and once the write is
done the changed owners' own questions asked lately are answered again by ``answer``
and learnt (``_answered_again``, at most ``ANSWERED_AGAIN``): a steady stream of
changes then hands C's questions to Python only for answers that read a changed owner
from elsewhere (a CNAME to it, an MX naming it). Each entry C holds
remembers the zones it was read from (``learn`` hands it the lookups ``answer`` kept it
with: ``_cache``), and one whose zone moved on is a miss, so a table never gives an
answer of another version, and a swap costs what it changed, never a refill. It is
bounded like the response cache (``CACHE_ENTRIES``; full, it is emptied and fills
again).

On N cores (``serve_udp``'s workers) a worker thread answers from the shared table
with the GIL released (``Pump.serve``): each change to a table is a write under one
readers' lock of batch granularity (``_fastpath.c``: a writer, holding the GIL, waits
for the batches under way; a swap's several changes are one write, ``writing``), and a
table replaced by a new one is retired, so a worker never reads a table half moved nor
one no longer served. The trio thread stays the only writer.

``answer`` stays the reference: ``tests/property/test_fastpath.py`` checks that what C
answers is byte for byte what ``answer`` gives. Without the extension (the package
imported from a tree nobody built) the server serves on the pure-Python path, slower,
and says so once in its log.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import attrs

from valis_core.dns.answer._answer import Transport, answer
from valis_core.dns.answer._cache import (
    CACHE_ENTRIES,
    KeptAnswers,
    ResponseCache,
    dependencies,
    reach,
)
from valis_core.dns.answer._lookup import negative_entry
from valis_core.dns.wire.records import SOA, decode_node, node_without
from valis_core.dns.zone.owners import OwnerSet

if TYPE_CHECKING:
    from valis_core.dns.answer._fastpath import Pump, Table, Wanted
    from valis_core.dns.answer.signed import Signer
    from valis_core.dns.answer.snapshot import Snapshot
    from valis_core.dns.zone import ServedZone, ZoneIndex

__all__ = [
    "COMPILED",
    "SERVING_SLICE_NS",
    "SIGNED",
    "SIGNED_ELSEWHERE",
    "UNSIGNED",
    "Pump",
    "Table",
    "learn",
    "path_name",
    "pump",
    "shared_table",
    "stream_server",
    "table_for",
    "tell_once",
    "time_slice",
    "writing",
]
"""The compiled types (``Pump``, ``Table``) are named for annotations; ``pump`` and
``table_for`` make them."""

log = logging.getLogger("valis_core.dns.fastpath")  # the name it logged under before the rooms

UNSIGNED, SIGNED, SIGNED_ELSEWHERE = 0, 1, 2
"""How the table is told a zone is signed: not at all, here with its key, or without its
key here (``_fastpath.c``'s ``signing``)."""

try:
    import valis_core.dns.answer._fastpath  # noqa: F401 - whether it loads is the question
except ImportError:  # not built: the pure-Python path serves
    COMPILED = False
else:
    COMPILED = True
"""Whether the compiled UDP fast path is in this build."""

def path_name() -> str:
    """Which path serves UDP in this build, as ``valis selftest`` reports it."""
    return "compiled" if COMPILED else "pure Python (the compiled helper is not built)"


@functools.cache
def tell_once() -> None:
    """Log, once per process, that UDP is served on the slower pure-Python path."""
    if COMPILED:
        return
    log.warning(
        "the compiled UDP fast path (valis_core.dns.answer._fastpath) is not built: UDP is served "
        "on the pure-Python path, correct but at more CPU per query; `make venv` (or "
        "`pip install -e .`) builds it"
    )


def pump(fd: int, batch: int) -> Pump:
    """The compiled pump over the UDP socket ``fd``, ``batch`` datagrams a call (call only
    when ``COMPILED``)."""
    from valis_core.dns.answer._fastpath import Pump

    return Pump(fd, batch)


STREAM_WAIT, STREAM_MISS, STREAM_TURN, STREAM_EOF, STREAM_STALLED, STREAM_FAILED = range(6)
"""How ``stream_serve`` (``_fastpath.c``'s TCP section) gave a connection back: nothing
whole buffered and nothing to read now; the first buffered message is Python's; its
turn's messages answered; the peer closed; responses left to write; the connection
failed."""


def stream_server() -> Callable[
    [int, Table, bytes, int, int, list[int], bool], tuple[int, int, bytes, bytes, bytes | None]
]:
    """The compiled TCP connection server (``_fastpath.c``'s ``stream_serve``: a
    connection's queries the table holds answered with the GIL released, the connection
    given back at the first it cannot answer); call only when ``COMPILED``."""
    from valis_core.dns.answer._fastpath import stream_serve

    return stream_serve


def table_for(snapshot: Snapshot) -> Table | None:
    """An empty table for ``snapshot``, knowing every one of its zones and how its signer
    signs each (call only when ``COMPILED``); ``None`` if one cannot be made (out of
    memory): C must never answer from a table missing a zone, so then Python answers
    everything for this snapshot."""
    from valis_core.dns.answer._fastpath import Table

    try:
        return _filled(Table(CACHE_ENTRIES), snapshot)
    except MemoryError:
        log.warning("no memory for the UDP fast path's table: this zone version is "
                    "answered on the pure-Python path")
        return None


@attrs.define(eq=False)
class _Shared:
    """A holder's table and the version it answers for (its snapshot's index and signer,
    not the snapshot: a table keeps no snapshot alive)."""

    table: Table | None
    index: ZoneIndex
    signer: Signer | None
    negatives: dict[bytes, set[tuple[int, int]]] = attrs.field(factory=dict)
    """The negative answers ``table`` was taught (``learn``), as RCODE and offset by
    zone apex: what a move gives again (``_negatives_again``)."""


_SHARED: weakref.WeakKeyDictionary[KeptAnswers, _Shared] = weakref.WeakKeyDictionary()
"""The table of each holder still served, by what its snapshots keep across swaps."""


SERVING_SLICE_NS = 100_000
"""The time slice a serving process asks the kernel for, on its main thread (the trio
thread) before it starts any other, so that every thread inherits it (``time_slice``).
On a core shared by the trio thread (transfers, a patch) and a UDP worker, a datagram's
arrival wakes the worker; under EEVDF (Linux 6.12 on) the running thread keeps the core
until its slice ends (1.4 ms by default here), which the answer waited for. Measured in
``benchmarks/fleet_fanout.py``: the UDP p99 during a fan-out fell from 8.4x idle to
2.5-3.7x; with the trio thread alone on short slices (the workers on the default) it
stayed at 11.7x, and the normal mix's q/s under 50 changes a second did not move
(``benchmarks/live rate``, alternating runs). Needs no privilege; older kernels ignore
it."""


def time_slice(ns: int) -> bool:
    """Ask the kernel for ``ns``-nanosecond time slices (0: its default) for the calling
    thread and every thread it starts later; whether it took them (``False`` too when not
    ``COMPILED``)."""
    if not COMPILED:
        return False
    from valis_core.dns.answer._fastpath import time_slice as asked

    return asked(ns)


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """The changes to tables made inside are one write: no UDP worker reads a table
    while it is under way (``_fastpath.c``'s readers' lock; each single change is a write
    of its own anyway). Call only when ``COMPILED``, on the writer's thread."""
    from valis_core.dns.answer._fastpath import write_begin, write_end

    write_begin()
    try:
        yield
    finally:
        write_end()


def shared_table(snapshot: Snapshot) -> Table | None:
    """The table of ``snapshot``'s holder, answering for ``snapshot``: made by the first
    UDP loop that serves the holder and shared by the others (and by its workers, which
    read it without the GIL: ``Pump.serve``), moved to each new snapshot by what changed
    (``_moved``) in one write, so a worker answers from one version or the next, never
    from a table half moved; gone with the holder. Called on the writer's thread only
    (the trio thread): at each swap when workers serve (``IndexHolder.watch``), and by
    the loops when they see a new snapshot. A table replaced by a new one is retired:
    a worker still holding it answers nothing more from it."""
    kept = snapshot.cache.kept
    shared = _SHARED.get(kept)
    if shared is None:
        table = table_for(snapshot)
        _SHARED[kept] = _Shared(table, snapshot.index, snapshot.signer)
        return table
    if shared.index is not snapshot.index or shared.signer is not snapshot.signer:
        patched: list[tuple[ServedZone, frozenset[bytes]]] = []
        with writing():
            old = table = shared.table
            if table is None or not _moved(table, shared, snapshot, patched):
                table = table_for(snapshot)  # from nothing: no table rather than a wrong one
                patched.clear()
                shared.negatives.clear()
            if old is not None and old is not table:
                old.retire()
            shared.table, shared.index, shared.signer = table, snapshot.index, snapshot.signer
        if table is not None:
            for zone, owners in patched:
                _answered_again(table, snapshot, zone, owners)
    return shared.table


def _moved(table: Table, shared: _Shared, snapshot: Snapshot,
           patched: list[tuple[ServedZone, frozenset[bytes]]]) -> bool:
    """Move ``table`` from the version ``shared`` names to ``snapshot``'s: each zone that
    differs (its version or its signing) dropped and given again, added, or dropped (or
    moved in place: ``_patched``; each such zone's new version and the owners replaced
    since the table's added to ``patched``); ``False`` when that failed (the table is then of
    no version: made again)."""
    index, signer = snapshot.index, snapshot.signer
    changed = set(index.changed_from(shared.index))
    if signer is not shared.signer:
        before = {} if shared.signer is None else shared.signer.zones
        after = {} if signer is None else signer.zones
        changed.update(apex for apex in before.keys() | after.keys()
                       if _signing(shared.signer, apex) != _signing(signer, apex))
    try:
        for apex in changed:
            held = shared.index.zone_for(apex)
            was = held is not None and held.apex == apex
            zone = index.zone_for(apex)
            if zone is not None and zone.apex != apex:
                zone = None
            if held is not None and was and zone is not None \
                    and _signing(shared.signer, apex) == _signing(signer, apex) \
                    and _patched(table, held, zone, snapshot.cache, patched,
                                 negatives=shared.negatives.get(apex)):
                continue
            shared.negatives.pop(apex, None)
            if was:
                table.drop(apex)
            if zone is not None and not _zone_into(table, zone, signer):
                return False
            if was != (zone is not None):
                table.enclosing(apex)
    except (MemoryError, KeyError, ValueError, TypeError):
        log.warning("the UDP fast path's table could not follow a swap: it is made again")
        return False
    return True


MOVED_OWNERS = 64
"""Past this many owners replaced since the table's version of a zone, the zone is dropped
and given again rather than moved (``Table.moved`` marks stale the entries that read
each owner, found through the names each entry read)."""


def _patched(table: Table, held: ServedZone, zone: ServedZone, cache: ResponseCache,
             patched: list[tuple[ServedZone, frozenset[bytes]]], *,
             negatives: set[tuple[int, int]] | None) -> bool:
    """Move ``held`` to ``zone``, its later version by patches (``Lineage``), keeping the
    entries that read none of the owners they replaced (``Table.moved``), and give it
    again the negative answers it was taught (``negatives``: ``_negatives_again``), and
    add the zone and the owners replaced to ``patched`` when an entry was read from it
    (``Table.reading``); ``False``: not so related
    (rebuilt, or further back than its lineage remembers), or a DNAME at its apex (which
    ``_cache.untouched`` leaves to the drop)."""
    owners = zone.lineage.since(held.lineage)
    if owners is None or len(owners) > MOVED_OWNERS or (
            zone.dnames.size and zone.apex in zone.dnames):
        return False
    nodes, ents, interrupts = _tables(zone)
    apex = zone.apex
    # A zone no entry was read from since the table was emptied (one not asked about:
    # most zones of a node, at any moment) has no entry for the move to keep, and no
    # kept answer at its owners to answer again: its move skips both.
    reading = table.reading(apex)
    soa_only = (apex,) if reading and apex in owners and _soa_alone_moved(held, zone) else ()
    table.moved(apex, nodes, ents, interrupts, zone.has_wildcard,
                tuple(owner for owner in owners if owner not in soa_only), soa_only)
    if negatives:
        _negatives_again(table, negatives, zone, cache)
    if reading:
        patched.append((zone, owners))
    return True


def _soa_alone_moved(held: ServedZone, zone: ServedZone) -> bool:
    """Whether the apex of ``zone`` holds what it held in ``held`` but for its SOA
    record (the serial a change raises with every change): the entries that read the
    apex but hold no SOA are then kept across the move (``Table.moved``'s
    ``soa_only``)."""
    before, now = held.nodes.get(held.apex), zone.nodes.get(zone.apex)
    return before is not None and now is not None and (
        node_without(before, SOA) == node_without(now, SOA))


ANSWERED_AGAIN = 16
"""At most this many questions at a patch's changed owners are answered again after a
move (``_answered_again``)."""


def _answered_again(table: Table, snapshot: Snapshot, zone: ServedZone,
                    owners: frozenset[bytes]) -> None:
    """Answer again, now, the questions at the changed ``owners`` of ``zone`` (each type
    an owner holds in the new version) asked lately (an unsigned answer kept for it:
    ``KeptAnswers``, of any version), and let ``table`` learn them, as the serve
    loop would at each one's next miss (``answer``, then ``learn``: the very same path):
    an apex whose SOA moved with every change, a host just changed, asked again and
    again, then cost no question handed from C to Python each. At most
    ``ANSWERED_AGAIN``; a question the table answers already is left as it is."""
    kept, budget = snapshot.cache.kept.answers, ANSWERED_AGAIN
    for owner in owners:
        blob = zone.nodes.get(owner)
        if blob is None:
            continue
        for rtype in decode_node(blob):
            key = owner + rtype.to_bytes(2, "big")
            was = kept.get(key)
            if was is None or was[3] is not None:
                continue  # not asked lately (or signed: the signer's answer)
            if budget <= 0:
                return
            budget -= 1
            query = _QUESTION + key + b"\x00\x01"
            fast, asked, wanted = table.ask(query)
            if fast is None:
                answer(snapshot, query, transport=Transport.UDP)
                learn(table, snapshot, asked, wanted)


_QUESTION = b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"
"""A query's header: ID 0, no flags, one question (``_answered_again``'s)."""


def _negatives_again(table: Table, negatives: set[tuple[int, int]], zone: ServedZone,
                     cache: ResponseCache) -> None:
    """Give ``table`` the new version's NXDOMAIN and NODATA answers for each RCODE and
    offset it was taught for the version before (``negatives``), in the same write as the
    move: a move forgets them (the SOA they carry may have changed), and each would
    otherwise cost one question answered by Python. Each is ``negative_entry``'s, the
    very entry ``answer`` gives the new version; C still decides by the new version's
    tables which questions it answers so."""
    for rcode, offset in negatives:
        table.negative(zone.apex, rcode, offset, negative_entry(cache, zone, rcode, offset))


def _signing(signer: Signer | None, apex: bytes) -> int:
    signed = None if signer is None else signer.zones.get(apex)
    return UNSIGNED if signed is None else SIGNED_ELSEWHERE if signed.key is None else SIGNED


def _filled(table: Table, snapshot: Snapshot) -> Table | None:
    index = snapshot.index
    for zone in index.served():
        if not _zone_into(table, zone, snapshot.signer):
            return None
    return table


def _zone_into(table: Table, zone: ServedZone, signer: Signer | None) -> bool:
    """Give ``table`` ``zone`` as its negative path reads it (the zone's own persistent
    tables, shard by shard: ``zone.owners``), and how ``signer`` signs it; ``True`` once
    given (a ``False`` would say C could not find it: no table rather than a wrong one)."""
    nodes, ents, interrupts = _tables(zone)
    table.zone(zone.apex, nodes, ents, interrupts, zone.has_wildcard,
               _signing(signer, zone.apex))
    return True


def _tables(zone: ServedZone) -> tuple[
    tuple[dict[bytes, bytes], ...], tuple[dict[bytes, None], ...],
    tuple[dict[bytes, None], ...] | None,
]:
    """The shards of ``zone``'s tables C's negative path reads: its nodes, its empty
    non-terminals, and its delegation points and DNAME owners together (or none)."""
    if not zone.dnames.size:
        interrupts = zone.cuts.shards if zone.cuts.size else None
    elif not zone.cuts.size:
        interrupts = zone.dnames.shards
    else:
        interrupts = _interrupts(zone).shards
    return zone.nodes.shards, zone.empty_nonterminals.shards, interrupts


_INTERRUPTS: weakref.WeakKeyDictionary[ServedZone, OwnerSet] = weakref.WeakKeyDictionary()
"""The delegation points and DNAME owners together, of each zone version (still served)
that has both: made once per version, not per table."""


def _interrupts(zone: ServedZone) -> OwnerSet:
    both = _INTERRUPTS.get(zone)
    if both is None:
        both = _INTERRUPTS[zone] = OwnerSet([*zone.cuts, *zone.dnames])
    return both


def learn(table: Table, snapshot: Snapshot, key: bytes | None, wanted: Wanted | None) -> None:
    """After ``answer`` answered a query the table handed back: copy in what ``answer``
    kept for it, the cached entry of its question (tied to the zones it was read from) or
    the zone's negative answer. ``table`` answers for ``snapshot`` (``shared_table``)."""
    cache = snapshot.cache
    if key is not None:
        entry = cache.get(key)
        if entry is not None:
            held = cache.kept.answers.get(key)
            # the zones it was read from, if what is kept is this very entry; else it is
            # tied to any change (an entry another snapshot put there meanwhile)
            deps = reads = None
            if held is not None and held[0] is entry:
                deps = dependencies(held[1], snapshot.index)
                reads = reach(held, snapshot.index)
            try:
                table.put(key, entry, deps, reads)
            except KeyError:  # a bare table, told of no zone: tied to any change
                table.put(key, entry)
            return
    if wanted is not None:
        apex, rcode, at = wanted
        zone = snapshot.index.zone_for(apex)
        negative = None if zone is None else cache.kept.negative(zone, rcode, at)
        if negative is not None:
            table.negative(apex, rcode, at, negative)
            shared = _SHARED.get(cache.kept)
            if shared is not None and shared.table is table:
                shared.negatives.setdefault(apex, set()).add((rcode, at))

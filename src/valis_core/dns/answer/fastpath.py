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

A table belongs to one snapshot, and so to one signer (a snapshot's signer never
changes; a signing change makes a new snapshot): a new snapshot gets a new table, so a
reload or a zone turning signed never leaves C an entry ``answer`` would now give
otherwise. It is bounded like the response cache (``CACHE_ENTRIES``; full, it is
emptied and fills again). The UDP loops serving one snapshot (a socket each: IPv4, IPv6,
each address) share its table (``shared_table``), so it is made once per snapshot and what
one socket's queries taught it answers the others'.

``answer`` stays the reference: ``tests/property/test_fastpath.py`` checks that what C
answers is byte for byte what ``answer`` gives. Without the extension (the package
imported from a tree nobody built) the server serves on the pure-Python path, slower,
and says so once in its log.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import TYPE_CHECKING

from valis_core.dns.answer._cache import CACHE_ENTRIES
from valis_core.dns.zone.owners import OwnerSet

if TYPE_CHECKING:
    from valis_core.dns.answer._fastpath import Pump, Table, Wanted
    from valis_core.dns.answer.snapshot import Snapshot
    from valis_core.dns.zone import ServedZone

__all__ = [
    "COMPILED",
    "SIGNED",
    "SIGNED_ELSEWHERE",
    "UNSIGNED",
    "Pump",
    "Table",
    "learn",
    "path_name",
    "pump",
    "shared_table",
    "table_for",
    "tell_once",
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


_SHARED: weakref.WeakKeyDictionary[Snapshot, Table | None] = weakref.WeakKeyDictionary()
"""The table of each snapshot still served (a snapshot is hashed by identity)."""


def shared_table(snapshot: Snapshot) -> Table | None:
    """``table_for(snapshot)``, made by the first UDP loop that serves ``snapshot`` and
    shared by the others (all on the trio thread); gone with the snapshot."""
    try:
        return _SHARED[snapshot]
    except KeyError:
        table = _SHARED[snapshot] = table_for(snapshot)
        return table


def _filled(table: Table, snapshot: Snapshot) -> Table | None:
    index = snapshot.index
    signer = snapshot.signer
    for zone in index.served():
        apex = zone.apex
        # C reads the zone's own persistent tables, shard by shard (``zone.owners``).
        if not zone.dnames.size:
            interrupts = zone.cuts.shards if zone.cuts.size else None
        elif not zone.cuts.size:
            interrupts = zone.dnames.shards
        else:
            interrupts = _interrupts(zone).shards
        signed = None if signer is None else signer.zones.get(apex)
        signing = UNSIGNED if signed is None else SIGNED_ELSEWHERE if signed.key is None \
            else SIGNED
        table.zone(apex, zone.nodes.shards, zone.empty_nonterminals.shards, interrupts,
                   zone.has_wildcard, signing)
    return table


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
    kept for it, the cached entry of its question or the zone's negative answer."""
    if key is not None:
        entry = snapshot.cache.get(key)
        if entry is not None:
            table.put(key, entry)
            return
    if wanted is not None:
        negative = snapshot.cache.negatives.get(wanted)
        if negative is not None:
            table.negative(*wanted, negative)

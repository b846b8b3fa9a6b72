"""NSEC3 (RFC 5155): hashed owner names, one zone version's chain, and the proofs of
denial an answer carries. Pure: a zone version in, values out.

A chain holds the hash of every name of the zone that has authoritative data or is an
empty non-terminal (delegation points included, names beneath them not: no opt-out),
sorted; the NSEC3 record at a hash names the next hash in the ring and the types of its
name. Bitmaps are not kept: they are read from the zone version when a record is made,
so a change of types at an existing owner leaves the chain as it was. Zones are patched
owner by owner, so ``chain_for`` makes a version's chain from the previous version's:
the hashes are kept in a persistent sorted ring (``valis_core.dns.dnssec.ring``) the new
chain shares with the old but for the chunks a change touches, the names that may have
come or gone are those the patches between the versions replaced (the zone's
``lineage`` says which) and the names above them, and only those that came or went are
hashed and placed: a change of one owner costs microseconds at a million names, where a
full build hashes every name once.

The proofs (RFC 5155 section 7.2) are lists of chain hashes whose NSEC3 records the
answer carries: ``closest_encloser`` finds the deepest existing ancestor, ``matching``
the hash of an existing name, ``covering`` the hash whose record's span holds a hash
that is no name's.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Collection, Iterable, Iterator

import attrs

import valis_core.dns.dnssec.signing as dnssec
from valis_core.dns.dnssec.ring import Ring
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import DS, NS, RRSIG, decode_node
from valis_core.dns.zone import ServedZone
from valis_core.dns.zone.owners import OwnerMap, OwnerSet

SHA1 = 1
"""The one hash algorithm RFC 5155 defines."""
NSEC3 = 50
NSEC3PARAM = 51
MAX_ITERATIONS = 100
"""Extra iterations accepted; RFC 9276 asks for 0, and validators may treat more than
100 as insecure (section 3.2)."""
MAX_SALT = 255
DIGEST = 20
"""SHA-1's length: a chain's hashes are all as long."""
MEMO = 4096
"""Names' hashes a chain remembers (the names its proofs name again and again)."""


@attrs.frozen
class Nsec3Params:
    """A chain's parameters: extra hash iterations and salt (RFC 9276's 0 and empty by
    default). The NSEC3PARAM at the apex says them, with flags 0 (no opt-out)."""

    iterations: int = 0
    salt: bytes = b""

    def rdata(self) -> bytes:
        """The NSEC3PARAM rdata (RFC 5155 section 4.2): the NSEC3's fields before the hash."""
        return struct.pack("!BBHB", SHA1, 0, self.iterations, len(self.salt)) + self.salt


def hash_name(name: bytes, params: Nsec3Params) -> bytes:
    """The SHA-1 hash of ``name`` (wire form; lowercased here) with the salt, iterated
    (RFC 5155 section 5)."""
    salt = params.salt
    digest = hashlib.sha1(name.lower() + salt).digest()
    for _ in range(params.iterations):
        digest = hashlib.sha1(digest + salt).digest()
    return digest


def hashed_owner(digest: bytes, apex: bytes) -> bytes:
    """The NSEC3 owner of ``digest``: its Base32hex (RFC 4648, lowercase, no padding) as a
    label under the apex."""
    label = base64.b32hexencode(digest).rstrip(b"=").lower()
    return bytes((len(label),)) + label + apex


def authoritative_names(zone: ServedZone) -> Iterator[bytes]:
    """Every name the chain holds: names with data and empty non-terminals, but none
    strictly beneath a delegation point (glue, and the names that exist only for it)."""
    names: Iterable[bytes] = (*zone.nodes, *zone.empty_nonterminals)
    if not zone.cuts:
        yield from names
        return
    for name in names:
        if not occluded(zone, name):
            yield name


def occluded(zone: ServedZone, name: bytes) -> bool:
    """Whether ``name`` lies strictly beneath one of ``zone``'s delegation points."""
    cuts = zone.cuts
    apex_size = len(zone.apex)
    size = len(name)
    for offset in wire.label_offsets(name)[1:]:
        if size - offset <= apex_size:
            return False
        if name[offset:] in cuts:
            return True
    return False


def held(zone: ServedZone, name: bytes) -> bool:
    """Whether ``zone``'s chain holds ``name``: it exists, not beneath a delegation."""
    return zone.exists(name) and (not zone.cuts or not occluded(zone, name))


@attrs.frozen(eq=False)
class Chain:
    """One zone version's NSEC3 chain: each name it holds as its hash followed by the
    name, in hash order (``ring``, persistent: the next version's chain shares what a
    change did not touch), and a memo of names' hashes (``memo``, bounded, carried from
    version to version). Built by ``chain_for``."""

    zone: ServedZone
    params: Nsec3Params
    ring: Ring
    memo: dict[bytes, bytes] = attrs.field(factory=dict)

    def digest(self, name: bytes) -> bytes:
        """The hash of ``name`` (remembered for the names a chain holds)."""
        found = self.memo.get(name)
        if found is None:
            found = hash_name(name, self.params)
            if len(self.memo) >= MEMO:
                self.memo.clear()
            self.memo[name] = found
        return found

    def matching(self, name: bytes) -> bytes | None:
        """The hash of ``name`` when it is in the chain."""
        return self.digest(name) if held(self.zone, name) else None

    def covering(self, digest: bytes) -> bytes:
        """The hash whose NSEC3 covers ``digest`` (no name's hash): the last one before it,
        or the last of all when it sorts first (the ring wraps)."""
        return self.ring.before(digest)[:DIGEST]

    def closest_encloser(self, name: bytes) -> tuple[bytes, bytes]:
        """The closest encloser of ``name`` (which does not exist) and the next closer
        name: the deepest ancestor in the chain, and its descendant one label nearer
        ``name`` (RFC 5155 section 7.2.1)."""
        nearer = name
        encloser = wire.parent(name)
        while encloser != self.zone.apex and not held(self.zone, encloser):
            nearer, encloser = encloser, wire.parent(encloser)
        return encloser, nearer

    def types_at(self, name: bytes) -> frozenset[int]:
        """The types an NSEC3 at ``name`` lists (RFC 5155 section 3.2.1): at a delegation
        point NS and DS (RRSIG with DS), elsewhere the name's types and RRSIG when it has
        any (an empty non-terminal has none)."""
        blob = self.zone.nodes.get(name)
        if blob is None:
            return frozenset()
        types = set(decode_node(blob))
        if name in self.zone.cuts:
            types &= {NS, DS}
            if DS in types:
                types.add(RRSIG)
            return frozenset(types)
        if name == self.zone.apex:
            types |= {dnssec.DNSKEY, dnssec.CDS, dnssec.CDNSKEY, NSEC3PARAM}
        return frozenset({*types, RRSIG})

    def _record(self, entry: bytes, following: bytes) -> tuple[bytes, bytes]:
        """The NSEC3 record of the ring's ``entry`` (a hash and its name), whose next
        entry is ``following``: its owner and rdata."""
        digest = entry[:DIGEST]
        rdata = (
            self.params.rdata()
            + bytes((DIGEST,))
            + following[:DIGEST]
            + dnssec.type_bitmap(self.types_at(entry[DIGEST:]))
        )
        return hashed_owner(digest, self.zone.apex), rdata

    def record(self, digest: bytes) -> tuple[bytes, bytes]:
        """The NSEC3 record at ``digest`` (a hash in the chain): its owner and rdata."""
        entry = self.ring.at_or_after(digest)
        assert entry is not None
        return self._record(entry, self.ring.after(entry))

    def records(self) -> Iterator[tuple[bytes, bytes, bytes]]:
        """Every NSEC3 record of the chain, in hash order: its hash, owner and rdata."""
        entries = iter(self.ring)
        first = next(entries, None)
        if first is None:
            return
        previous = first
        for entry in entries:
            yield (previous[:DIGEST], *self._record(previous, entry))
            previous = entry
        yield (previous[:DIGEST], *self._record(previous, first))


def chain_for(zone: ServedZone, params: Nsec3Params, previous: Chain | None = None) -> Chain:
    """``zone``'s chain; made from ``previous`` (a chain of an earlier version of the same
    zone with the same parameters) by hashing and placing only the names that came or
    went (or came out from under a delegation point, or went under one), else from
    scratch, hashing every name."""
    if previous is None or previous.params != params or previous.zone.apex != zone.apex:
        entries = (hash_name(name, params) + name for name in authoritative_names(zone))
        return Chain(zone, params, Ring.of(entries))
    before = previous.zone
    if before is zone:
        return previous
    removed: list[bytes] = []
    added: list[bytes] = []
    for name in changed_names(before, zone):
        was, now = held(before, name), held(zone, name)
        if was != now:
            (removed if was else added).append(previous.digest(name) + name)
    return Chain(zone, params, previous.ring.changed(removed, added), previous.memo)


def changed_names(before: ServedZone, after: ServedZone) -> set[bytes]:
    """Names that may be in one version's chain and not the other's: the owners the
    patches between them replaced (``ServedZone.lineage``; either may be the later) and
    the names above them (empty non-terminals come and go with what lies beneath), and
    when a delegation point came or went, the names beneath it. Two versions neither of
    which remembers being patched from the other are compared name by name."""
    owners = after.lineage.since(before.lineage)
    if owners is None:  # back: a transfer of the last version, after the new one's query
        owners = before.lineage.since(after.lineage)
    if owners is None:
        names = _differing(after.nodes, before.nodes)
        names |= _differing(after.empty_nonterminals, before.empty_nonterminals)
        recut: Iterable[bytes] = _differing(after.cuts, before.cuts)
    else:
        names = set(owners)
        for owner in owners:
            name = owner
            while name != after.apex:
                name = wire.parent(name)
                names.add(name)
        recut = [owner for owner in owners if (owner in before.cuts) != (owner in after.cuts)]
    for cut in recut:
        names.update(_beneath(after, cut, names))
    return names


def _differing(one: Collection[bytes], other: Collection[bytes]) -> set[bytes]:
    """The names in one of two collections and not the other: from the shards two owner
    tables do not share when they are owner tables (O(changed) when one was drafted from
    the other), else name by name."""
    if isinstance(one, OwnerMap | OwnerSet) and isinstance(other, OwnerMap | OwnerSet):
        return {name for name in one.differing(other) if (name in one) != (name in other)}
    return {name for name in one if name not in other} | {
        name for name in other if name not in one}


def _beneath(after: ServedZone, cut: bytes, known: set[bytes]) -> Iterable[bytes]:
    """The names beneath ``cut`` in ``after``, unless every one is ``known`` already: a
    delegation point set over names that stay, or taken from above them, puts them out
    of the chain or into it. (A name beneath it only in the version before is gone, so
    it is known: a patch replaced it or a name beneath it.)"""
    if _all_known_beneath(after, cut, known):
        return ()
    # The names staying beneath it are not known: look through the whole zone. A
    # change whose cost follows the zone's size, but no name is hashed for it.
    return [
        name for name in (*after.nodes, *after.empty_nonterminals)
        if name != cut and wire.is_at_or_below(name, cut)
    ]


def _all_known_beneath(zone: ServedZone, top: bytes, known: set[bytes]) -> bool:
    """Whether every name beneath ``top`` in ``zone`` is ``known``, counted level by
    level against ``zone.children``."""
    below: dict[bytes, list[bytes]] = {}
    for name in known:
        if len(name) > len(top):
            below.setdefault(wire.parent(name), []).append(name)
    waiting = [top]
    while waiting:
        name = waiting.pop()
        count = zone.children.get(name, 0)
        if not count:
            continue
        present = [child for child in below.get(name, ()) if zone.exists(child)]
        if len(present) != count:
            return False
        waiting.extend(present)
    return True

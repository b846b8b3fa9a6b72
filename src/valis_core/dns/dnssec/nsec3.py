"""NSEC3 (RFC 5155): hashed owner names, one zone version's chain, and the proofs of
denial an answer carries. Pure: a zone version in, values out.

A chain holds the hash of every name of the zone that has authoritative data or is an
empty non-terminal (delegation points included, names beneath them not: no opt-out),
sorted; the NSEC3 record at a hash names the next hash in the ring and the types of its
name. Bitmaps are not kept: they are read from the zone version when a record is made,
so a change of types at an existing owner leaves the chain as it was. Zones are patched
owner by owner, so ``chain_for`` makes a version's chain from the previous version's
when their delegation points are the same: only the names added or gone are hashed and
placed, and the cost follows the change, not the zone's size (a full build hashes every
name once).

The proofs (RFC 5155 section 7.2) are lists of chain hashes whose NSEC3 records the
answer carries: ``closest_encloser`` finds the deepest existing ancestor, ``matching``
the hash of an existing name, ``covering`` the hash whose record's span holds a hash
that is no name's.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import struct
from collections.abc import Iterable, Iterator

import attrs

import valis_core.dns.dnssec.signing as dnssec
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import DS, NS, RRSIG, decode_node
from valis_core.dns.zone import ServedZone

SHA1 = 1
"""The one hash algorithm RFC 5155 defines."""
NSEC3 = 50
NSEC3PARAM = 51
MAX_ITERATIONS = 100
"""Extra iterations accepted; RFC 9276 asks for 0, and validators may treat more than
100 as insecure (section 3.2)."""
MAX_SALT = 255


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


@attrs.frozen(eq=False)
class Chain:
    """One zone version's NSEC3 chain: each name's hash (``by_name``), the hashes in
    order (``ring``) and the name of each (``names``). Built by ``chain_for``."""

    zone: ServedZone
    params: Nsec3Params
    by_name: dict[bytes, bytes]
    names: dict[bytes, bytes]
    ring: list[bytes]

    def matching(self, name: bytes) -> bytes | None:
        """The hash of ``name`` when it is in the chain."""
        return self.by_name.get(name)

    def covering(self, digest: bytes) -> bytes:
        """The hash whose NSEC3 covers ``digest`` (no name's hash): the last one before it,
        or the last of all when it sorts first (the ring wraps)."""
        at = bisect.bisect_left(self.ring, digest)
        return self.ring[at - 1]

    def next_of(self, digest: bytes) -> bytes:
        at = bisect.bisect_right(self.ring, digest)
        return self.ring[at % len(self.ring)]

    def closest_encloser(self, name: bytes) -> tuple[bytes, bytes]:
        """The closest encloser of ``name`` (which does not exist) and the next closer
        name: the deepest ancestor in the chain, and its descendant one label nearer
        ``name`` (RFC 5155 section 7.2.1)."""
        nearer = name
        encloser = wire.parent(name)
        while encloser not in self.by_name and encloser != self.zone.apex:
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

    def record(self, digest: bytes) -> tuple[bytes, bytes]:
        """The NSEC3 record at ``digest``: its owner and rdata."""
        name = self.names[digest]
        rdata = (
            struct.pack("!BBHB", SHA1, 0, self.params.iterations, len(self.params.salt))
            + self.params.salt
            + bytes((len(digest),))
            + self.next_of(digest)
            + dnssec.type_bitmap(self.types_at(name))
        )
        return hashed_owner(digest, self.zone.apex), rdata

    def records(self) -> Iterator[tuple[bytes, bytes]]:
        """Every NSEC3 record of the chain, in hash order."""
        for digest in self.ring:
            yield self.record(digest)


def chain_for(zone: ServedZone, params: Nsec3Params, previous: Chain | None = None) -> Chain:
    """``zone``'s chain; made from ``previous`` (a chain of an earlier version of the same
    zone with the same parameters and delegation points) by hashing only the names that
    came or went (placed one by one, so a bulk change is built from scratch instead),
    else from scratch."""
    if (
        previous is None
        or previous.params != params
        or previous.zone.apex != zone.apex
        or previous.zone.cuts != zone.cuts
    ):
        by_name = {name: hash_name(name, params) for name in authoritative_names(zone)}
        names = {digest: name for name, digest in by_name.items()}
        return Chain(zone, params, by_name, names, sorted(names))
    before = previous.zone
    # The names that came or went, found in the shards the two versions do not share:
    # O(changed), not O(zone).
    changed = {
        name for name in zone.nodes.differing(before.nodes)
        if (name in zone.nodes) != (name in before.nodes)
    } | zone.empty_nonterminals.differing(before.empty_nonterminals)
    if len(changed) > len(previous.ring) // 8 + 64:  # a bulk change: sorting once is cheaper
        return chain_for(zone, params)
    by_name = dict(previous.by_name)
    names = dict(previous.names)
    ring = list(previous.ring)
    for name in changed:
        held = zone.exists(name) and not occluded(zone, name)
        digest = by_name.get(name)
        if digest is not None and not held:
            del by_name[name], names[digest]
            del ring[bisect.bisect_left(ring, digest)]
        elif digest is None and held:
            digest = hash_name(name, params)
            by_name[name] = digest
            names[digest] = name
            bisect.insort(ring, digest)
    return Chain(zone, params, by_name, names, ring)

"""What a zone transfer of a signed zone carries, or why there is none. Pure: a zone
version and the signer in, records out.

A zone signed with an NSEC3 chain is transferred fully signed (``signed_zone_records``),
so a secondary serves it signed without keys of its own: every authoritative RRset with
its RRSIG (glue and a delegation's NS unsigned, as they are in answers), the apex's
DNSKEY, CDS and CDNSKEY signed by each key the parent may name, NSEC3PARAM, and the whole
chain, each NSEC3 signed. The signatures are made as the answer path's are
(``Signer.make``, one refresh window for the whole transfer), valid ``VALIDITY`` from the
window's start, and kept apart from the answer path's for the zone's next transfer
(``valis_core.dns.dnssec.signature_cache``): a transfer never pushes out the signatures answers
are served from, and one of a zone unchanged since the last signs nothing.

A zone denying compactly (RFC 9824) has no chain: its NSEC records are made per query,
so no set of records a secondary could hold proves a name absent. Sending such a zone
unsigned would have the secondary serve answers every validator holding the parent's DS
rejects, so ``refusal`` refuses it, saying how to make it transferable; likewise a signed
zone whose key this node lacks (it answers the zone SERVFAIL itself).
"""

from __future__ import annotations

from collections.abc import Iterator

from valis_core.dns.answer.signed import SignedZone, Signer
from valis_core.dns.dnssec import CDNSKEY, CDS, DNSKEY, nsec3
from valis_core.dns.dnssec.nsec3 import NSEC3
from valis_core.dns.wire.records import DS, RRSIG, SOA, decode_node
from valis_core.dns.zone import ServedZone

WireRecord = tuple[bytes, int, int, bytes]

_KEY_TYPES = frozenset({DNSKEY, CDS, CDNSKEY})


def signed_zone(signer: Signer | None, zone: ServedZone) -> SignedZone | None:
    """``zone``'s signing, when it is signed."""
    return None if signer is None else signer.zones.get(zone.apex)


def refusal(signer: Signer | None, zone: ServedZone) -> str | None:
    """Why ``zone`` cannot be transferred as it is served (``None``: it can, unsigned or
    fully signed)."""
    signed = signed_zone(signer, zone)
    if signed is None:
        return None
    if signed.key is None:
        return (
            f"{zone.origin} is signed in operator state, but this node lacks its key; "
            "restore the key from the backup set of the node that signed it"
        )
    if signed.nsec3 is None:
        return (
            f"{zone.origin} is signed with compact denial, which has no chain a secondary "
            f"could serve; to transfer it signed: valis zone sign {zone.origin} --denial nsec3"
        )
    return None


def signed_zone_records(zone: ServedZone, signer: Signer, window: int) -> Iterator[WireRecord]:
    """Every record of the NSEC3-signed ``zone`` in transfer order (the SOA first and
    last), each authoritative RRset followed by its RRSIG, then the NSEC3 chain, signed in
    the refresh window ``window``; the signatures an earlier transfer in the window made
    for the same records are sent again (``valis_core.dns.dnssec.signature_cache``)."""
    signed = signer.zones[zone.apex]
    assert signed.keys is not None
    apex = zone.apex
    key_signers = signed.keys.key_signers
    negative = zone.negative_ttl
    tag = (window, negative, (signed.keys.signer.dnskey, *(key.dnskey for key in key_signers)))
    store = signer.cache.transfer(apex, tag, id(zone))
    apex_sets = decode_node(zone.nodes[apex])
    soa: WireRecord = (apex, SOA, apex_sets[SOA][0], zone.soa)
    made = hits = 0
    try:
        yield soa
        published = tuple(sorted(signed.apex_sets.items()))
        for owner, blob in zone.nodes.items():
            sets = decode_node(blob)
            glue = owner != apex and nsec3.occluded(zone, owner)
            cut = owner in zone.cuts
            held: tuple[object, ...] = (owner, blob, glue, cut)
            if owner == apex:
                sets = {**{t: s for t, s in sets.items() if t not in _KEY_TYPES},
                        **signed.apex_sets}
                held = (*held, published)
            signed_sets = [
                (rtype, rrset, key_signers if owner == apex and rtype in _KEY_TYPES else (None,))
                for rtype, rrset in sorted(sets.items())
                if not (glue or (cut and rtype != DS))
            ]
            sigs = store.get(held, sum(len(keys) for _, _, keys in signed_sets))
            if sigs is None:
                sigs = tuple(signer.make(signed, owner, rtype, rrset, window, by=key)
                             for rtype, rrset, keys in signed_sets for key in keys)
                store.put(held, sigs)
                made += len(sigs)
            else:
                hits += len(sigs)
            by_type: dict[int, list[bytes]] = {}
            at = iter(sigs)
            for rtype, _, keys in signed_sets:
                by_type[rtype] = [next(at) for _ in keys]
            for rtype, (ttl, rdatas) in sorted(sets.items()):
                if not (owner == apex and rtype == SOA):
                    for rdata in rdatas:
                        yield owner, rtype, ttl, rdata
                for sig in by_type.get(rtype, ()):
                    yield owner, RRSIG, ttl, sig
        chain = signer.chain(zone)
        for digest, owner, rdata in chain.records():
            yield owner, NSEC3, negative, rdata
            entry = digest + rdata  # a hash is as long as every other
            found = store.get(entry, 1)
            if found is None:
                found = (signer.make(signed, owner, NSEC3, (negative, (rdata,)), window),)
                store.put(entry, found)
                made += 1
            else:
                hits += 1
            yield owner, RRSIG, negative, found[0]
        yield soa
    finally:
        signer.cache.counted(apex, made, hits)

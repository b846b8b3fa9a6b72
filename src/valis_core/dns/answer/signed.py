"""Signed answers: what a zone signed online adds to the answer path (RFC 4035 section 3).

A ``Signer`` holds the signed zones' keys and the signatures already made; it outlives
snapshots (the resident hands it to the ``IndexHolder``), so a zone's change re-signs
only the RRsets whose contents changed: a signature is kept by zone, key, owner, type, TTL
and rdatas (``valis_core.dns.dnssec.signature_cache``), and made again only when a new refresh
window starts. A signer built because what is signed changed carries its predecessor's
signatures by the keys still signing, so one zone's change re-signs no other zone.

What it changes, and only for names in a signed zone:

- DNSKEY, CDS and CDNSKEY at the apex are answered from the zone's keys (RFC 7344: CDS
  and CDNSKEY say the DS set the parent should hold), whatever the DO bit; during a
  rollover the DNSKEY RRset may hold two keys and carry an RRSIG by each.
- With DO=1: an RRSIG follows every RRset in the answer and authority sections and every
  additional RRset the zone holds with authority (never glue, never a referral's NS);
  a CNAME synthesized from a DNAME is left unsigned (RFC 6672 section 5.3.1); an answer
  from a wildcard carries the wildcard's signature (Labels says so) and an NSEC covering
  the next closer name (the closest encloser's child on the way to the name asked), which
  proves no nearer name matches (RFC 4035 sections 3.1.3.3 and 5.3.4): both its ends are
  siblings of that child, so the closest encloser a validator reads from them is the
  wildcard's parent, however many labels the name asked has beneath it.
- Denial of existence is compact (RFC 9824) by default, made and signed per query:
  NODATA with an NSEC at the name asked whose next name is its immediate successor and
  whose bitmap is the name's types, or for a name that does not exist RRSIG, NSEC and
  NXNAME, with RCODE NOERROR. A referral proves its DS, or its absence with an NSEC at
  the cut (NS set, no DS). An explicit NXNAME question is FORMERR (RFC 9824 section
  3.5); a question for NSEC itself is answered with the NSEC made for the name (its
  bitmap says NSEC exists, so it cannot stand as a proof that NSEC does not).
- A question for RRSIG (DO=1) is answered with the signatures at the name, over each of
  its RRsets (a CNAME's too, never followed; a wildcard's with its proof), or, at a name
  compact denial holds nothing at, over the NSEC made for it: every bitmap a denial could
  carry lists RRSIG, so a NODATA would be bogus, and a validator passes a positive RRSIG
  answer through unvalidated (Unbound: "no sigs on sigs"). Knot's online signer
  refuses the question instead, which a resolver turns into SERVFAIL.
- A zone signed with NSEC3 (``valis_core.dns.dnssec.nsec3``) denies from its chain, made once
  per zone version (``Signer.chain``) instead: NXDOMAIN with the closest encloser proof
  and the wildcard's absence (RFC 5155 section 7.2.2), NODATA with the NSEC3 matching
  the name (or, through a wildcard, the closest encloser proof and the wildcard's), a
  wildcard answer with the NSEC3 covering the next closer name, a referral without DS
  with the NSEC3 matching the cut; the apex publishes NSEC3PARAM.
- A zone signed in operator state whose key this node does not hold is answered
  SERVFAIL: an unsigned answer would be bogus to every validator holding the parent's DS.

With DO=0 the other answers are the unsigned path's, byte for byte. Signed responses are
kept in the snapshot's response cache under their own key (the question, DO, and the
refresh window), so a window's change re-signs them; across swaps (``_cache``) for as
long as every zone they were read from is the same version and signed the same way
(``signing_of``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import attrs

import valis_core.dns.answer._lookup as plain
from valis_core.dns.answer._cache import CACHE_ENTRIES, Reading, ResponseCache, Zones
from valis_core.dns.answer.message import Entry
from valis_core.dns.dnssec import CDNSKEY, CDS, DNSKEY, NXNAME, ZoneKey, nsec3
from valis_core.dns.dnssec import signing as dnssec
from valis_core.dns.dnssec.nsec3 import NSEC3, NSEC3PARAM, Chain, Nsec3Params
from valis_core.dns.dnssec.signature_cache import SignatureCache
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import (
    ANY,
    CNAME,
    DS,
    FORMERR,
    NOERROR,
    NS,
    NSEC,
    NXDOMAIN,
    RRSIG,
    SERVFAIL,
    RRset,
    decode_node,
)
from valis_core.dns.zone import ServedZone, ZoneIndex

VALIDITY = 14 * 86400
"""How long a signature is valid from the start of its refresh window."""
REFRESH = 86400
"""Signatures are made again once a day, so every one served has 13 days or more left."""
INCEPTION_SKEW = 3600
"""Inception is set an hour before the window starts, for validators with slow clocks."""
KEY_TTL = 3600
"""The TTL of the apex's DNSKEY, CDS and CDNSKEY."""

_KEY_TYPES = frozenset({DNSKEY, CDS, CDNSKEY})
_APEX_TYPES = _KEY_TYPES | {NSEC3PARAM}
_QR = 0x8000
_SERVFAIL: Entry = (_QR | SERVFAIL, 0, 0, 0, b"", 0, None)
_FORMERR: Entry = (_QR | FORMERR, 0, 0, 0, b"", 0, None)


@attrs.frozen(eq=False)
class ZoneKeys:
    """A zone's keys as its rollover step uses them (``valis_core.dns.dnssec.rollover``): the
    key signing its RRsets, those in its DNSKEY RRset, those signing that RRset, and those
    whose DS the parent should hold (said by CDS and CDNSKEY)."""

    signer: ZoneKey
    published: tuple[ZoneKey, ...]
    key_signers: tuple[ZoneKey, ...]
    parent: tuple[ZoneKey, ...]
    dnskey_ttl: int = KEY_TTL
    step: str | None = None
    """The rollover step (``None``: not rolling), since when and until when (``None``:
    until the operator confirms the parent's DS), as UNIX times, and which key rolls."""
    since: float | None = None
    due: float | None = None
    kind: str | None = None

    @classmethod
    def single(cls, key: ZoneKey, dnskey_ttl: int = KEY_TTL) -> ZoneKeys:
        return cls(key, (key,), (key,), (key,), dnskey_ttl)


@attrs.frozen(eq=False)
class SignedZone:
    """One signed zone's keys (``None``: signing is on but this node lacks a key) and the
    records it publishes at the apex because of them."""

    apex: bytes
    keys: ZoneKeys | None
    nsec3: Nsec3Params | None = None
    """The NSEC3 chain's parameters; ``None``: compact denial."""
    key: ZoneKey | None = attrs.field(init=False)
    """The key signing the zone's RRsets."""
    apex_sets: Mapping[int, RRset] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        sets: dict[int, RRset] = {}
        keys = self.keys
        if keys is not None:
            ttl = keys.dnskey_ttl
            sets = {
                DNSKEY: (ttl, tuple(key.dnskey for key in keys.published)),
                CDNSKEY: (ttl, tuple(key.dnskey for key in keys.parent)),
                CDS: (ttl, tuple(dnssec.ds_rdata(self.apex, key.dnskey) for key in keys.parent)),
            }
            if self.nsec3 is not None:  # TTL 0, as BIND gives it: only its presence counts
                sets[NSEC3PARAM] = (0, (self.nsec3.rdata(),))
        object.__setattr__(self, "key", None if keys is None else keys.signer)
        object.__setattr__(self, "apex_sets", sets)

    def signs_as(self, other: SignedZone) -> bool:
        """Whether ``other`` signs and publishes exactly as this does: the same keys
        (by DNSKEY rdata) in the same roles, rollover step and NSEC3 parameters."""
        return _signing(self) == _signing(other)


def _signing(zone: SignedZone) -> tuple[object, ...]:
    keys = zone.keys
    roles = None if keys is None else (
        tuple(tuple(key.dnskey for key in held) for held in (
            (keys.signer,), keys.published, keys.key_signers, keys.parent)),
        keys.dnskey_ttl, keys.step, keys.since, keys.due, keys.kind,
    )
    return zone.apex, zone.nsec3, roles


class Signer:
    """The signed zones by apex (lowercased wire form), the clock signatures are dated
    by, and the signatures made so far (``valis_core.dns.dnssec.signature_cache``)."""

    def __init__(
        self,
        zones: Mapping[bytes, ZoneKey | ZoneKeys | None],
        clock: Callable[[], float],
        nsec3: Mapping[bytes, Nsec3Params] | None = None,
        *,
        carry: Signer | None = None,
    ) -> None:
        """``nsec3``: the zones denying with an NSEC3 chain, and its parameters;
        ``carry``: the signer this one replaces, whose signatures by keys still signing
        (and NSEC3 chains, and counts) it goes on with, and whose ``SignedZone`` it keeps
        for each zone signed as before (so ``zones[apex] is`` the last one's says that
        nothing this signer adds to that zone's answers changed)."""
        chains = nsec3 or {}
        kept = {} if carry is None else carry.zones
        self.zones: dict[bytes, SignedZone] = {}
        for apex, key in zones.items():
            made = SignedZone(
                apex, ZoneKeys.single(key) if isinstance(key, ZoneKey) else key, chains.get(apex)
            )
            before = kept.get(apex)  # signed as before: the very same object, for the caches
            self.zones[apex] = before if before is not None and before.signs_as(made) else made
        self.lacking = frozenset(apex for apex, key in zones.items() if key is None)
        self._clock = clock
        self._lock = threading.Lock()
        self._chains: dict[bytes, Chain] = {}
        self.cache = SignatureCache()
        if carry is not None:
            self.cache = carry.cache
            with carry._lock:
                self._chains = {apex: chain for apex, chain in carry._chains.items()
                                if apex in chains}
        self.cache.retain({
            apex: frozenset(key.dnskey for key in (zone.keys.signer, *zone.keys.key_signers))
            for apex, zone in self.zones.items() if zone.keys is not None
        }, frozenset(chains))

    @property
    def made(self) -> int:
        """Signatures made since the node started (for the metrics)."""
        return sum(self.cache.made.values())

    @property
    def hits(self) -> int:
        """Signatures served from a store instead of made (for the metrics)."""
        return sum(self.cache.hits.values())

    def window(self) -> int:
        return int(self._clock()) // REFRESH

    def rrsig(
        self, zone: SignedZone, owner: bytes, rtype: int, rrset: RRset, window: int,
        *, by: ZoneKey | None = None,
    ) -> bytes:
        """The RRSIG rdata over ``rrset`` by the key ``by`` (default: the key signing
        the zone), made once per refresh window."""
        signing = by or zone.key
        assert signing is not None
        part = (zone.apex, signing.dnskey, window)
        key = (owner.lower(), rtype, rrset)
        found = self.cache.get(part, key)
        if found is not None:
            return found
        made = self.make(zone, owner, rtype, rrset, window, by=signing)
        self.cache.put(part, key, made)
        return made

    def make(
        self, zone: SignedZone, owner: bytes, rtype: int, rrset: RRset, window: int,
        *, by: ZoneKey | None = None,
    ) -> bytes:
        """A new RRSIG rdata over ``rrset``, valid ``VALIDITY`` from ``window``'s start
        (kept by the caller; not counted)."""
        signing = by or zone.key
        assert signing is not None
        start = window * REFRESH
        return dnssec.sign_rrset(
            signing, zone.apex, owner, rtype, rrset,
            inception=start - INCEPTION_SKEW, expiration=start + VALIDITY,
        )

    def cached_by_zone(self) -> dict[bytes, int]:
        """How many signatures are kept for each zone (by apex)."""
        return self.cache.cached_by_zone()

    def chain(self, zone: ServedZone) -> Chain:
        """The NSEC3 chain of this version of ``zone`` (an NSEC3 zone), made from the last
        version's on first use."""
        params = self.zones[zone.apex].nsec3
        assert params is not None
        with self._lock:
            held = self._chains.get(zone.apex)
            if held is None or held.zone is not zone or held.params != params:
                held = nsec3.chain_for(zone, params, held)
                self._chains[zone.apex] = held
            return held

    def entry(
        self, index: ZoneIndex, cache: ResponseCache, key: bytes, qtype: int, do: bool
    ) -> Entry | None:
        """The answer when the question lies in a signed zone and signing changes it;
        ``None`` to let the unsigned path answer (DO=0 outside the key types)."""
        if not do and qtype not in _APEX_TYPES and not self.lacking:
            return None
        qname = key[:-2]
        zone = index.zone_for(qname)
        if zone is None:
            return None
        if qtype == DS and qname == zone.apex:
            zone = index.parent_of(zone) or zone
        signed = self.zones.get(zone.apex)
        if signed is None:
            return None
        if signed.key is None:
            return _SERVFAIL
        if not do and not (qname == zone.apex and qtype in signed.apex_sets):
            return None
        if qtype == NXNAME and signed.nsec3 is None:
            return _FORMERR
        window = self.window() if do else 0
        cached_as = key + (b"\x80" + window.to_bytes(4, "big") if do else b"\x00")
        entry: Entry | None = cache.get(cached_as)
        if entry is not None:
            try:  # noqa: SIM105 - as the unsigned path keeps its cache: least recently used
                cache.move_to_end(cached_as)
            except KeyError:
                pass
            return entry
        kept = cache.kept  # what the holder's snapshots keep across swaps (``_cache``)
        entry = kept.take(cached_as, index, self.signing_along)
        if entry is None:
            reading = Reading.question(index, qname, qtype)  # those above, and its own
            entry, keep = self._resolve(reading, zone, qname, qtype, do=do, window=window)
            if not keep:
                return entry
            kept.keep(cached_as, reading.kept(entry, self.signing_along(reading.zones)))
        cache[cached_as] = entry
        while len(cache) > CACHE_ENTRIES:
            try:
                cache.popitem(last=False)
            except KeyError:
                break
        return entry

    def signing_along(self, zones: list[ServedZone | None]) -> tuple[object, ...]:
        """How each zone an answer's lookups gave is signed here (``signing_of``)."""
        return tuple(zone and signing_of(self.zones.get(zone.apex)) for zone in zones)

    def _resolve(
        self, index: Zones, zone: ServedZone, qname: bytes, qtype: int, *, do: bool,
        window: int,
    ) -> tuple[Entry, bool]:
        """The signed answer, and whether to keep it (not for names that do not exist:
        a flood of random names would push the served answers out)."""
        draft = _SignedDraft()
        apex_sets = self.zones[zone.apex].apex_sets
        if qname == zone.apex and qtype in apex_sets:
            rrset = apex_sets[qtype]
            draft.answer.extend(plain.records_of(qname, qtype, rrset))
            draft.spans.append((draft.answer, 0, len(draft.answer), zone))
            return self._finish(qname, draft, do, window), True
        keep = True
        name = qname
        seen = {qname}
        for link in range(plain.MAX_CHAIN):
            if link and qtype == DS and name == zone.apex:
                zone = index.parent_of(zone) or zone
            if qtype == RRSIG:
                exists = self._signatures_at(zone, name, draft, window)
                if exists is not None:
                    keep = keep and exists
                    break
            found = plain.find(zone, name, qtype)
            marks = draft.marks()
            kind, owner, sets = found
            if sets is None:
                exists = bool(owner)
                compact = self._compact(zone)
                if qtype == NSEC and compact:  # the NSEC asked for is the one made here
                    draft.nsec_answer = True
                else:
                    draft.negative(zone, NOERROR if exists or compact else NXDOMAIN)
                draft.proofs.append((zone, name, _types_at(zone, name) if exists else None))
                keep = keep and exists
                draft.span_from(marks, zone)
                break
            target = plain.step(zone, name, qtype, found, draft, first=not link)
            draft.span_from(marks, zone)
            if kind == plain.FOUND_DNAME:
                draft.unsigned.add((name, CNAME))
            elif kind == plain.FOUND_CUT:
                self._delegation(zone, owner, sets, draft)
            elif kind == plain.FOUND_DATA and name not in zone.nodes:
                draft.wildcards[name] = _wildcard_source(zone, name)
                draft.covers.append((zone, name))
            if target is None:
                break
            link_to = plain.next_link(index, seen, target)
            if link_to is None:
                break
            zone, name = link_to
        return self._finish(qname, draft, do, window), keep

    def _signatures_at(
        self, zone: ServedZone, name: bytes, draft: _SignedDraft, window: int
    ) -> bool | None:
        """Answer a question for RRSIG at ``name`` with the signatures there, as a
        validator cannot be shown that a type every signed name has is absent: those
        over each of the name's RRsets (the apex's keys included; a CNAME's, never
        followed), or in a zone denying compactly, at a name with none (an empty
        non-terminal, a name that does not exist), the one over the NSEC made for it.
        Return whether the name exists; ``None`` where the usual answer stands: a
        referral, a DNAME's CNAME, a zone not signed here, and an NSEC3 zone's denial
        (an empty non-terminal's NSEC3 lists no RRSIG, NXDOMAIN proves no name)."""
        signed = self.zones.get(zone.apex)
        if signed is None or signed.keys is None:
            return None
        kind, owner, sets = plain.find(zone, name, ANY)
        if kind == plain.FOUND_DATA and sets is not None:
            source = name
            if name not in zone.nodes:  # from a wildcard: with its proof, as its data
                source = draft.wildcards[name] = _wildcard_source(zone, name)
                draft.covers.append((zone, name))
            if name == zone.apex:
                sets = {**sets, **signed.apex_sets}
            for rtype, rrset in sorted(sets.items()):
                signers: tuple[ZoneKey | None, ...] = (None,)
                if rtype in _KEY_TYPES and name == zone.apex:
                    signers = signed.keys.key_signers
                for by in signers:
                    sig = self.rrsig(signed, source, rtype, rrset, window, by=by)
                    draft.answer.append((name, RRSIG, rrset[0], sig))
            return True
        if kind is not None or signed.nsec3 is not None:
            return None
        exists = bool(owner)
        rdata = _compact_nsec(zone, name, _types_at(zone, name) if exists else None)
        sig = self.rrsig(signed, name, NSEC, (zone.negative_ttl, (rdata,)), window)
        draft.answer.append((name, RRSIG, zone.negative_ttl, sig))
        return exists

    def _compact(self, zone: ServedZone) -> bool:
        signed = self.zones.get(zone.apex)
        return signed is None or signed.nsec3 is None

    def _delegation(
        self, zone: ServedZone, cut: bytes, sets: dict[int, RRset], draft: _SignedDraft
    ) -> None:
        """A referral's DS, or the proof it has none (RFC 4035 section 3.1.4)."""
        ds = sets.get(DS)
        if ds is not None:
            start = len(draft.authority)
            draft.authority.extend(plain.records_of(cut, DS, ds))
            draft.spans.append((draft.authority, start, len(draft.authority), zone))
        else:
            draft.proofs.append((zone, cut, frozenset(sets)))

    def _finish(self, qname: bytes, draft: _SignedDraft, do: bool, window: int) -> Entry:
        """Add the proofs' NSEC records and, with DO, an RRSIG after every RRset the
        answering zones sign; encode."""
        chained: dict[bytes, tuple[ServedZone, set[bytes]]] = {}
        for zone, name, held in draft.proofs:
            signed = self.zones.get(zone.apex)
            if signed is None or signed.key is None:
                continue
            if signed.nsec3 is not None:
                chained.setdefault(zone.apex, (zone, set()))[1].update(
                    _denial(self.chain(zone), name)
                )
                continue
            rdata = _compact_nsec(zone, name, held)
            into = draft.answer if draft.nsec_answer else draft.authority
            start = len(into)
            into.append((name, NSEC, zone.negative_ttl, rdata))
            draft.spans.append((into, start, start + 1, zone))
        for zone, name in draft.covers:
            signed = self.zones.get(zone.apex)
            if signed is not None and signed.nsec3 is not None:
                chain = self.chain(zone)
                _, nearer = chain.closest_encloser(name)
                chained.setdefault(zone.apex, (zone, set()))[1].add(
                    chain.covering(nsec3.hash_name(nearer, chain.params))
                )
                continue
            nearer = _next_closer(name, draft.wildcards[name][2:])
            before = dnssec.predecessor(nearer, zone.apex)
            rdata = dnssec.nsec_rdata(dnssec.next_sibling(nearer), ())
            start = len(draft.authority)
            draft.authority.append((before, NSEC, zone.negative_ttl, rdata))
            draft.spans.append((draft.authority, start, start + 1, zone))
        for zone, digests in chained.values():
            chain = self.chain(zone)
            start = len(draft.authority)
            for digest in sorted(digests):
                owner, rdata = chain.record(digest)
                draft.authority.append((owner, NSEC3, zone.negative_ttl, rdata))
            draft.spans.append((draft.authority, start, len(draft.authority), zone))
        if do:
            self._sign(draft, window)
        return plain.encode(qname, draft)

    def _sign(self, draft: _SignedDraft, window: int) -> None:
        signatures: dict[int, list[tuple[int, plain.RR]]] = {}
        for records, start, end, zone in draft.spans:
            if records is draft.glue:
                continue  # glue is the child's data, never signed by the parent
            signed = self.zones.get(zone.apex)
            if signed is None or signed.key is None:
                continue
            i = start
            while i < end:
                owner, rtype, ttl, _ = records[i]
                j = i
                while j < end and records[j][0] == owner and records[j][1] == rtype:
                    j += 1
                referral_ns = rtype == NS and records is draft.authority and owner != zone.apex
                held = records is not draft.extra or plain.held_in_zone(zone, owner)
                if held and not referral_ns and (owner, rtype) not in draft.unsigned:
                    rrset = (ttl, tuple(record[3] for record in records[i:j]))
                    source = draft.wildcards.get(owner, owner)
                    signers: tuple[ZoneKey | None, ...] = (None,)
                    if rtype in _KEY_TYPES and owner == zone.apex and signed.keys is not None:
                        # DNSKEY, CDS, CDNSKEY: by each key the parent may name (a split
                        # zone's KSK, never its ZSK; RFC 7344 section 4.1)
                        signers = signed.keys.key_signers
                    for by in signers:
                        sig = self.rrsig(signed, source, rtype, rrset, window, by=by)
                        signatures.setdefault(id(records), []).append(
                            (j, (owner, RRSIG, ttl, sig))
                        )
                i = j
        for records in (draft.answer, draft.authority, draft.extra):
            for at, record in sorted(signatures.get(id(records), []), reverse=True):
                records.insert(at, record)


def signing_of(signed: SignedZone | None) -> tuple[object, ...] | None:
    """All that a zone's signed answers take from its signing (``None``: not signed
    here): the keys signing it and its key records, the DNSKEY TTL, how it denies. Two
    signers giving a zone the same are interchangeable for its answers kept."""
    keys = None if signed is None else signed.keys
    if signed is None or keys is None:
        return None if signed is None else (signed.nsec3,)
    return (keys.signer.dnskey, *(tuple(key.dnskey for key in held) for held in (
        keys.key_signers, keys.published, keys.parent)), keys.dnskey_ttl, signed.nsec3)


class _SignedDraft(plain.Draft):
    """An answer being found, with what signing it needs: which zone drafted each run of
    records (``spans``), names answered from a wildcard (and the wildcard), NSEC proofs
    to make, and RRsets never signed."""

    __slots__ = ("covers", "nsec_answer", "proofs", "spans", "unsigned", "wildcards")

    def __init__(self) -> None:
        super().__init__()
        self.nsec_answer = False
        self.spans: list[tuple[list[plain.RR], int, int, ServedZone]] = []
        self.wildcards: dict[bytes, bytes] = {}
        self.covers: list[tuple[ServedZone, bytes]] = []
        self.proofs: list[tuple[ServedZone, bytes, frozenset[int] | None]] = []
        self.unsigned: set[tuple[bytes, int]] = set()

    def marks(self) -> tuple[int, int, int, int]:
        return len(self.answer), len(self.authority), len(self.glue), len(self.extra)

    def span_from(self, marks: tuple[int, int, int, int], zone: ServedZone) -> None:
        for records, start in zip(
            (self.answer, self.authority, self.glue, self.extra), marks, strict=True
        ):
            if len(records) > start:
                self.spans.append((records, start, len(records), zone))


def _denial(chain: Chain, name: bytes) -> tuple[bytes, ...]:
    """The hashes whose NSEC3 records deny what an answer at ``name`` lacks: the one
    matching it when it is in the chain (NODATA, a delegation without DS); else the
    closest encloser proof (RFC 5155 section 7.2.1) and the wildcard's NSEC3, matching it
    (a wildcard's NODATA) or covering it (NXDOMAIN)."""
    match = chain.matching(name)
    if match is not None:
        return (match,)
    encloser, nearer = chain.closest_encloser(name)
    source = b"\x01*" + encloser
    wildcard = chain.matching(source)
    if wildcard is None:
        wildcard = chain.covering(nsec3.hash_name(source, chain.params))
    return (
        chain.digest(encloser),
        chain.covering(nsec3.hash_name(nearer, chain.params)),
        wildcard,
    )


def _compact_nsec(zone: ServedZone, name: bytes, held: frozenset[int] | None) -> bytes:
    """The rdata of the NSEC compact denial makes at ``name`` (RFC 9824): next name its
    immediate successor, bitmap the types ``held`` there (``None``: the name does not
    exist, NXNAME), the apex's keys included."""
    types = frozenset({NXNAME}) if held is None else held
    if name == zone.apex:
        types |= _KEY_TYPES
    return dnssec.nsec_rdata(dnssec.successor(name), types)


def _next_closer(name: bytes, encloser: bytes) -> bytes:
    """The next closer name (RFC 5155 section 1.3): the ancestor of ``name`` (or
    ``name`` itself) one label beneath its closest encloser ``encloser``."""
    for offset in reversed(wire.label_offsets(name)):
        if len(name) - offset > len(encloser):
            return name[offset:]
    return name  # pragma: no cover - the encloser is always a proper ancestor


def _wildcard_source(zone: ServedZone, name: bytes) -> bytes:
    """The wildcard an answer for ``name`` (which does not exist) came from."""
    encloser = wire.parent(name)
    while not zone.exists(encloser):
        encloser = wire.parent(encloser)
    return b"\x01*" + encloser


def _types_at(zone: ServedZone, name: bytes) -> frozenset[int]:
    """The types ``name`` has in ``zone`` (its wildcard's, when it exists only through
    one; none for an empty non-terminal)."""
    blob = zone.nodes.get(name)
    if blob is None and not zone.exists(name) and zone.has_wildcard:
        blob = zone.nodes.get(_wildcard_source(zone, name))
    return frozenset(decode_node(blob)) if blob is not None else frozenset()


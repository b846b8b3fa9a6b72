"""NSEC3 denial (``valis_core.dns.dnssec.nsec3`` and the signed answer path) judged by a small
verifier written here from RFC 5155 section 8, hashing with dnspython's ``nsec3_hash``:
every name asked of any generated zone gets the proof its answer needs, signed; the chain
holds each authoritative name once and its records cover the hash space exactly once;
a chain patched owner by owner is the chain built from scratch; a signed transfer signs
every authoritative RRset (never glue or a delegation's NS) and carries the whole chain."""

from __future__ import annotations

import base64
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.dns_ask import ask
from tests.hypothesis_profiles import scaled
from tests.property import generated_zone
from tests.property.dnssec_check import validate, validate_sections
from tests.property.generated_zone import BASE, GEN, zone_rows
from valis_core.dns import dnssec, wire
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.dnssec import nsec3
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.transfer.signed import signed_zone_records
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ZoneIndex

NOW = 1_800_000_000
APEX = dns.name.from_text(GEN)
KEYS = {alg: dnssec.ZoneKey(dnssec.generate_key(alg)) for alg in dnssec.ALGORITHMS}
NAMES = [*generated_zone.NAMES, f"e.n.t.{GEN}", f"s.{GEN}"]
QNAMES = [*NAMES, f"q.a.{GEN}", f"q.x.d.{GEN}", f"nope.{GEN}", f"q.b.{GEN}", f"y.m.{GEN}",
          f"n.t.{GEN}", f"t.{GEN}", f"z.e.n.t.{GEN}", f"q.s.{GEN}"]
QTYPES = ["A", "TXT", "MX", "NS", "DS", "CNAME", "DNSKEY", "NSEC3PARAM", "AAAA", "RRSIG"]
PARAMS = st.builds(Nsec3Params, st.sampled_from([0, 1, 5]), st.sampled_from([b"", b"\xab\xcd"]))


def rows() -> st.SearchStrategy[list[RecordRow]]:
    return zone_rows(NAMES)


def index_of(records: list[RecordRow]) -> ZoneIndex | None:
    try:
        return ZoneIndex.from_records(records)
    except ZoneError:
        return None


def authoritative(records: list[RecordRow]) -> set[dns.name.Name]:
    """The names an NSEC3 chain must hold, worked out from the rows alone: every owner
    and its ancestors up to the apex, less those strictly beneath a delegation."""
    cuts = {dns.name.from_text(r.owner) for r in records if r.rtype == "NS" and r.owner != GEN}
    names: set[dns.name.Name] = set()
    for r in records:
        name = dns.name.from_text(r.owner)
        while name != APEX:
            names.add(name)
            name = name.parent()
    names.add(APEX)
    return {n for n in names if not any(n != c and n.is_subdomain(c) for c in cuts)}


def h(name: dns.name.Name, params: Nsec3Params) -> str:
    return str(dns.dnssec.nsec3_hash(name, params.salt or None, params.iterations, 1)).lower()


def nsec3s(message: dns.message.Message) -> list[tuple[str, str, set[int]]]:
    """Each NSEC3 in the authority section: owner hash, next hash, types."""
    out = []
    for rrset in message.authority:
        if rrset.rdtype != dns.rdatatype.NSEC3:
            continue
        rdata = next(iter(rrset))
        nxt = base64.b32hexencode(rdata.next).decode().lower()
        types = {int(t) for window in rdata.windows for t in _types(window)}
        out.append((rrset.name.labels[0].decode().lower(), nxt, types))
    return out


def _types(window: tuple[int, bytes]) -> list[int]:
    number, bits = window
    return [number * 256 + i * 8 + j for i, octet in enumerate(bits) for j in range(8)
            if octet & (0x80 >> j)]


def matches(found: list[tuple[str, str, set[int]]], digest: str) -> set[int] | None:
    for owner, _, types in found:
        if owner == digest:
            return types
    return None


def covers(found: list[tuple[str, str, set[int]]], digest: str) -> bool:
    for owner, nxt, _ in found:
        if owner < digest < nxt or (nxt <= owner and (digest > owner or digest < nxt)):
            return True
    return False


def closest_encloser_proven(
    found: list[tuple[str, str, set[int]]], qname: dns.name.Name, params: Nsec3Params
) -> dns.name.Name | None:
    """RFC 5155 section 8.3: the closest encloser, when an NSEC3 matches it and another
    covers the next closer name."""
    nearer = qname
    while nearer != APEX:
        encloser = nearer.parent()
        if matches(found, h(encloser, params)) is not None:
            return encloser if covers(found, h(nearer, params)) else None
        nearer = encloser
    return None


def signed(index: ZoneIndex, key: dnssec.ZoneKey, params: Nsec3Params) -> Snapshot:
    apex = wire.from_text(GEN)
    return Snapshot(index, signer=Signer({apex: key}, clock=lambda: NOW, nsec3={apex: params}))


def keys(key: dnssec.ZoneKey) -> dict[dns.name.Name, dns.rrset.RRset]:
    rdata = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.DNSKEY, key.dnskey, 0,
                                len(key.dnskey))
    return {APEX: dns.rrset.from_text_list(APEX, 3600, "IN", "DNSKEY", [rdata.to_text()])}


@given(records=rows(), algorithm=st.sampled_from(dnssec.ALGORITHMS),
       qname=st.sampled_from(QNAMES), qtype=st.sampled_from(QTYPES), params=PARAMS)
def test_every_answer_of_any_zone_carries_the_nsec3_proof_it_needs(
    records: list[RecordRow], algorithm: int, qname: str, qtype: str, params: Nsec3Params
) -> None:
    index = index_of(records)
    assume(index is not None)
    assert index is not None
    key = KEYS[algorithm]
    message = ask(signed(index, key, params), qname, qtype, do=True)
    judged = dns.message.from_wire(message.to_wire())
    if any(r.rdtype == dns.rdatatype.NS and r.name != APEX for r in message.authority):
        judged.flags &= ~dns.flags.AA  # a chain into a referral: its NS is the child's
    validate_sections(judged, keys(key), now=NOW)
    assert not any(r.rdtype == dns.rdatatype.NSEC for r in message.authority)
    found = nsec3s(message)
    name = dns.name.from_text(qname)
    cnames = {r.name: next(iter(r)).target for r in message.answer
              if r.rdtype == dns.rdatatype.CNAME}
    seen = {name}
    while name in cnames and qtype != "CNAME":  # a CNAME chain: the denial is where it ends
        name = cnames[name]
        if name in seen:
            return  # a loop: nothing is denied
        seen.add(name)
    rtype = dns.rdatatype.from_text(qtype)
    names = authoritative(records)
    answered = any(r.name == name and r.rdtype == rtype for r in message.answer)
    if message.rcode() == dns.rcode.NXDOMAIN:
        assert name not in names
        encloser = closest_encloser_proven(found, name, params)
        assert encloser is not None, message
        assert covers(found, h(dns.name.from_text("*", encloser), params)), message
    elif message.rcode() == dns.rcode.NOERROR and not answered and (
        name.is_subdomain(APEX)
    ):
        referral = any(r.rdtype == dns.rdatatype.NS for r in message.authority)
        if referral:  # a delegation proves its DS, or that it has none
            (cut,) = [r.name for r in message.authority if r.rdtype == dns.rdatatype.NS]
            if not any(r.rdtype == dns.rdatatype.DS for r in message.authority):
                types = matches(found, h(cut, params))
                assert types is not None, message
                assert dns.rdatatype.DS not in types
                assert dns.rdatatype.NS in types
        elif name in names:  # NODATA (RFC 5155 section 8.5, 8.6)
            types = matches(found, h(name, params))
            assert types is not None, message
            assert rtype not in types
            assert dns.rdatatype.CNAME not in types
        else:  # NODATA through a wildcard (section 8.7)
            encloser = closest_encloser_proven(found, name, params)
            assert encloser is not None, message
            types = matches(found, h(dns.name.from_text("*", encloser), params))
            assert types is not None, message
            assert rtype not in types
    elif answered:
        sigs = [r for r in message.answer if r.rdtype == dns.rdatatype.RRSIG
                and r.name == name]
        synthesized = sigs and not name.is_wild()  # (a wildcard asked itself: its own data)
        if synthesized and next(iter(sigs[0])).labels < len(name) - 1:  # from one (8.8)
            labels = next(iter(sigs[0])).labels
            nearer = dns.name.Name(name.labels[-(labels + 2):])
            assert covers(found, h(nearer, params)), message


@given(records=rows(), params=PARAMS)
def test_the_chain_holds_each_name_once_and_covers_the_hash_space_once(
    records: list[RecordRow], params: Nsec3Params
) -> None:
    index = index_of(records)
    assume(index is not None)
    assert index is not None
    (zone,) = index.served()
    chain = nsec3.chain_for(zone, params)
    want = {h(n, params) for n in authoritative(records)}
    found = [(base64.b32hexencode(d).decode().lower(), rdata) for d, _, rdata in chain.records()]
    assert {owner for owner, _ in found} == want
    assert len(found) == len(want)
    nexts = {}
    for owner, rdata in found:
        parsed: Any = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.NSEC3, rdata, 0,
                                     len(rdata))
        nexts[owner] = base64.b32hexencode(parsed.next).decode().lower()
        assert (parsed.iterations, parsed.salt, parsed.flags) == (params.iterations,
                                                                  params.salt, 0)
    at, seen = min(nexts), set()
    for _ in range(len(nexts)):  # one cycle through every hash, in ascending order but once
        seen.add(at)
        at = nexts[at]
    assert seen == want
    assert at == min(nexts)
    wraps = sum(1 for owner, nxt in nexts.items() if nxt <= owner)
    assert wraps == 1


@given(before=rows(), after=rows(), params=PARAMS)
def test_a_chain_patched_owner_by_owner_is_the_chain_built_whole(
    before: list[RecordRow], after: list[RecordRow], params: Nsec3Params
) -> None:
    old, new = index_of(before), index_of(after)
    assume(old is not None and new is not None)
    assert old is not None
    assert new is not None
    owners = {r.owner for r in before[len(BASE):]} | {r.owner for r in after[len(BASE):]}
    try:
        patched = old.with_owners_replaced(GEN, owners, [r for r in after
                                                         if r.owner in owners])
    except ZoneError:
        return
    (zone,) = patched.served()
    (first,) = old.served()
    chain = nsec3.chain_for(zone, params, nsec3.chain_for(first, params))
    whole = nsec3.chain_for(zone, params)
    assert list(chain.ring) == list(whole.ring)
    assert list(chain.records()) == list(whole.records())


def test_the_apex_publishes_nsec3param_whatever_the_do_bit() -> None:
    index = ZoneIndex.from_records(BASE)
    snap = signed(index, KEYS[13], Nsec3Params())
    for do in (True, False):
        query = dns.message.make_query(GEN, "NSEC3PARAM", want_dnssec=do)
        response = answer(snap, query.to_wire(), transport=Transport.UDP)
        assert response is not None
        message = dns.message.from_wire(response)
        (rrset,) = [r for r in message.answer if r.rdtype == dns.rdatatype.NSEC3PARAM]
        assert next(iter(rrset)).to_text() == "1 0 0 -"
        assert bool(message.ednsflags & dns.flags.DO) == do


@settings(max_examples=scaled(0.6))
@given(records=rows(), algorithm=st.sampled_from(dnssec.ALGORITHMS), params=PARAMS)
def test_a_signed_transfer_signs_every_authoritative_rrset_and_carries_the_chain(
    records: list[RecordRow], algorithm: int, params: Nsec3Params
) -> None:
    index = index_of(records)
    assume(index is not None)
    assert index is not None
    (zone,) = index.served()
    key = KEYS[algorithm]
    snap = signed(index, key, params)
    assert snap.signer is not None
    sent = list(signed_zone_records(zone, snap.signer, snap.signer.window()))
    assert sent[0] == sent[-1]
    assert sent[0][1] == dns.rdatatype.SOA
    rrsets: dict[tuple[dns.name.Name, int, int], dns.rrset.RRset] = {}
    for owner, rtype, ttl, rdata in sent[1:-1]:
        name = dns.name.from_wire(owner, 0)[0]
        rdtype = dns.rdatatype.RdataType.make(rtype)
        parsed = dns.rdata.from_wire(dns.rdataclass.IN, rdtype, rdata, 0, len(rdata))
        covers = parsed.covers() if rtype == dns.rdatatype.RRSIG else dns.rdatatype.NONE
        rrset = rrsets.setdefault((name, rtype, covers),
                                  dns.rrset.RRset(name, dns.rdataclass.IN, rdtype, covers))
        rrset.add(parsed, ttl)
    names = authoritative(records)
    cuts = {dns.name.from_text(r.owner) for r in records if r.rtype == "NS" and r.owner != GEN}
    for (name, rtype, _), rrset in rrsets.items():
        if rtype == dns.rdatatype.RRSIG:
            continue
        sig = rrsets.get((name, dns.rdatatype.RRSIG, rtype))
        if rtype == dns.rdatatype.NSEC3 or (name in names and name not in cuts) or (
            name in cuts and name in names and rtype == dns.rdatatype.DS
        ):
            assert sig is not None, (name, rtype)
            validate(rrset, sig, keys(key), now=NOW)
        else:  # glue, a delegation's NS and whatever lies beneath a cut: never signed
            assert sig is None, (name, rtype)
    hashed = {name.labels[0].decode() for (name, rtype, _) in rrsets
              if rtype == dns.rdatatype.NSEC3}
    assert hashed == {h(name, params) for name in names}
    assert (APEX, dns.rdatatype.NSEC3PARAM, 0) in rrsets

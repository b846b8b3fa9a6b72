"""Signed answers (``valis_core.dns.answer.signed``) judged by dnspython's validator:
with DO=1 every RRset in the answer and authority sections of any question verifies under
the zone's DNSKEY; denial is compact (RFC 9824); wildcards carry the proof the name is
absent; delegations prove their DS or its absence; and with DO=0 every answer but the
apex's keys is byte for byte the unsigned one."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.dns_ask import ask
from tests.property.dnssec_check import validate, validate_sections, wildcard_answers_proven
from tests.property.generated_zone import GEN, NAMES, RDATA, zone_rows
from tests.property.signed_example import INDEX, NOW, OTHER, Z
from valis_core.dns import dnssec, wire
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import REFRESH, Signer, ZoneKeys
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ZoneIndex

KEYS = {alg: dnssec.ZoneKey(dnssec.generate_key(alg)) for alg in dnssec.ALGORITHMS}
QNAMES = [
    Z, f"www.{Z}", f"WWW.{Z}", f"alias.{Z}", f"dangling.{Z}", f"x.wild.{Z}", f"a.b.wild.{Z}",
    f"wild.{Z}", f"ent.{Z}", f"deep.ent.{Z}", f"secure.{Z}", f"x.secure.{Z}",
    f"insecure.{Z}", f"x.insecure.{Z}", f"q.d.{Z}", f"x.q.d.{Z}", f"other.{Z}",
    f"nope.{Z}", f"a.nope.{Z}", f"mail.{Z}", f"www.{OTHER}", OTHER, f"nx.{OTHER}",
]
QTYPES = [
    "A", "AAAA", "TXT", "MX", "NS", "DS", "SOA", "DNSKEY", "CDS", "CDNSKEY", "CNAME", "ANY",
    "NSEC",
]


def snapshot(algorithm: int, *, also_other: bool = True) -> Snapshot:
    zones: dict[bytes, dnssec.ZoneKey | None] = {wire.from_text(Z): KEYS[algorithm]}
    if also_other:
        zones[wire.from_text(OTHER)] = KEYS[15 if algorithm == 13 else 13]
    return Snapshot(INDEX, signer=Signer(zones, clock=lambda: NOW))


def keys_of(snap: Snapshot) -> dict[dns.name.Name, dns.rrset.RRset]:
    assert snap.signer is not None
    out = {}
    for apex, zone in snap.signer.zones.items():
        assert zone.key is not None
        name = dns.name.from_wire(apex, 0)[0]
        rdata = dns.rdata.from_wire(
            dns.rdataclass.IN, dns.rdatatype.DNSKEY, zone.key.dnskey, 0, len(zone.key.dnskey)
        )
        out[name] = dns.rrset.from_text_list(name, 3600, "IN", "DNSKEY", [rdata.to_text()])
    return out


@pytest.mark.parametrize("algorithm", dnssec.ALGORITHMS)
@given(qname=st.sampled_from(QNAMES), qtype=st.sampled_from(QTYPES))
def test_every_signed_rrset_verifies_under_the_zones_key(
    algorithm: int, qname: str, qtype: str
) -> None:
    snap = snapshot(algorithm)
    message = ask(snap, qname, qtype, do=True)
    assert message.rcode() in (dns.rcode.NOERROR, dns.rcode.YXDOMAIN)
    validate_sections(message, keys_of(snap), now=NOW)


@given(qname=st.sampled_from(QNAMES), qtype=st.sampled_from(QTYPES), do=st.booleans())
def test_without_do_answers_are_the_unsigned_ones_byte_for_byte(
    qname: str, qtype: str, do: bool
) -> None:
    signed = snapshot(13)
    query = dns.message.make_query(qname, qtype, use_edns=0, want_dnssec=False, id=7)
    wire_query = query.to_wire()
    apex_key = qtype in ("DNSKEY", "CDS", "CDNSKEY") and qname.lower() in (Z, OTHER)
    ours = answer(signed, wire_query, transport=Transport.UDP)
    theirs = answer(Snapshot(INDEX), wire_query, transport=Transport.UDP)
    if apex_key:
        assert ours != theirs
    else:
        assert ours == theirs
    if do:  # and an unsigned zone's DO=1 answers are untouched by a signer of others
        plain = dns.message.make_query(qname, qtype, want_dnssec=True, id=7).to_wire()
        only_other = Snapshot(
            INDEX, signer=Signer({wire.from_text("unrelated.test."): KEYS[13]}, lambda: NOW)
        )
        assert answer(only_other, plain, transport=Transport.UDP) == answer(
            Snapshot(INDEX), plain, transport=Transport.UDP
        )


def nsec_at(message: dns.message.Message, name: str) -> dns.rrset.RRset:
    return message.find_rrset(
        message.authority, dns.name.from_text(name), dns.rdataclass.IN, dns.rdatatype.NSEC
    )


def bitmap(rrset: dns.rrset.RRset) -> set[int]:
    (rdata,) = list(rrset)
    return {
        window * 256 + i * 8 + j
        for window, bits in rdata.windows
        for i, octet in enumerate(bits)
        for j in range(8)
        if octet & (0x80 >> j)
    }


def test_a_name_that_does_not_exist_is_nodata_with_nxname() -> None:
    message = ask(snapshot(13), f"nope.{Z}", "A", do=True)
    assert message.rcode() == dns.rcode.NOERROR
    assert not message.answer
    nsec = nsec_at(message, f"nope.{Z}")
    assert bitmap(nsec) == {dnssec.NXNAME, dns.rdatatype.RRSIG, dns.rdatatype.NSEC}
    assert next(iter(nsec)).next == dns.name.from_text(f"\\000.nope.{Z}")


def test_nodata_at_an_existing_name_lists_its_types() -> None:
    message = ask(snapshot(13), f"www.{Z}", "TXT", do=True)
    assert bitmap(nsec_at(message, f"www.{Z}")) == {
        dns.rdatatype.A, dns.rdatatype.AAAA, dns.rdatatype.RRSIG, dns.rdatatype.NSEC
    }
    apex = ask(snapshot(13), Z, "TXT", do=True)
    assert {dns.rdatatype.DNSKEY, dns.rdatatype.CDS, dns.rdatatype.CDNSKEY} <= bitmap(
        nsec_at(apex, Z)
    )


def test_a_wildcard_answer_proves_the_name_absent() -> None:
    message = ask(snapshot(15), f"x.wild.{Z}", "TXT", do=True)
    (sig,) = [r for r in message.answer if r.rdtype == dns.rdatatype.RRSIG]
    assert next(iter(sig)).labels == 3  # *.wild.example.test.
    (cover,) = [r for r in message.authority if r.rdtype == dns.rdatatype.NSEC]
    assert cover.name < dns.name.from_text(f"x.wild.{Z}") < next(iter(cover)).next
    # Both ends are siblings of the name, so the closest encloser is the wildcard's parent.
    assert cover.name.parent() == next(iter(cover)).next.parent() == dns.name.from_text(
        f"wild.{Z}"
    )


@pytest.mark.parametrize("algorithm", dnssec.ALGORITHMS)
@pytest.mark.parametrize("qname", [f"x.wild.{Z}", f"a.b.wild.{Z}", f"deep.er.x.wild.{Z}"])
def test_a_wildcard_answer_at_any_depth_proves_its_next_closer_name_absent(
    algorithm: int, qname: str
) -> None:
    """The NSEC covers the wildcard parent's child on the way to the name (``b.wild``
    for ``a.b.wild``), not the name asked: its ends are that child's siblings, so the
    closest encloser a validator reads from them is ``wild``, the wildcard's parent."""
    message = ask(snapshot(algorithm), qname, "TXT", do=True)
    assert wildcard_answers_proven(message) == 1, message
    (cover,) = [r for r in message.authority if r.rdtype == dns.rdatatype.NSEC]
    assert cover.name.parent() == dns.name.from_text(f"wild.{Z}")


def test_an_insecure_delegation_proves_it_has_no_ds() -> None:
    message = ask(snapshot(13), f"x.insecure.{Z}", "A", do=True)
    assert not message.flags & dns.flags.AA
    assert bitmap(nsec_at(message, f"insecure.{Z}")) == {
        dns.rdatatype.NS, dns.rdatatype.RRSIG, dns.rdatatype.NSEC
    }
    secure = ask(snapshot(13), f"x.secure.{Z}", "A", do=True)
    assert any(r.rdtype == dns.rdatatype.DS for r in secure.authority)


def test_the_apex_publishes_its_key_cds_and_cdnskey() -> None:
    snap = snapshot(13)
    key = KEYS[13]
    (dnskey,) = ask(snap, Z, "DNSKEY", do=False, edns=True).answer
    assert next(iter(dnskey)).to_wire() == key.dnskey
    (cds,) = ask(snap, Z, "CDS", do=False, edns=True).answer
    assert next(iter(cds)).to_wire() == dnssec.ds_rdata(wire.from_text(Z), key.dnskey)
    (cdnskey,) = ask(snap, Z, "CDNSKEY", do=False, edns=True).answer
    assert next(iter(cdnskey)).to_wire() == key.dnskey


def test_a_signed_zone_without_its_key_is_servfail_not_unsigned() -> None:
    snap = Snapshot(INDEX, signer=Signer({wire.from_text(Z): None}, clock=lambda: NOW))
    for do in (False, True):
        assert ask(snap, f"www.{Z}", "A", do=do, edns=True).rcode() == dns.rcode.SERVFAIL
    assert ask(snap, f"www.{OTHER}", "A", do=True).rcode() == dns.rcode.NOERROR


def test_a_question_for_nsec_is_answered_with_the_nsec_made_for_the_name() -> None:
    message = ask(snapshot(13), f"www.{Z}", "NSEC", do=True)
    (nsec,) = [r for r in message.answer if r.rdtype == dns.rdatatype.NSEC]
    assert dns.rdatatype.NSEC in bitmap(nsec)
    assert not [r for r in message.authority if r.rdtype == dns.rdatatype.SOA]


def test_an_explicit_nxname_question_is_formerr() -> None:
    assert ask(snapshot(13), f"www.{Z}", "TYPE128", do=True).rcode() == dns.rcode.FORMERR


def test_signatures_are_made_once_per_window_and_again_in_the_next() -> None:
    now = [float(NOW)]
    signer = Signer({wire.from_text(Z): KEYS[13]}, clock=lambda: now[0])
    first = Snapshot(INDEX, signer=signer)
    ask(first, f"www.{Z}", "A", do=True)
    made = signer.made
    ask(Snapshot(INDEX, signer=signer), f"www.{Z}", "A", do=True)  # a new snapshot, same sig
    assert signer.made == made
    now[0] += REFRESH
    later = ask(first, f"www.{Z}", "A", do=True)
    assert signer.made > made
    (sig,) = [r for r in later.answer if r.rdtype == dns.rdatatype.RRSIG]
    assert next(iter(sig)).expiration - now[0] >= 13 * 86400


# --- any zone --------------------------------------------------------------------------

GEN_RDATA = {**RDATA, "DNAME": st.sampled_from([f"b.{GEN}"])}


@st.composite
def generated_zone(draw: st.DrawFn) -> ZoneIndex | None:
    try:
        return ZoneIndex.from_records(draw(zone_rows(NAMES, GEN_RDATA, most=8)))
    except ZoneError:
        return None


@given(
    index=generated_zone(),
    algorithm=st.sampled_from(dnssec.ALGORITHMS),
    qname=st.sampled_from([*NAMES, f"q.a.{GEN}", f"q.x.d.{GEN}", f"nope.{GEN}",
                           f"q.b.{GEN}", f"y.m.{GEN}"]),
    qtype=st.sampled_from(["A", "TXT", "MX", "NS", "DS", "CNAME", "ANY", "DNSKEY", "NSEC"]),
)
def test_any_zones_signed_answers_verify_and_deny_compactly(
    index: ZoneIndex | None, algorithm: int, qname: str, qtype: str
) -> None:
    assume(index is not None)
    assert index is not None
    key = KEYS[algorithm]
    snap = Snapshot(index, signer=Signer({wire.from_text(GEN): key}, clock=lambda: NOW))
    message = ask(snap, qname, qtype, do=True)
    assert message.rcode() in (dns.rcode.NOERROR, dns.rcode.YXDOMAIN)
    name = dns.name.from_text(GEN)
    rdata = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.DNSKEY, key.dnskey, 0,
                                len(key.dnskey))
    keys = {name: dns.rrset.from_text_list(name, 3600, "IN", "DNSKEY", [rdata.to_text()])}
    validate_sections(message, keys, now=NOW)
    if not message.answer:  # a denial always carries its NSEC (or a referral, its proof)
        assert any(r.rdtype in (dns.rdatatype.NSEC, dns.rdatatype.DS)
                   for r in message.authority), message


SPLIT_KEYS = {
    alg: (dnssec.ZoneKey(dnssec.generate_key(alg)),
          dnssec.ZoneKey(dnssec.generate_key(alg), dnssec.ZSK_FLAGS))
    for alg in dnssec.ALGORITHMS
}
WILDCARDS = [
    RecordRow(GEN, f"*.{GEN}", "TXT", 300, '"apex wildcard"'),
    RecordRow(GEN, f"*.a.{GEN}", "A", 300, "192.0.2.42"),
]
DEEP = [
    f"{below}{above}{GEN}"
    for above in ("", "a.", "x.a.", "m.", "b.", "d.")
    for below in ("q.", "p.q.", "o.p.q.", "deep.er.w.")
]
"""Names one to four labels beneath the drawn zone's names (and its two wildcards)."""


@st.composite
def wildcard_zone(draw: st.DrawFn) -> ZoneIndex | None:
    try:
        return ZoneIndex.from_records(
            draw(zone_rows(NAMES, GEN_RDATA, most=8)) + WILDCARDS
        )
    except ZoneError:
        return None


@given(
    index=wildcard_zone(),
    algorithm=st.sampled_from(dnssec.ALGORITHMS),
    split=st.booleans(),
    qname=st.sampled_from(DEEP),
    qtype=st.sampled_from(["A", "TXT", "MX", "CNAME", "ANY"]),
)
def test_every_wildcard_answer_at_any_depth_validates(
    index: ZoneIndex | None, algorithm: int, split: bool, qname: str, qtype: str
) -> None:
    """Whatever the zone, the depth of the name beneath its wildcard, the algorithm and
    the keys (a CSK, or a KSK and a ZSK), an answer made from a wildcard verifies and
    proves its next closer name absent as a validator requires."""
    assume(index is not None)
    assert index is not None
    ksk, zsk = SPLIT_KEYS[algorithm]
    keys = ZoneKeys(zsk, (ksk, zsk), (ksk,), (ksk,)) if split else ZoneKeys.single(ksk)
    apex = wire.from_text(GEN)
    snap = Snapshot(index, signer=Signer({apex: keys}, clock=lambda: NOW))
    message = ask(snap, qname, qtype, do=True)
    name = dns.name.from_text(GEN)
    dnskeys = dns.rrset.from_text_list(name, 3600, "IN", "DNSKEY", [
        dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.DNSKEY, key.dnskey, 0,
                            len(key.dnskey)).to_text()
        for key in keys.published
    ])
    judged = dns.message.from_wire(message.to_wire())
    if any(r.rdtype == dns.rdatatype.NS and r.name != name for r in message.authority):
        judged.flags &= ~dns.flags.AA  # a chain into a referral: its NS is the child's
    validate_sections(judged, {name: dnskeys}, now=NOW)
    wildcard_answers_proven(message)


def test_a_question_for_rrsig_gets_the_signatures_at_the_name() -> None:
    snap = snapshot(13)
    message = ask(snap, f"www.{Z}", "RRSIG", do=True)
    assert message.rcode() == dns.rcode.NOERROR
    assert {r.covers for r in message.answer} == {dns.rdatatype.A, dns.rdatatype.AAAA}
    assert all(r.rdtype == dns.rdatatype.RRSIG for r in message.answer)
    assert not [r for r in message.authority if r.rdtype == dns.rdatatype.NSEC]
    apex = ask(snap, Z, "RRSIG", do=True)
    assert {dns.rdatatype.SOA, dns.rdatatype.NS, dns.rdatatype.DNSKEY, dns.rdatatype.CDS,
            dns.rdatatype.CDNSKEY} <= {r.covers for r in apex.answer}


def _signatures_verify(
    snap: Snapshot, message: dns.message.Message, keys: dict[dns.name.Name, dns.rrset.RRset]
) -> int:
    """Each RRSIG RRset in the answer verifies over the RRset its owner answers for the
    type it covers (NSEC: the NSEC made for the name); return how many."""
    checked = 0
    for sigs in message.answer:
        if sigs.rdtype != dns.rdatatype.RRSIG:
            continue
        covered = ask(snap, sigs.name.to_text(), dns.rdatatype.to_text(sigs.covers), do=True)
        rrset = covered.get_rrset(covered.answer, sigs.name, dns.rdataclass.IN, sigs.covers)
        assert rrset is not None, (message, covered)
        validate(rrset, sigs, keys, now=NOW)
        checked += 1
    return checked


@given(
    index=generated_zone(),
    algorithm=st.sampled_from(dnssec.ALGORITHMS),
    qname=st.sampled_from([*NAMES, f"q.a.{GEN}", f"q.x.d.{GEN}", f"nope.{GEN}",
                           f"q.b.{GEN}", f"y.m.{GEN}", f"a.b.{GEN}"]),
)
def test_a_question_for_rrsig_is_never_denied_by_a_bitmap_listing_rrsig(
    index: ZoneIndex | None, algorithm: int, qname: str
) -> None:
    """Compact denial's every NSEC lists RRSIG, so no denial can prove RRSIG absent:
    any name of the zone answers with its signatures (over its RRsets, or over the NSEC
    made for it), each verifying over the RRset it covers; only a referral, or a DNAME
    whose name grows too long, answers otherwise."""
    assume(index is not None)
    assert index is not None
    key = KEYS[algorithm]
    snap = Snapshot(index, signer=Signer({wire.from_text(GEN): key}, clock=lambda: NOW))
    message = ask(snap, qname, "RRSIG", do=True)
    name = dns.name.from_text(GEN)
    rdata = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.DNSKEY, key.dnskey, 0,
                                len(key.dnskey))
    keys = {name: dns.rrset.from_text_list(name, 3600, "IN", "DNSKEY", [rdata.to_text()])}
    referral = any(r.rdtype == dns.rdatatype.NS and r.name != name for r in message.authority)
    if referral or message.rcode() == dns.rcode.YXDOMAIN:
        return
    assert message.rcode() == dns.rcode.NOERROR, message
    assert _signatures_verify(snap, message, keys) > 0, message
    for nsec in message.authority:
        if nsec.rdtype == dns.rdatatype.NSEC:
            assert nsec.name != dns.name.from_text(qname), message
    wildcard_answers_proven(message)

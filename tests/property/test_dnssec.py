"""The signing core (``valis_core.dns.dnssec``) against dnspython's DNSSEC code: every
signature it makes verifies, its DNSKEY, key tag and DS are dnspython's, and its
canonical order, NSEC bitmaps and name successors agree with RFC 4034's definitions."""

from __future__ import annotations

from typing import Any

import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.property.dnssec_check import validate
from valis_core.dns import dnssec, wire

NOW = 1_800_000_000
KEYS = {alg: dnssec.ZoneKey(dnssec.generate_key(alg)) for alg in dnssec.ALGORITHMS}
APEX = "Example.TEST."

labels = st.text(alphabet="abcXYZ019-_", min_size=1, max_size=6)
names = st.tuples(st.booleans(), st.lists(labels, min_size=0, max_size=3)).map(
    lambda drawn: ".".join([*(["*"] if drawn[0] else []), *drawn[1], APEX[:-1]]) + "."
)

RDATA = {
    "A": st.sampled_from(["192.0.2.1", "192.0.2.2", "198.51.100.7"]),
    "TXT": st.sampled_from(['"one"', '"Two"', '"three four"']),
    "MX": st.sampled_from(["10 MAIL.example.test.", "20 b.Example.test.", "5 x.example.NET."]),
    "NS": st.sampled_from(["ns1.Example.test.", "NS2.example.test."]),
    "CNAME": st.sampled_from(["Target.example.test."]),
    "SOA": st.sampled_from(["NS1.example.test. Host.example.test. 7 3600 600 86400 300"]),
    "SRV": st.sampled_from(["0 5 443 Svc.Example.test.", "1 1 80 a.example.test."]),
    "DS": st.sampled_from(["12345 13 2 " + "ab" * 32]),
}


def dnskeys(key: dnssec.ZoneKey) -> dict[dns.name.Name, dns.rrset.RRset]:
    rdata: Any = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.RdataType.make(dnssec.DNSKEY),
                                     key.dnskey, 0, len(key.dnskey))
    name = dns.name.from_text(APEX)
    return {name: dns.rrset.from_text_list(name, 300, "IN", "DNSKEY", [rdata.to_text()])}


@pytest.mark.parametrize("algorithm", dnssec.ALGORITHMS)
def test_dnskey_tag_and_ds_are_dnspythons(algorithm: int) -> None:
    key = KEYS[algorithm]
    rdata: Any = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.RdataType.make(dnssec.DNSKEY),
                                     key.dnskey, 0, len(key.dnskey))
    assert key.algorithm == algorithm
    assert dns.dnssec.key_id(rdata) == key.tag
    ds = dns.dnssec.make_ds(APEX, rdata, "SHA256")
    assert ds.to_wire() == dnssec.ds_rdata(wire.from_text(APEX), key.dnskey)


def test_an_unknown_algorithm_is_refused_with_the_choices() -> None:
    with pytest.raises(dnssec.DnssecError, match=r"13 .* or 15"):
        dnssec.generate_key(8)


@given(
    algorithm=st.sampled_from(dnssec.ALGORITHMS),
    owner=names,
    rtype=st.sampled_from(sorted(RDATA)),
    data=st.data(),
    ttl=st.integers(0, 2**31 - 1),
)
def test_every_signature_verifies_with_dnspython(
    algorithm: int, owner: str, rtype: str, data: st.DataObject, ttl: int
) -> None:
    texts = data.draw(st.lists(RDATA[rtype], min_size=1, max_size=3))
    if rtype in ("CNAME", "SOA"):
        texts = texts[:1]
    rrset = dns.rrset.from_text_list(owner, ttl, "IN", rtype, texts)
    rdatas = [rdata.to_wire() for rdata in rrset]
    if len(rdatas) > 1:
        rdatas.append(rdatas[0])  # a duplicate is signed once
    key = KEYS[algorithm]
    sig = dnssec.sign_rrset(
        key, wire.from_text(APEX), wire.from_text(owner), rrset.rdtype, (ttl, tuple(rdatas)),
        inception=NOW - 3600, expiration=NOW + 86400,
    )
    rrsig: Any = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.RRSIG, sig, 0, len(sig))
    assert rrsig.labels == len(dns.name.from_text(owner)) - 1 - owner.startswith("*.")
    sigset = dns.rrset.from_text_list(owner, ttl, "IN", "RRSIG", [rrsig.to_text()])
    validate(rrset, sigset, dnskeys(key), now=NOW)


@given(st.lists(names, min_size=2, max_size=8))
def test_canonical_key_orders_names_as_rfc4034_does(texts: list[str]) -> None:
    wires = [wire.from_text(text) for text in texts]
    ours = sorted(wires, key=dnssec.canonical_key)
    theirs = sorted(wires, key=lambda w: dns.name.from_wire(w, 0)[0])
    assert [dns.name.from_wire(w, 0)[0] for w in ours] == [
        dns.name.from_wire(w, 0)[0] for w in theirs
    ]


@given(names)
def test_predecessor_and_successor_surround_a_name_beneath_the_apex(text: str) -> None:
    name = wire.from_text(text)
    apex = wire.from_text(APEX)
    before, after = dnssec.predecessor(name, apex), dnssec.successor(name)
    as_name = dns.name.from_wire(name, 0)[0]
    assert dns.name.from_wire(after, 0)[0] > as_name
    sibling = dns.name.from_wire(dnssec.next_sibling(name), 0)[0]
    assert sibling > dns.name.from_text("deep.below", origin=as_name)
    assert sibling.parent() == as_name.parent()
    assert wire.is_at_or_below(before.lower(), apex.lower())
    if name.lower() != apex.lower():
        assert dns.name.from_wire(before, 0)[0] < as_name


@given(st.sets(st.integers(1, 65535), max_size=12))
def test_type_bitmap_is_nsecs(types: set[int]) -> None:
    rdata = dnssec.nsec_rdata(b"\x00", types)
    parsed: Any = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.NSEC, rdata, 0, len(rdata))
    listed = {int(t) for window in parsed.windows for t in _window_types(*window)}
    assert listed == {*types, dns.rdatatype.RRSIG, dns.rdatatype.NSEC}


def _window_types(window: int, bits: bytes) -> list[int]:
    return [
        window * 256 + i * 8 + j for i, octet in enumerate(bits) for j in range(8)
        if octet & (0x80 >> j)
    ]

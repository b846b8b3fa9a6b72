"""The zone transfer and NOTIFY cores never raise on hostile bytes: a transfer request,
a secondary's signed query and a NOTIFY answer are read from whatever arrives, and the
access rule holds for every request (only a listed address with its verified key). An
IXFR over UDP is answered in one datagram that never exceeds the query's UDP payload: the
difference whole, or the SOA with TC."""

from __future__ import annotations

import time

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
from hypothesis import given, settings
from hypothesis import strategies as st

from valis_core.dns.journal import Difference
from valis_core.dns.notify import answer_to, notify_message
from valis_core.dns.records import RecordRow
from valis_core.dns.transfer import (
    Grant,
    Listed,
    Refusal,
    datagram_response,
    decide,
    signed_answer,
    transfer_messages,
)
from valis_core.dns.zone import ZoneIndex

ZONE = "example.test."
INDEX = ZoneIndex.from_zone_text(
    f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n"
    "@ NS ns1\nns1 A 192.0.2.53\nwww A 192.0.2.80\n", ZONE,
)
KEY = Listed(ZONE, "192.0.2.2", "xfr.", "hmac-sha256", bytes(range(32)))
NOW = time.time()


def signed_axfr(secret: bytes = KEY.secret, name: str = KEY.key_name) -> bytes:
    query = dns.message.make_query(ZONE, "AXFR")
    query.use_tsig(dns.tsig.Key(name, secret, "hmac-sha256"))
    return query.to_wire()


@given(st.binary(max_size=600))
def test_hostile_bytes_are_refused_never_raised(data: bytes) -> None:
    assert isinstance(decide(INDEX, data, "192.0.2.2", [KEY], now=NOW), Refusal)
    assert signed_answer(INDEX, data, "192.0.2.2", [KEY], lambda q: q, now=NOW) is None


@given(st.binary(max_size=60), st.integers(min_value=12, max_value=200))
def test_a_mangled_signed_request_is_never_granted(noise: bytes, at: int) -> None:
    good = signed_axfr()
    mangled = good[:at] + noise + good[at + len(noise):]
    # The TSIG record's TTL (bytes 39-42 here) is digested as 0 whatever it says (RFC
    # 8945 section 4.3.2), so it is put back rather than counted as a forgery.
    mangled = mangled[:39] + good[39:43] + mangled[43:]
    decided = decide(INDEX, mangled, "192.0.2.2", [KEY], now=NOW)
    assert isinstance(decided, Refusal) or mangled == good


@given(st.sampled_from(["192.0.2.2", "192.0.2.3", "::ffff:192.0.2.2", "2001:db8::2"]),
       st.sampled_from(["right", "wrong secret", "other name", "unsigned"]))
def test_only_the_listed_address_with_its_key_is_granted(peer: str, key: str) -> None:
    if key == "unsigned":
        request = dns.message.make_query(ZONE, "AXFR").to_wire()
    elif key == "wrong secret":
        request = signed_axfr(secret=bytes(32))
    elif key == "other name":
        request = signed_axfr(name="other.")
    else:
        request = signed_axfr()
    decided = decide(INDEX, request, peer, [KEY], now=NOW)
    granted = peer in ("192.0.2.2", "::ffff:192.0.2.2") and key == "right"
    assert isinstance(decided, Grant) == granted
    if isinstance(decided, Refusal):
        response = dns.message.from_wire(decided.response or b"", keyring=False)
        assert response.rcode() == dns.rcode.REFUSED


def test_a_granted_transfer_is_the_soa_then_the_zone_then_the_soa() -> None:
    decided = decide(INDEX, signed_axfr(), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(decided, Grant)
    (message,) = list(transfer_messages(decided, now=NOW))
    response = dns.message.from_wire(message, keyring=False, one_rr_per_rrset=True)
    types = [rrset.rdtype for rrset in response.answer]
    assert (types[0], types[-1]) == (6, 6)
    assert types.count(6) == 2
    assert len(types) == 5  # the four records, the SOA twice


@given(st.binary(max_size=600))
def test_a_notify_answer_is_read_from_any_bytes(data: bytes) -> None:
    sent = notify_message(INDEX.served()[0], 4242, KEY.key())
    assert answer_to(sent, data) is None or data[:2] == (4242).to_bytes(2, "big")


def _row(owner: str, rtype: str, rdata: str) -> RecordRow:
    return RecordRow(ZONE, owner, rtype, 300, rdata)


@settings(max_examples=500)
@given(st.integers(min_value=0, max_value=7), st.integers(min_value=0, max_value=120),
       st.sampled_from([None, 512, 1000, 1232, 4096]), st.booleans())
def test_an_ixfr_over_udp_is_one_datagram_within_the_payload(
    theirs: int, added: int, payload: int | None, reaches: bool
) -> None:
    query = dns.message.make_query(ZONE, "IXFR")
    soa = f"ns1.{ZONE} hostmaster.{ZONE} {theirs} 7200 3600 1209600 300"
    query.authority.append(dns.rrset.from_text_list(ZONE, 300, "IN", "SOA", [soa]))
    if payload is not None:
        query.use_edns(0, payload=payload)
    query.use_tsig(KEY.key())
    grant = decide(INDEX, query.to_wire(), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(grant, Grant)
    difference = Difference(
        _row(ZONE, "SOA", soa), (_row(f"www.{ZONE}", "A", "192.0.2.80"),),
        tuple(_row(f"n{i}.{ZONE}", "A", f"203.0.113.{i % 250 + 1}") for i in range(added)),
        1,
    ) if reaches else None
    sent = datagram_response(grant, difference, now=NOW)
    limit = 512 if payload is None else min(max(payload, 512), 1232)
    assert len(sent.response) <= limit
    response = dns.message.from_wire(sent.response, keyring={KEY.key().name: KEY.key()},
                                     request_mac=query.mac, one_rr_per_rrset=True)
    assert (response.edns >= 0) == (payload is not None)
    types = [rrset.rdtype for rrset in response.answer]
    truncated = bool(response.flags & dns.flags.TC)
    if theirs == 7:  # up to date: the SOA is the whole answer
        assert (sent.kind, types, truncated) == ("up_to_date", [dns.rdatatype.SOA], False)
    elif sent.kind == "incremental":
        assert reaches
        assert not truncated
        assert len(types) == added + 5
        assert [i for i, t in enumerate(types) if t == dns.rdatatype.SOA] == [0, 1, 3, added + 4]
    else:
        assert (sent.kind, types, truncated) == ("truncated", [dns.rdatatype.SOA], True)
        # Only a difference too big for the datagram (or none) is answered TC: each added
        # record takes about 20 bytes, the SOAs, question, OPT and TSIG under 400.
        assert not reaches or added * 21 > limit - 400

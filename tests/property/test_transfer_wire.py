"""The zone transfer and NOTIFY cores never raise on hostile bytes: a transfer request,
a secondary's signed query and a NOTIFY answer are read from whatever arrives, and the
access rule holds for every request (only a listed address with its verified key). A
TSIG that fails is answered as RFC 8945 section 5.2 says (BADKEY, BADSIG unsigned;
BADTIME signed with the server's time), an ACL miss REFUSED. An IXFR over UDP is
answered in one datagram that never exceeds the query's UDP payload: the difference
whole, or the SOA with TC. Every response to an EDNS query carries an OPT."""

from __future__ import annotations

import functools
import time

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.property.tsig_check import mac_of, signed_at, tsig_of, verifies_as_badtime
from valis_core.dns.answer import MAX_SIGNED_OTHER, Transport, answer
from valis_core.dns.transfer import (
    Grant,
    Listed,
    Refusal,
    datagram_response,
    decide,
    signed_answer,
    transfer_messages,
)
from valis_core.dns.transfer.journal import Difference
from valis_core.dns.transfer.notify import answer_to, notify_message, rejection
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

ZONE = "example.test."
INDEX = ZoneIndex.from_zone_text(
    f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n"
    "@ NS ns1\nns1 A 192.0.2.53\nwww A 192.0.2.80\n", ZONE,
)
KEY = Listed(ZONE, "192.0.2.2", "xfr.", "hmac-sha256", bytes(range(32)))
ELSEWHERE = Listed("other.test.", "192.0.2.9", "elsewhere.", "hmac-sha256", bytes(range(1, 33)))
"""A key the node knows (listed for another zone, at another address) but not for ZONE."""
NOW = time.time()


def signed_axfr(secret: bytes = KEY.secret, name: str = KEY.key_name) -> bytes:
    query = dns.message.make_query(ZONE, "AXFR")
    query.use_tsig(dns.tsig.Key(name, secret, "hmac-sha256"))
    return query.to_wire()


@given(st.binary(max_size=600))
def test_hostile_bytes_are_refused_never_raised(data: bytes) -> None:
    assert isinstance(decide(INDEX, data, "192.0.2.2", [KEY], now=NOW), Refusal)
    answered = signed_answer(data, [KEY], lambda q: q, now=NOW, tcp=False)
    assert not isinstance(answered, bytes)  # nothing is answered signed without the key


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
       st.sampled_from(["right", "wrong secret", "other name", "unsigned", "elsewhere"]))
def test_only_the_listed_address_with_its_key_is_granted(peer: str, key: str) -> None:
    if key == "unsigned":
        request = dns.message.make_query(ZONE, "AXFR").to_wire()
    elif key == "wrong secret":
        request = signed_axfr(secret=bytes(32))
    elif key == "other name":
        request = signed_axfr(name="other.")
    elif key == "elsewhere":
        request = signed_axfr(secret=ELSEWHERE.secret, name=ELSEWHERE.key_name)
    else:
        request = signed_axfr()
    decided = decide(INDEX, request, peer, [KEY, ELSEWHERE], now=NOW)
    listed = peer in ("192.0.2.2", "::ffff:192.0.2.2")
    assert isinstance(decided, Grant) == (listed and key == "right")
    if isinstance(decided, Refusal):
        response = dns.message.from_wire(decided.response or b"", keyring=False)
        # The TSIG is judged first (RFC 8945 section 5.2), then the ACL: a miss is REFUSED
        # (as NSD answers it), signed when the key verified.
        expected = {"wrong secret": (dns.rcode.NOTAUTH, dns.rcode.BADSIG),
                    "other name": (dns.rcode.NOTAUTH, dns.rcode.BADKEY)}.get(
                        key, (dns.rcode.REFUSED, 0))
        error = response.tsig[0].error if response.tsig is not None else 0
        assert (response.rcode(), error) == expected
        assert (response.tsig is not None) == (key != "unsigned")
        if key in ("right", "elsewhere"):
            signer = (KEY if key == "right" else ELSEWHERE).key()
            request_mac = mac_of(request)
            dns.message.from_wire(decided.response or b"", keyring={signer.name: signer},
                                  request_mac=request_mac)  # raises unless signed by it


@pytest.mark.parametrize("edns", [False, True])
def test_tsig_failures_are_answered_as_rfc_8945_section_5_2_says(edns: bool) -> None:
    def query() -> dns.message.Message:
        made = dns.message.make_query(ZONE, "AXFR")
        if edns:
            made.use_edns(0, payload=1232)
        return made

    unknown = dns.tsig.Key("nobody.", KEY.secret, "hmac-sha256")
    wrong = dns.tsig.Key(KEY.key_name, bytes(32), "hmac-sha256")
    for key, kind, error in ((unknown, "unknown_key", dns.rcode.BADKEY),
                             (wrong, "bad_signature", dns.rcode.BADSIG)):
        request = query()
        decided = decide(INDEX, signed_at(request, key, NOW), "192.0.2.2", [KEY], now=NOW)
        assert isinstance(decided, Refusal)
        assert decided.kind == kind
        assert decided.response is not None
        assert tsig_of(decided.response) == (dns.rcode.NOTAUTH, error, b"", b"")
        assert (dns.message.from_wire(decided.response, keyring=False).edns >= 0) == edns

    # A time outside the fudge, either way: BADTIME, signed over the request's MAC, the
    # time signed the request's and the server's time in Other Data (section 5.2.3).
    for skew in (-301, 301):
        request = query()
        wire = signed_at(request, KEY.key(), NOW + skew)
        decided = decide(INDEX, wire, "192.0.2.2", [KEY], now=NOW)
        assert isinstance(decided, Refusal)
        assert decided.kind == "bad_time"
        assert decided.response is not None
        rcode, time_error, mac, other = tsig_of(decided.response)
        assert (rcode, time_error, len(mac), other) == (
            dns.rcode.NOTAUTH, dns.rcode.BADTIME, 32, int(NOW).to_bytes(6, "big"))
        assert verifies_as_badtime(decided.response, request, KEY.key())
        response = dns.message.from_wire(decided.response, keyring=False)
        assert response.tsig is not None
        assert response.tsig[0].time_signed == int(NOW + skew)
        assert (response.edns >= 0) == edns
    # Within the fudge it is granted, whichever side's clock is ahead.
    for skew in (-299, 299):
        wire = signed_at(query(), KEY.key(), NOW + skew)
        assert isinstance(decide(INDEX, wire, "192.0.2.2", [KEY], now=NOW), Grant)


def test_a_tsig_record_whose_ttl_is_not_0_is_formerr() -> None:
    wire = bytearray(signed_axfr())
    owner = b"\x03xfr\x00"
    ttl = wire.rindex(owner) + len(owner) + 4
    wire[ttl : ttl + 4] = (300).to_bytes(4, "big")  # outside the MAC (section 4.3.2)
    decided = decide(INDEX, bytes(wire), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(decided, Refusal)
    assert (decided.kind, decided.response and decided.response[3] & 0x0F) == (
        "malformed", dns.rcode.FORMERR)
    answered = signed_answer(bytes(wire), [KEY], lambda q: q, now=NOW, tcp=False)
    assert isinstance(answered, Refusal)
    assert answered.kind == "malformed"


def test_a_zone_not_served_is_notauth_signed_when_the_key_verified() -> None:
    query = dns.message.make_query("other.test.", "AXFR")
    query.use_tsig(KEY.key())
    decided = decide(INDEX, query.to_wire(), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(decided, Refusal)
    assert decided.kind == "not_served"
    response = dns.message.from_wire(decided.response or b"", keyring={KEY.key().name: KEY.key()},
                                     request_mac=query.mac)
    assert response.rcode() == dns.rcode.NOTAUTH
    unsigned = decide(INDEX, dns.message.make_query("other.test.", "AXFR").to_wire(),
                      "192.0.2.2", [KEY], now=NOW)
    assert isinstance(unsigned, Refusal)
    assert dns.message.from_wire(unsigned.response or b"").rcode() == dns.rcode.NOTAUTH


@given(st.sampled_from(["AXFR", "IXFR current", "IXFR behind"]), st.booleans(),
       st.sampled_from([100, 16384]))
def test_every_message_of_a_transfer_carries_an_opt_when_the_request_had_edns(
    kind: str, edns: bool, size: int
) -> None:
    query = dns.message.make_query(ZONE, kind.split(maxsplit=1)[0])
    if kind != "AXFR":
        serial = 7 if kind == "IXFR current" else 6
        soa = f"ns1.{ZONE} hostmaster.{ZONE} {serial} 7200 3600 1209600 300"
        query.authority.append(dns.rrset.from_text_list(ZONE, 300, "IN", "SOA", [soa]))
    if edns:
        query.use_edns(0, ednsflags=dns.flags.DO, payload=1232)
    query.use_tsig(KEY.key())
    grant = decide(INDEX, query.to_wire(), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(grant, Grant)
    messages = list(transfer_messages(grant, now=NOW, size=size))
    assert (len(messages) > 1) == (kind != "IXFR current" and size == 100)
    request_mac: bytes | None = query.mac
    ctx = None
    for message in messages:
        response = dns.message.from_wire(message, keyring={KEY.key().name: KEY.key()},
                                         request_mac=request_mac, xfr=True, tsig_ctx=ctx,
                                         multi=True)
        ctx, request_mac = response.tsig_ctx, None
        assert (response.edns >= 0) == edns
        assert bool(response.ednsflags & dns.flags.DO) == edns


def test_a_granted_transfer_is_the_soa_then_the_zone_then_the_soa() -> None:
    decided = decide(INDEX, signed_axfr(), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(decided, Grant)
    (message,) = list(transfer_messages(decided, now=NOW))
    response = dns.message.from_wire(message, keyring=False, one_rr_per_rrset=True)
    types = [rrset.rdtype for rrset in response.answer]
    assert (types[0], types[-1]) == (6, 6)
    assert types.count(dns.rdatatype.SOA) == 2
    assert len(types) == 5  # the four records, the SOA twice


@given(st.binary(max_size=600))
def test_a_notify_answer_is_read_from_any_bytes(data: bytes) -> None:
    sent = notify_message(INDEX.served()[0], 4242, KEY.key())
    assert answer_to(sent, data) is None or data[:2] == (4242).to_bytes(2, "big")
    assert rejection(sent, data) is None or data[:2] == (4242).to_bytes(2, "big")


def test_a_notify_rejected_for_the_clocks_says_by_how_much() -> None:
    sent = notify_message(INDEX.served()[0], 4242, KEY.key())
    reply = dns.message.make_response(dns.message.from_wire(sent.wire, keyring=False))
    reply.set_rcode(dns.rcode.NOTAUTH)
    reply.use_tsig(KEY.key(), tsig_error=dns.rcode.BADTIME,
                   other_data=(int(time.time()) + 600).to_bytes(6, "big"))
    said = rejection(sent, reply.to_wire())
    assert said is not None
    assert said.startswith("NOTAUTH with TSIG error BADTIME: its clock is +6")
    assert said.endswith("s from the node's, beyond the 300s fudge: check both clocks")
    assert answer_to(sent, reply.to_wire()) is None


def _row(owner: str, rtype: str, rdata: str) -> RecordRow:
    return RecordRow(ZONE, owner, rtype, 300, rdata)


INDEX_WITH_N = ZoneIndex.from_zone_text(
    f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n"
    "@ NS ns1\nns1 A 192.0.2.53\nwww A 192.0.2.80\n"
    + "".join(f"n{i} A 203.0.113.{i % 250 + 1}\n" for i in range(120)), ZONE,
)
"""INDEX with the hosts the IXFRs below add: an IXFR sends the RRsets it touches as the
zone serves them."""


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
    grant = decide(INDEX_WITH_N, query.to_wire(), "192.0.2.2", [KEY], now=NOW)
    assert isinstance(grant, Grant)
    difference = Difference(
        _row(ZONE, "SOA", soa), (_row(f"old.{ZONE}", "A", "192.0.2.81"),),
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


def test_the_answer_path_reads_a_signed_notify_for_its_tsig_when_it_is_small() -> None:
    def notify(records: int) -> bytes:
        query = dns.message.make_query(ZONE, "SOA")
        query.set_opcode(dns.opcode.NOTIFY)
        for serial in range(records):
            query.answer.append(dns.rrset.from_text(
                ZONE, 300, "IN", "SOA", f"ns1.{ZONE} hostmaster.{ZONE} {serial} 1 2 3 4"))
        query.use_tsig(KEY.key())
        return query.to_wire()

    small, large = notify(1), notify(40)
    assert len(small) <= MAX_SIGNED_OTHER < len(large)
    for wire, rcode in ((small, dns.rcode.NOTAUTH), (large, dns.rcode.NOTIMP)):
        response = answer(INDEX, wire, transport=Transport.UDP)
        assert response is not None
        assert dns.message.from_wire(response, keyring=False).rcode() == rcode
    # With the key, the small one is NOTIMP, signed.
    answered = signed_answer(small, [KEY], lambda q: answer(INDEX, q, transport=Transport.UDP),
                             now=NOW, tcp=False)
    assert isinstance(answered, bytes)
    request_mac = mac_of(small)
    signed = dns.message.from_wire(answered, keyring={KEY.key().name: KEY.key()},
                                   request_mac=request_mac)
    assert signed.rcode() == dns.rcode.NOTIMP


def test_a_signed_answer_the_tsig_would_push_past_the_udp_limit_is_tc_signed() -> None:
    """RFC 8945 section 5.3: the TSIG is never dropped to make room; the answer is."""
    texts = "".join(f'big TXT "{i:02d} {"x" * 40}"\n' for i in range(8))
    index = ZoneIndex.from_zone_text(
        f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n"
        f"@ NS ns1\nns1 A 192.0.2.53\n{texts}", ZONE)
    query = dns.message.make_query(f"big.{ZONE}", "TXT", use_edns=False)
    unsigned = answer(index, query.to_wire(), transport=Transport.UDP)
    assert unsigned is not None
    assert 512 - 100 < len(unsigned) <= 512  # fits alone, not with a TSIG
    query.use_tsig(KEY.key())
    for tcp, truncated in ((False, True), (True, False)):
        transport = Transport.TCP if tcp else Transport.UDP
        answered = signed_answer(query.to_wire(), [KEY],
                                 functools.partial(answer, index, transport=transport),
                                 now=NOW, tcp=tcp)
        assert isinstance(answered, bytes)
        assert tcp or len(answered) <= 512
        response = dns.message.from_wire(answered, keyring={KEY.key().name: KEY.key()},
                                         request_mac=query.mac)
        assert bool(response.flags & dns.flags.TC) == truncated
        assert len(response.answer) == (0 if truncated else 1)
        assert response.flags & dns.flags.AA

"""The zone transfer and NOTIFY cores never raise on hostile bytes: a transfer request,
a secondary's signed query and a NOTIFY answer are read from whatever arrives, and the
access rule holds for every request (only a listed address with its verified key)."""

from __future__ import annotations

import time

import dns.message
import dns.rcode
import dns.tsig
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.notify import answer_to, notify_message
from valis_core.dns.transfer import (
    Grant,
    Listed,
    Refusal,
    datagram_ixfr,
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
    for decided in (decide(INDEX, data, "192.0.2.2", [KEY], now=NOW),
                    datagram_ixfr(INDEX, data, "192.0.2.2", [KEY], now=NOW)):
        assert isinstance(decided, Refusal)
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

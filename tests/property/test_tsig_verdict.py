"""The owner terminus and the zone transfers judge a TSIG alike, as RFC 8945 section 5.2
orders it and Knot and BIND answer: a TSIG record whose TTL is not 0 is FORMERR; a key
name or algorithm not held NOTAUTH with BADKEY, and a MAC that does not verify NOTAUTH
with BADSIG, both unsigned (MAC empty); a time signed outside the fudge NOTAUTH with
BADTIME, signed over the request's MAC, its time signed the request's and its Other Data
the node's time. Each case goes to both (an UPDATE to the terminus, an AXFR to the
transfers, signed with the same key) and both answer it the same way."""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
import dns.exception
import dns.message
import dns.rcode
import dns.tsig
import dns.update
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.tsig_check import signed_at, tsig_of, verifies_as_badtime, with_tsig_ttl
from valis_core.dns.transfer import Grant, Listed, Refusal, decide
from valis_core.dns.transfer.tsig_verdict import verify
from valis_core.dns.zone import ZoneIndex
from valis_core.owner.key import TsigKey
from valis_core.owner.message import Received, receive

ZONE = "example.test."
INDEX = ZoneIndex.from_zone_text(
    f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n"
    "@ NS ns1\nns1 A 192.0.2.53\n", ZONE,
)
SECRET = bytes(range(32))
OWNER = TsigKey("valis-owner.", "hmac-sha256", SECRET)
LISTED = Listed(ZONE, "192.0.2.2", "valis-owner.", "hmac-sha256", SECRET)
KEY = LISTED.key()
NOW = float(int(time.time()))


def transfers(wire: bytes) -> bytes | None:
    """What the transfers answer: ``None`` when the request is granted."""
    decided = decide(INDEX, wire, "192.0.2.2", [LISTED], now=NOW)
    if isinstance(decided, Grant):
        return None
    assert isinstance(decided, Refusal)
    return decided.response


def terminus(wire: bytes) -> bytes | None:
    """What the owner terminus answers: ``None`` when the update is received."""
    got = receive(wire, OWNER, clock=lambda: NOW)
    if isinstance(got, Received):
        return None
    return got


def axfr(edns: bool) -> dns.message.Message:
    return dns.message.make_query(ZONE, "AXFR", use_edns=0 if edns else False)


def update(edns: bool) -> dns.message.Message:
    made = dns.update.UpdateMessage(ZONE)
    made.add("new", 300, "A", "192.0.2.9")
    if edns:
        made.use_edns(0)
    return made


ENDPOINTS: dict[str, tuple[Callable[[bool], dns.message.Message],
                           Callable[[bytes], bytes | None]]] = {
    "transfers": (axfr, transfers),
    "owner terminus": (update, terminus),
}


@attrs.frozen
class Case:
    key: dns.tsig.Key = KEY
    skew: float = 0
    ttl: int = 0
    fudge: int = 300


CASES = {
    "a key name not held": Case(key=dns.tsig.Key("nobody.", SECRET, "hmac-sha256")),
    "an algorithm not held": Case(key=dns.tsig.Key("valis-owner.", SECRET, "hmac-sha512")),
    "a wrong secret": Case(key=dns.tsig.Key("valis-owner.", bytes(32), "hmac-sha256")),
    "a clock 301 s behind": Case(skew=-301),
    "a clock 301 s ahead": Case(skew=301),
    "a TSIG whose TTL is not 0": Case(ttl=300),
    "a clock 300 s behind": Case(skew=-300),
    "a clock 300 s ahead": Case(skew=300),
    "a fudge of an hour and a clock 1000 s behind": Case(skew=-1000, fudge=3600),
    "a fudge of an hour and a clock 301 s ahead": Case(skew=301, fudge=3600),
    "a fudge of 10 s and a clock 11 s ahead": Case(skew=11, fudge=10),
    "a fudge of 10 s and a clock 10 s behind": Case(skew=-10, fudge=10),
}


def sent(message: dns.message.Message, case: Case) -> bytes:
    wire = signed_at(message, case.key, NOW + case.skew, case.fudge)
    return with_tsig_ttl(wire, case.key, case.ttl) if case.ttl else wire


@pytest.mark.parametrize("edns", [False, True])
@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
@pytest.mark.parametrize("case", list(CASES))
def test_each_tsig_case_is_answered_as_rfc_8945_says(case: str, endpoint: str, edns: bool) -> None:
    make, judge = ENDPOINTS[endpoint]
    request = make(edns)
    signed = CASES[case]
    response = judge(sent(request, signed))
    if abs(signed.skew) <= min(signed.fudge, 300) and signed.key == KEY and not signed.ttl:
        assert response is None  # within the fudge (300 s at most), either clock ahead
        return
    assert response is not None
    message = dns.message.from_wire(response, keyring=False)
    assert (message.edns >= 0) == edns
    assert request.tsig is not None
    if signed.ttl:
        assert (message.rcode(), message.tsig) == (dns.rcode.FORMERR, None)
        return
    rcode, error, mac, other = tsig_of(response)
    assert message.tsig is not None
    assert message.tsig[0].time_signed == request.tsig[0].time_signed  # the request's
    if signed.skew:
        assert (rcode, error, other) == (
            dns.rcode.NOTAUTH, dns.rcode.BADTIME, int(NOW).to_bytes(6, "big"))
        assert verifies_as_badtime(response, request, KEY)
    else:
        expected = dns.rcode.BADSIG if signed.key.name == KEY.name and (
            signed.key.algorithm == KEY.algorithm) else dns.rcode.BADKEY
        assert (rcode, error, mac, other) == (dns.rcode.NOTAUTH, expected, b"", b"")


@settings(deadline=None)
@given(st.data())
def test_a_mangled_signed_message_is_accepted_only_when_its_mac_verifies(
    data: st.DataObject,
) -> None:
    wire = bytearray(sent(update(False), Case()))
    at = data.draw(st.integers(0, len(wire) - 1))
    wire[at] ^= data.draw(st.integers(1, 255))
    try:
        message = dns.message.from_wire(bytes(wire), keyring=False)
    except dns.exception.DNSException:
        return
    try:
        verdict = verify(bytes(wire), message, lambda wanted: [KEY], now=NOW, tcp=True)
    except ValueError:
        return  # the question cannot be echoed: the caller answers FORMERR, header only
    if isinstance(verdict, dns.tsig.Key):
        dns.message.from_wire(bytes(wire), keyring={KEY.name: KEY})  # raises unless it verifies

"""Owner terminus messages: only a correctly signed UPDATE is received; anything else
gets the answer RFC 8945 and RFC 2136 give it, and no input makes reading raise."""

from __future__ import annotations

import time

import dns.message
import dns.rcode
import dns.tsig
import dns.update
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from valis_core.dns.wire.records import CLASS_ANY as ANY
from valis_core.dns.wire.records import IN
from valis_core.owner.key import derive_owner_tsig
from valis_core.owner.message import Received, receive, respond
from valis_core.owner.update import UpdateRR

KEY = derive_owner_tsig(Ed25519PrivateKey.from_private_bytes(b"\x11" * 32))
SIGNING = dns.tsig.Key(KEY.name, KEY.secret, KEY.algorithm)


def signed_update(keyring: dns.tsig.Key | None = SIGNING) -> dns.update.UpdateMessage:
    update = dns.update.UpdateMessage("example.test.", keyring=keyring)
    update.present("www")
    update.add("new", 300, "A", "192.0.2.9")
    update.delete("old", "TXT")
    return update


def test_a_correctly_signed_update_is_received_with_its_sections() -> None:
    update = signed_update()
    received = receive(update.to_wire(), KEY)
    assert isinstance(received, Received)
    request = received.request
    assert request.zone == "example.test."
    assert request.prerequisites == (UpdateRR("www.example.test.", ANY, 255, 0),)
    assert request.updates == (
        UpdateRR("new.example.test.", IN, 1, 300, bytes([192, 0, 2, 9])),
        UpdateRR("old.example.test.", ANY, 16, 0),
    )
    response = dns.message.from_wire(
        respond(received, dns.rcode.NXRRSET, now=time.time()), keyring=SIGNING,
        request_mac=update.mac,
    )
    assert response.rcode() == dns.rcode.NXRRSET
    assert response.had_tsig


@pytest.mark.parametrize(
    ("keyring", "error"),
    [
        (dns.tsig.Key(KEY.name, b"\x00" * 32, KEY.algorithm), dns.tsig.PeerBadSignature),
        (dns.tsig.Key("someone-else.", KEY.secret, KEY.algorithm), dns.tsig.PeerBadKey),
        (dns.tsig.Key(KEY.name, KEY.secret, "hmac-sha512"), dns.tsig.PeerBadKey),
    ],
)
def test_a_wrong_key_is_notauth_with_its_tsig_error(
    keyring: dns.tsig.Key, error: type[Exception]
) -> None:
    update = signed_update(keyring)
    answer = receive(update.to_wire(), KEY)
    assert isinstance(answer, bytes)
    assert dns.message.from_wire(answer, keyring=False).rcode() == dns.rcode.NOTAUTH
    with pytest.raises(error):
        dns.message.from_wire(answer, keyring=keyring, request_mac=update.mac)


def test_an_unsigned_update_is_refused_and_a_query_is_notimp() -> None:
    answer = receive(signed_update(None).to_wire(), KEY)
    assert isinstance(answer, bytes)
    assert dns.message.from_wire(answer).rcode() == dns.rcode.REFUSED
    query = dns.message.make_query("example.test.", "SOA")
    query.use_tsig(SIGNING)
    answer = receive(query.to_wire(), KEY)
    assert isinstance(answer, bytes)
    response = dns.message.from_wire(answer, keyring=SIGNING, request_mac=query.mac)
    assert response.rcode() == dns.rcode.NOTIMP


@settings(deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_raise_and_are_never_received(data: bytes) -> None:
    assert not isinstance(receive(data, KEY), Received)


@settings(deadline=None)
@given(st.data())
def test_a_signed_update_changed_anywhere_is_never_received_as_something_else(
    data: st.DataObject,
) -> None:
    original = signed_update().to_wire()
    expected = receive(original, KEY)
    assert isinstance(expected, Received)
    wire = bytearray(original)
    at = data.draw(st.integers(0, len(wire) - 1))
    wire[at] ^= data.draw(st.integers(1, 255))
    answer = receive(bytes(wire), KEY)
    if isinstance(answer, Received):
        # A few bytes lie outside the MAC (the message id, which RFC 8945 signs as the
        # original id; the TSIG RR's own TTL); a change there may verify, but it never
        # changes what is asked.
        assert answer.request == expected.request


def test_an_update_signed_an_hour_ago_is_notauth_badtime_and_signed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    update = signed_update()
    an_hour_ago = time.time() - 3600
    with monkeypatch.context() as patched:
        patched.setattr(time, "time", lambda: an_hour_ago)
        wire = update.to_wire()
    answer = receive(wire, KEY)
    assert isinstance(answer, bytes)
    assert dns.message.from_wire(answer, keyring=False).rcode() == dns.rcode.NOTAUTH
    with pytest.raises(dns.tsig.PeerBadTime):
        dns.message.from_wire(answer, keyring=SIGNING, request_mac=update.mac)


@pytest.mark.parametrize(("skew", "accepted"), [(0, True), (300, True), (-300, True),
                                                (301, False), (-301, False)])
def test_the_signed_time_is_judged_against_the_injected_clock(
    skew: int, accepted: bool
) -> None:
    update = signed_update()
    wire = update.to_wire()
    assert update.tsig is not None
    signed_at = update.tsig[0].time_signed
    answer = receive(wire, KEY, clock=lambda: signed_at + skew)
    if accepted:
        assert isinstance(answer, Received)
    else:
        assert isinstance(answer, bytes)
        assert dns.message.from_wire(answer, keyring=False).rcode() == dns.rcode.NOTAUTH
        with pytest.raises(dns.tsig.PeerBadTime):
            dns.message.from_wire(answer, keyring=SIGNING, request_mac=update.mac)

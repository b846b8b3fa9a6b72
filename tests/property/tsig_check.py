"""TSIG as a client sees it, for the tests: a message signed at a chosen time (and its
TSIG's TTL changed), a reply's TSIG read unchecked, and a BADTIME reply's MAC checked
(dnspython stops at the error)."""

from __future__ import annotations

import dns.message
import dns.renderer
import dns.tsig


def signed_at(
    query: dns.message.Message, key: dns.tsig.Key, when: float, fudge: int = 300
) -> bytes:
    """``query`` signed with ``key`` as a client whose clock says ``when`` signs it, with
    the time fudge it asks for."""
    query.use_tsig(key, fudge=fudge)
    clock = dns.renderer.time.time  # type: ignore[attr-defined]
    dns.renderer.time.time = lambda: when  # type: ignore[attr-defined]
    try:
        return query.to_wire()
    finally:
        dns.renderer.time.time = clock  # type: ignore[attr-defined]


def with_tsig_ttl(wire: bytes, key: dns.tsig.Key, ttl: int) -> bytes:
    """``wire`` with its TSIG record's TTL set to ``ttl`` (outside the MAC, RFC 8945 section
    4.3.2: the message still verifies)."""
    owner = key.name.to_wire() or b""
    at = wire.rindex(owner) + len(owner) + 4
    return wire[:at] + ttl.to_bytes(4, "big") + wire[at + 4 :]


def tsig_of(response: bytes) -> tuple[int, int, bytes, bytes]:
    """The RCODE, TSIG error, MAC and Other Data of a response, its TSIG unchecked."""
    message = dns.message.from_wire(response, keyring=False)
    assert message.tsig is not None
    tsig = message.tsig[0]
    return message.rcode(), tsig.error, tsig.mac, tsig.other


def mac_of(message: bytes) -> bytes:
    """The MAC of a signed message, unchecked."""
    parsed = dns.message.from_wire(message, keyring=False)
    assert parsed.tsig is not None
    return bytes(parsed.tsig[0].mac)


def signed_time(message: bytes) -> int:
    """The Time Signed of a signed message, unchecked."""
    parsed = dns.message.from_wire(message, keyring=False)
    assert parsed.tsig is not None
    return int(parsed.tsig[0].time_signed)


def verifies_as_badtime(response: bytes, query: dns.message.Message, key: dns.tsig.Key) -> bool:
    """Whether a BADTIME response's MAC covers the request's MAC, the response and its
    TSIG variables (RFC 8945 section 5.3.2), as Knot and BIND sign one. dnspython stops at
    the error before the MAC, so the MAC is computed here."""
    message = dns.message.from_wire(response, keyring=False)
    assert message.tsig is not None
    tsig = message.tsig[0]
    tsig_wire = tsig.to_wire()
    assert tsig_wire is not None
    key_wire = key.name.to_wire()
    assert key_wire is not None
    size = len(tsig_wire) + 10 + len(key_wire)
    unsigned = (response[:10] + (int.from_bytes(response[10:12], "big") - 1).to_bytes(2, "big")
                + response[12:-size])
    expected, _ = dns.tsig.sign(  # type: ignore[no-untyped-call]
        unsigned, key, tsig.replace(mac=b""), tsig.time_signed, query.mac)
    return bool(expected.mac == tsig.mac)

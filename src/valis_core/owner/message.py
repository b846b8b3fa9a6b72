"""Owner terminus messages: a TSIG-verified UPDATE read into an ``UpdateRequest``, and
the response to it. dnspython does the wire and the TSIG (RFC 8945); no IO here.

What a message gets, in order:

- fewer than 12 bytes, or a response (QR set): nothing, it cannot be answered;
- bytes that do not parse: FORMERR (header only);
- a TSIG naming another key or algorithm: NOTAUTH with TSIG error BADKEY, unsigned;
- a TSIG whose MAC does not verify: NOTAUTH, BADSIG, unsigned;
- a TSIG signed outside the time fudge: NOTAUTH, BADTIME, signed (RFC 8945 §5.2.3);
- an opcode other than UPDATE: NOTIMP (signed when the request was);
- an unsigned UPDATE: REFUSED, as BIND and Knot answer an update their policy does not
  allow — every write must be authenticated;
- a correctly signed UPDATE: ``Received``, answered later with ``respond`` (signed).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import cast

import attrs
import dns.exception
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TSIG
import dns.rrset
import dns.tsig
import dns.update
from dns.rcode import Rcode

from valis_core.owner.key import TsigKey
from valis_core.owner.update import UpdateRequest, UpdateRR

_HEADER = struct.Struct("!HHHHHH")
_QR = 0x8000
_OPCODE_MASK = 0x7800
_FUDGE = 300


@attrs.frozen
class Received:
    """A correctly signed UPDATE: the parsed message (to answer) and its request."""

    query: dns.update.UpdateMessage
    request: UpdateRequest


def _dns_key(key: TsigKey) -> dns.tsig.Key:
    return dns.tsig.Key(key.name, key.secret, key.algorithm)


def _header_only(data: bytes, rcode: Rcode) -> bytes:
    """A response of only a header, for a query too broken to parse."""
    ident, flags = _HEADER.unpack_from(data)[:2]
    return _HEADER.pack(ident, _QR | (flags & _OPCODE_MASK) | int(rcode), 0, 0, 0, 0)


def _tsig_rdata(query: dns.message.Message) -> dns.rdtypes.ANY.TSIG.TSIG:
    assert query.tsig is not None
    return cast(dns.rdtypes.ANY.TSIG.TSIG, query.tsig[0])


def _unsigned_error(query: dns.message.Message, error: int) -> bytes:
    """NOTAUTH with a TSIG carrying ``error`` and no MAC (BADKEY, BADSIG)."""
    response = dns.message.make_response(query)
    response.set_rcode(Rcode.NOTAUTH)
    theirs = _tsig_rdata(query)
    assert query.tsig is not None
    rdata = dns.rdtypes.ANY.TSIG.TSIG(  # type: ignore[no-untyped-call]
        dns.rdataclass.ANY,
        dns.rdatatype.TSIG,
        theirs.algorithm,
        theirs.time_signed,
        theirs.fudge,
        b"",
        query.id,
        error,
        b"",
    )
    response.tsig = dns.rrset.from_rdata(query.tsig.name, 0, rdata)
    return response.to_wire()


def _bad_time(query: dns.message.Message, key: TsigKey, now: float) -> bytes:
    """NOTAUTH, BADTIME, signed, with the server's time in the other data."""
    response = dns.message.make_response(query)
    response.set_rcode(Rcode.NOTAUTH)
    response.request_mac = _tsig_rdata(query).mac
    response.use_tsig(
        _dns_key(key),
        fudge=_FUDGE,
        original_id=query.id,
        tsig_error=dns.rcode.BADTIME,
        other_data=struct.pack("!Q", int(now))[2:],
    )
    return response.to_wire()


def _plain(query: dns.message.Message, rcode: Rcode) -> bytes:
    response = dns.message.make_response(query)
    response.set_rcode(rcode)
    return response.to_wire()


def receive(
    data: bytes, key: TsigKey, *, clock: Callable[[], float] = time.time
) -> Received | bytes | None:
    """Read one message: ``Received`` for a correctly signed UPDATE, otherwise the
    response to send (or ``None`` when nothing can be answered). Never raises.

    ``clock`` is the time the signature's time is judged against (RFC 8945 section
    5.2.3), so a test moves time instead of waiting for it."""
    if len(data) < _HEADER.size or data[2] & 0x80:
        return None
    try:
        return _receive(data, key, clock)
    except Exception:
        return _header_only(data, Rcode.FORMERR)


def _receive(data: bytes, key: TsigKey, clock: Callable[[], float]) -> Received | bytes:
    try:
        query = dns.message.from_wire(data, keyring=False, one_rr_per_rrset=True)
    except dns.exception.DNSException:
        return _header_only(data, Rcode.FORMERR)
    if query.had_tsig:
        theirs = _tsig_rdata(query)
        assert query.tsig is not None
        if query.tsig.name != dns.name.from_text(key.name) or theirs.algorithm != (
            dns.name.from_text(key.algorithm)
        ):
            return _unsigned_error(query, dns.rcode.BADKEY)
        now = clock()
        try:
            query = dns.message.from_wire(
                data, keyring={query.tsig.name: _dns_key(key)}, one_rr_per_rrset=True
            )
        except dns.tsig.BadTime:
            # dnspython checks the MAC first and the time against its own clock; the MAC
            # is good, and the time is judged below against ``clock``.
            pass
        except dns.exception.DNSException:
            return _unsigned_error(query, dns.rcode.BADSIG)
        if abs(theirs.time_signed - int(now)) > theirs.fudge:
            return _bad_time(query, key, now)
    if query.opcode() != dns.opcode.UPDATE:
        return _plain(query, Rcode.NOTIMP)
    if not query.had_tsig:
        return _plain(query, Rcode.REFUSED)
    assert isinstance(query, dns.update.UpdateMessage)
    if len(query.zone) != 1:
        return _plain(query, Rcode.FORMERR)
    zone = query.zone[0]
    request = UpdateRequest(
        zone=zone.name.to_text(),
        zone_class=int(zone.rdclass),
        prerequisites=_rrs(query.prerequisite),
        updates=_rrs(query.update),
    )
    return Received(query=query, request=request)


def _rrs(section: list[dns.rrset.RRset]) -> tuple[UpdateRR, ...]:
    found: list[UpdateRR] = []
    for rrset in section:
        rclass = int(rrset.deleting if rrset.deleting is not None else rrset.rdclass)
        base = UpdateRR(
            name=rrset.name.to_text(), rclass=rclass, rtype=int(rrset.rdtype), ttl=rrset.ttl
        )
        if not len(rrset):
            found.append(base)
        for rdata in rrset:
            found.append(attrs.evolve(base, rdata=rdata.to_wire()))
    return tuple(found)


def respond(received: Received, rcode: Rcode) -> bytes:
    """The signed response to a received UPDATE."""
    return _plain(received.query, rcode)

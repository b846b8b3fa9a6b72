"""Owner terminus messages: a TSIG-verified UPDATE read into an ``UpdateRequest``, and
the response to it. dnspython does the wire; the TSIG is judged, and every response to a
verified message signed, by ``valis_core.dns.transfer.tsig_verdict`` (RFC 8945), as the zone
transfers judge theirs; no IO here.

What a message gets, in order:

- fewer than 12 bytes, or a response (QR set): nothing, it cannot be answered;
- bytes that do not parse: FORMERR (header only);
- a TSIG record whose TTL is not 0: FORMERR;
- a TSIG naming another key or algorithm: NOTAUTH with TSIG error BADKEY, unsigned;
- a TSIG whose MAC does not verify: NOTAUTH, BADSIG, unsigned;
- a TSIG signed outside the time fudge: NOTAUTH, BADTIME, signed, its time signed the
  request's and its Other Data the node's time (RFC 8945 section 5.2.3);
- an opcode other than UPDATE: NOTIMP (signed when the request was);
- an unsigned UPDATE: REFUSED, as BIND and Knot answer an update their policy does not
  allow — every write must be authenticated;
- a correctly signed UPDATE: ``Received``, answered later with ``respond`` (signed).
"""
from __future__ import annotations

import attrs
import dns.exception
import dns.message
import dns.opcode
import dns.rrset
import dns.tsig
import dns.update
from dns.rcode import Rcode

from valis_core.clock import Clock, wall
from valis_core.dns.transfer.tsig_verdict import Rejection, Signer, signs_as, verify
from valis_core.dns.wire.records import FORMERR, header_only
from valis_core.owner.key import TsigKey
from valis_core.owner.update import UpdateRequest, UpdateRR


@attrs.frozen
class Received:
    """A correctly signed UPDATE: the parsed message (to answer) and its request."""

    query: dns.update.UpdateMessage
    request: UpdateRequest
    key: dns.tsig.Key
    """The key that signed it, which signs the response."""


def _dns_key(key: TsigKey) -> dns.tsig.Key:
    return dns.tsig.Key(key.name, key.secret, key.algorithm)


def _plain(
    query: dns.message.Message, rcode: Rcode, key: dns.tsig.Key | None, now: float
) -> bytes:
    """The response with ``rcode``, signed with ``key`` over the query's MAC when given."""
    response = dns.message.make_response(query)
    response.set_rcode(rcode)
    unsigned = response.to_wire()
    if key is None:
        return unsigned
    assert query.tsig is not None
    return Signer(key, query.tsig[0].mac, query.id, now).sign(unsigned)


def receive(
    data: bytes, key: TsigKey, *, clock: Clock = wall
) -> Received | bytes | None:
    """Read one message: ``Received`` for a correctly signed UPDATE, otherwise the
    response to send (or ``None`` when nothing can be answered). Never raises.

    ``clock`` is the time the signature's time is judged against (RFC 8945 section
    5.2.3), so a test moves time instead of waiting for it."""
    if len(data) < 12 or data[2] & 0x80:  # no query: nothing to answer
        return None
    try:
        return _receive(data, key, clock)
    except Exception:
        return header_only(data, FORMERR)


def _receive(
    data: bytes, owner: TsigKey, clock: Clock
) -> Received | bytes | None:
    try:
        query = dns.message.from_wire(data, keyring=False, one_rr_per_rrset=True)
    except dns.exception.DNSException:
        return header_only(data, FORMERR)
    mine = signs_as(owner.name, owner.algorithm)
    now = clock()
    key = verify(data, query, lambda wanted: [_dns_key(owner)] if wanted == mine else [],
                 now=now, tcp=True)
    if isinstance(key, Rejection):
        return key.response
    if query.opcode() != dns.opcode.UPDATE:
        return _plain(query, Rcode.NOTIMP, key, now)
    if key is None:
        return _plain(query, Rcode.REFUSED, None, now)
    assert isinstance(query, dns.update.UpdateMessage)
    if len(query.zone) != 1:
        return _plain(query, Rcode.FORMERR, key, now)
    zone = query.zone[0]
    request = UpdateRequest(
        zone=zone.name.to_text(),
        zone_class=int(zone.rdclass),
        prerequisites=_rrs(query.prerequisite),
        updates=_rrs(query.update),
    )
    return Received(query=query, request=request, key=key)


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


def respond(received: Received, rcode: Rcode, *, now: float) -> bytes:
    """The response to a received UPDATE, signed at ``now`` with the key that signed it."""
    return _plain(received.query, rcode, received.key, now)

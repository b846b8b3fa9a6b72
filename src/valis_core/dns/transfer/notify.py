"""NOTIFY out (RFC 1996): the message telling a secondary that a zone changed, and
whether a datagram is the secondary's answer to it. Values in, bytes out; no IO.

The message is opcode NOTIFY with AA set, the zone's SOA as the question and the SOA
record in the answer section (RFC 1996 section 3.7: a hint of the new serial), signed
with the secondary's TSIG key when it has one. An answer is a response (QR set) with the
same ID and opcode; when the NOTIFY was signed, only an answer whose TSIG verifies
against it counts, so a forged datagram cannot stop the retries. A reply carrying a TSIG
error (the secondary does not know the key, the MAC does not verify with its secret, or
the clocks differ by more than the fudge: RFC 8945 section 5.2) cannot be verified, so it
never counts either; ``rejection`` reads it, so the operator learns why no answer came.
"""

from __future__ import annotations

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tsig

from valis_core.dns.transfer._transfer import zone_serial
from valis_core.dns.transfer.tsig_verdict import FUDGE
from valis_core.dns.wire.records import SOA, decode_node
from valis_core.dns.zone import ServedZone


@attrs.frozen
class Notify:
    """One NOTIFY as sent: its bytes, and what its answer is checked against."""

    wire: bytes
    id: int
    zone: str
    serial: int
    key: dns.tsig.Key | None
    mac: bytes | None


def notify_message(zone: ServedZone, qid: int, key: dns.tsig.Key | None) -> Notify:
    """The NOTIFY for ``zone`` (its current SOA), with ID ``qid``, signed with ``key``."""
    name = dns.name.from_wire(zone.apex, 0)[0]
    message = dns.message.Message(id=qid)
    message.flags = dns.flags.AA
    message.set_opcode(dns.opcode.NOTIFY)  # the opcode lives in the flags: set it last
    message.find_rrset(
        message.question, name, dns.rdataclass.IN, dns.rdatatype.SOA, create=True
    )
    ttl = decode_node(zone.nodes[zone.apex])[SOA][0]
    soa = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.SOA, zone.soa, 0, len(zone.soa))
    message.answer.append(dns.rrset.from_rdata(name, ttl, soa))
    if key is not None:
        message.use_tsig(key, fudge=FUDGE)
    data = message.to_wire()
    return Notify(data, qid, zone.origin, zone_serial(zone), key, message.mac if key else None)


@attrs.frozen
class Answer:
    """A secondary's answer to a NOTIFY: its RCODE's name."""

    rcode: str


_REMEDIES = {
    dns.rcode.BADKEY: ("BADKEY", "it does not know key {key}: check the key's name and "
                                 "algorithm there"),
    dns.rcode.BADSIG: ("BADSIG", "its secret for key {key} is not the node's: check the "
                                 "secret there"),
    dns.rcode.BADTIME: ("BADTIME", "its clock is {skew:+d}s from the node's, beyond the "
                                   "{fudge}s fudge: check both clocks"),
}
"""Each TSIG error a secondary may answer a NOTIFY with: its name (dnspython names 16
BADVERS, the RCODE it shares with BADSIG) and what the operator checks."""


def rejection(sent: Notify, data: bytes) -> str | None:
    """What a reply to the signed ``sent`` carrying a TSIG error says is wrong, for the
    log (``None`` for any other reply). Never raises."""
    if (sent.key is None or len(data) < 12 or int.from_bytes(data[:2], "big") != sent.id
            or not data[2] & 0x80):
        return None
    try:
        message = dns.message.from_wire(data, keyring=False)
    except (dns.exception.DNSException, ValueError, IndexError):
        return None
    if message.opcode() != dns.opcode.NOTIFY or message.tsig is None:
        return None
    tsig = message.tsig[0]
    if tsig.error not in _REMEDIES:
        return None
    error, remedy = _REMEDIES[tsig.error]
    skew = int.from_bytes(tsig.other, "big") - tsig.time_signed if len(tsig.other) == 6 else 0
    said = remedy.format(key=sent.key.name, skew=skew, fudge=tsig.fudge)
    return f"{dns.rcode.to_text(message.rcode())} with TSIG error {error}: {said}"


def answer_to(sent: Notify, data: bytes) -> Answer | None:
    """The answer ``data`` gives to ``sent``, or ``None`` when it is not one (another
    ID, not a response, unreadable, or unsigned or badly signed when ``sent`` was
    signed). Never raises."""
    if len(data) < 12 or int.from_bytes(data[:2], "big") != sent.id or not data[2] & 0x80:
        return None
    try:
        if sent.key is None:
            message = dns.message.from_wire(data, keyring=False)
        else:
            message = dns.message.from_wire(
                data, keyring={sent.key.name: sent.key}, request_mac=sent.mac or b""
            )
            if not message.had_tsig:
                return None
    except (dns.exception.DNSException, ValueError, IndexError):
        return None
    if message.opcode() != dns.opcode.NOTIFY:
        return None
    return Answer(dns.rcode.to_text(message.rcode()))

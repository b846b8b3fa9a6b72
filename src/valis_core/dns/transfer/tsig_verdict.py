"""A signed message's TSIG judged as RFC 8945 section 5.2 orders it, the reply each
failure gets, and the signing of every response to a message that passed: one place for
every part of the node that holds TSIG keys (the zone transfers and the owner terminus).
Bytes, keys and the time in; a verdict and bytes out; no IO.

``verify`` judges, in order, as NSD, Knot and BIND do:

- a TSIG record whose TTL is not 0 (section 4.2): FORMERR, unsigned (as NSD answers it);
- a key name and algorithm no key held has: NOTAUTH with TSIG error BADKEY, unsigned, its
  MAC empty (sections 5.2.1 and 5.3.2);
- a MAC no key held under that name and algorithm verifies: NOTAUTH with BADSIG, unsigned
  (section 5.2.2);
- a time signed more than the request's fudge (``FUDGE``, 300 s, at most) from the
  server's clock: NOTAUTH with
  BADTIME, signed with the key over the request's MAC, its time signed the request's and
  its Other Data the server's time (section 5.2.3), as Knot and BIND send it, so the
  client sees both clocks and can check the reply is the server's;
- otherwise the key, and every response to the message is signed with it (``Signer``,
  section 5.3).

Each reply echoes the question (an UPDATE's zone) and carries an OPT when the request had
one (RFC 6891 section 7); an unsigned TSIG error that would not fit the client's size
limit leaves the TSIG out and sets TC (the answer path's BADKEY reply).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TSIG
import dns.tsig

from valis_core.dns.answer.message import (  # the answer path's OPT, UDP limit and BADKEY reply
    OPT_DO,
    OPT_PLAIN,
    badkey_reply,
    question_end,
    size_limit,
    tsig_signature,
)
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import BADKEY, BADSIG, BADTIME, FORMERR, NOTAUTH, TSIG

FUDGE = 300
"""Seconds of clock difference a signed response allows (RFC 8945's recommended value),
and the most a request's fudge is taken for: a request asking more is judged with 300 s,
as BIND and Knot judge it, so a captured message is not valid for as long as its signer
chose."""

_HEADER = struct.Struct("!HHHHHH")
_RR_HEAD = struct.Struct("!HHIH")
_QR = 0x8000
_OPCODE = 0x7800
_RD = 0x0100
_CD = 0x0010

SignsAs = tuple[str, str]
"""A key's name (absolute, lowercase) and algorithm (lowercase, no trailing dot), as a
TSIG names them."""

Keys = Callable[[SignsAs], Iterable[dns.tsig.Key]]
"""The keys held under a name and algorithm (none: the TSIG is BADKEY)."""


def signs_as(name: str, algorithm: str) -> SignsAs:
    """How a TSIG signed with key ``name`` (``algorithm``) names it, to match keys by."""
    absolute = name.lower() if name.endswith(".") else name.lower() + "."
    return absolute, algorithm.lower().rstrip(".")


@attrs.frozen
class Rejection:
    """A TSIG that did not pass: the reply to send, why (for the log) and the kind of
    failure (a metric label: one of ``REJECTION_KINDS``)."""

    response: bytes
    reason: str
    kind: str


REJECTION_KINDS = ("malformed", "unknown_key", "bad_signature", "bad_time")


def verify(
    query: bytes, message: dns.message.Message, keys: Keys, *, now: float, tcp: bool,
    unknown: str = "not a key this node holds",
) -> dns.tsig.Key | Rejection | None:
    """The key among ``keys`` that signed ``query`` (parsed, its TSIG unchecked, as
    ``message``), its MAC verified and its time within the fudge of ``now``; ``None`` when
    it is unsigned; otherwise the rejection, with the reply the RFC prescribes (see the
    module docstring; ``unknown`` says, for the log, what a key not held is). ``tcp``:
    whether it came over TCP (the size limit of an unsigned reply). Raises ``ValueError``
    when the question cannot be echoed."""
    if message.tsig is None:
        return None
    tsig = message.tsig[0]
    name = message.tsig.name
    if not _ttl_is_zero(query, tsig):
        return Rejection(reply(query, message, FORMERR, None, now),
                         "the TSIG record's TTL is not 0", "malformed")
    wanted = (name.to_text().lower(), tsig.algorithm.to_text().lower().rstrip("."))
    held = {key.secret: key for key in keys(wanted)}
    if not held:
        return Rejection(_tsig_error(query, message, BADKEY, tcp),
                         f"key {name} ({tsig.algorithm}) is {unknown}", "unknown_key")
    for key in held.values():
        try:
            dns.message.from_wire(query, keyring={key.name: key})
        except dns.tsig.BadTime:
            pass  # the MAC is good; the time is judged below against ``now``
        except dns.exception.DNSException:
            continue
        break
    else:
        return Rejection(_tsig_error(query, message, BADSIG, tcp),
                         f"the TSIG of key {name} does not verify", "bad_signature")
    fudge = min(tsig.fudge, FUDGE)
    if abs(tsig.time_signed - int(now)) > fudge:
        unsigned = reply(query, message, NOTAUTH, None, now)
        response = Signer(key, tsig.mac, message.id, tsig.time_signed, error=BADTIME,
                          other=int(now).to_bytes(6, "big")).sign(unsigned)
        capped = f" (it asked {tsig.fudge}s; {FUDGE}s at most)" if fudge < tsig.fudge else ""
        return Rejection(response, f"the TSIG time is {tsig.time_signed - int(now):+d}s from "
                         f"the server's, outside its {fudge}s fudge{capped}", "bad_time")
    return key


def _ttl_is_zero(query: bytes, tsig: dns.rdtypes.ANY.TSIG.TSIG) -> bool:
    """Whether the TSIG record (the last of ``query``, its algorithm name uncompressed
    as RFC 8945 section 4.2 requires) has TTL 0; false when it cannot be found so."""
    rdata: bytes | None = tsig.to_wire()
    size = len(rdata or b"")
    end = len(query) - size
    if end < 22 or int.from_bytes(query[end - 2 : end], "big") != size:
        return False
    return query[end - 6 : end - 2] == b"\x00\x00\x00\x00"


class Signer:
    """Signs the responses to one verified request in order (RFC 8945 section 5.3.1): the
    first over the request's MAC, each later one over the previous response's (a zone
    transfer's messages). ``now`` is the time signed; ``error`` and ``other`` the TSIG
    error and Other Data (BADTIME's server time, section 5.2.3)."""

    __slots__ = ("_ctx", "_error", "_key", "_mac", "_now", "_other", "_owner", "_qid")

    def __init__(
        self, key: dns.tsig.Key, request_mac: bytes, qid: int, now: float, *, error: int = 0,
        other: bytes = b"",
    ) -> None:
        self._key = key
        self._mac: bytes | None = request_mac
        self._ctx: object | None = None
        self._now = int(now)
        self._owner = wire.name_wire(key.name)
        self._qid = qid
        self._error = error
        self._other = other

    def sign(self, message: bytes) -> bytes:
        rdata = dns.rdtypes.ANY.TSIG.TSIG(  # type: ignore[no-untyped-call]
            dns.rdataclass.ANY, dns.rdatatype.TSIG, self._key.algorithm, self._now, FUDGE,
            b"", self._qid, self._error, self._other,
        )
        signed, self._ctx = dns.tsig.sign(  # type: ignore[no-untyped-call]
            message, self._key, rdata, self._now, self._mac, self._ctx, True
        )
        self._mac = None
        body: bytes = signed.to_wire()
        record = self._owner + _RR_HEAD.pack(TSIG, dns.rdataclass.ANY, 0, len(body)) + body
        arcount = int.from_bytes(message[10:12], "big") + 1
        return message[:10] + arcount.to_bytes(2, "big") + message[12:] + record


def opt(message: dns.message.Message) -> bytes:
    """The OPT answering ``message``'s, echoing its DO bit; nothing when it had none."""
    if message.edns < 0:
        return b""
    return OPT_DO if message.ednsflags & dns.flags.DO else OPT_PLAIN


def reply(
    query: bytes, message: dns.message.Message, rcode: int, key: dns.tsig.Key | None,
    now: float, *, flags: int = 0,
) -> bytes:
    """A response to ``query`` (parsed as ``message``) holding only the question echoed and
    the OPT when it had EDNS, with ``rcode`` and ``flags``; signed with ``key`` over the
    query's MAC when given. Raises ``ValueError`` when the question cannot be echoed."""
    qsec = _question(query)
    qid, qflags = struct.unpack_from("!HH", query)
    extra = opt(message)
    flags |= _QR | (qflags & (_OPCODE | _RD | _CD)) | rcode
    response = _HEADER.pack(qid, flags, 1, 0, 0, 1 if extra else 0) + qsec + extra
    if key is None:
        return response
    assert message.tsig is not None
    return Signer(key, message.tsig[0].mac, qid, now).sign(response)


def _tsig_error(query: bytes, message: dns.message.Message, error: int, tcp: bool) -> bytes:
    """NOTAUTH with an unsigned TSIG carrying ``error`` (BADKEY or BADSIG), the answer
    path's BADKEY reply (RFC 8945 section 5.3.2). Raises ``ValueError`` when the question
    cannot be echoed."""
    qsec = _question(query)
    signature = tsig_signature(message)
    assert signature is not None
    qid, qflags = struct.unpack_from("!HH", query)
    limit = size_limit(message.payload if message.edns >= 0 else -1, tcp)
    return badkey_reply(qid, qflags, qsec, opt(message), signature, limit=limit, error=error)


def _question(query: bytes) -> bytes:
    """The one question (an UPDATE's zone) of ``query`` as it was sent. Raises
    ``ValueError`` when there is not exactly one or it is malformed."""
    qend = question_end(query, len(query)) if query[4:6] == b"\x00\x01" else 0
    if not qend:
        raise ValueError("the question cannot be echoed")
    return query[12:qend]

"""A DNS message as the answer path reads and writes it, without a full parse.

The header's flags and layout, the size limits, the bounded scan of a query's question
and additional section (``question_end``, ``scan_additional``: a hostile message costs a
small multiple of a plain query, never a full parse; ``parse_general`` is dnspython's
parse, the reference the scan is tested against), a TSIG's echo (``Signature``), the bare
replies (``bare_reply``, ``badvers_reply``, ``badkey_reply``) and the record writer that
compresses names (``Writer``). ``answer`` (``_answer``) answers with these; the transfer
room's messages and TSIG verdicts use the same.
"""

from __future__ import annotations

import struct

import attrs
import dns.exception
import dns.message
import dns.name

from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import (
    ANY,
    BADKEY,
    BADVERS,
    CNAME,
    FORMERR,
    IN,
    MX,
    NOTAUTH,
    NS,
    OPT,
    PTR,
    SOA,
    TSIG,
)

SERVER_PAYLOAD = 1232
"""The UDP payload this server offers in its OPT (the DNS Flag Day 2020 value)."""

PLAIN_UDP_LIMIT = 512
TCP_LIMIT = 65535
MAX_ADDITIONAL = 2
"""Records a query may carry in its additional section: one OPT and one TSIG, last."""

MAX_SIGNED_OTHER = 1232
"""Bytes of a message with another opcode (a NOTIFY, an UPDATE) read for its TSIG: enough
for any NOTIFY, small enough that reading one costs little."""

MAX_OPTIONS = 64
"""EDNS options scanned in one OPT; a query carrying more is FORMERR. Real clients send
a few (a cookie, a client subnet, padding); the bound keeps every query's cost small."""

MAX_POINTERS = 127
"""Compression pointers followed while reading one name (each must point backwards)."""

QR = 0x8000
OPCODE = 0x7800
AA = 0x0400
TC = 0x0200
RD = 0x0100
CD = 0x0010
ECHOED = RD | CD
DO = 0x8000

HEADER = struct.Struct("!HHHHHH")
RR_HEAD = struct.Struct("!HHIH")
QTAIL = struct.Struct("!HH")
UPDATE_OPCODE = 5 << 11
OPT_PLAIN = b"\x00" + RR_HEAD.pack(OPT, SERVER_PAYLOAD, 0, 0)
OPT_DO = b"\x00" + RR_HEAD.pack(OPT, SERVER_PAYLOAD, DO, 0)

Entry = tuple[int, int, int, int, bytes, int, bytes | None]
"""An encoded response without header values, as the response cache keeps it and the
compiled fast path's table reads it; its fields, in order, are ``ENTRY_FIELDS``. A plain
tuple, not a named one: every answer unpacks one, and a tuple's unpacking is the fast
one (a named tuple's costs about twice as much, and building one three times a tuple's)."""

ENTRY_FIELDS = ("flags", "an", "ns", "ar", "body", "short_ar", "short_body")
"""An ``Entry``'s fields: the flags (QR, AA, RCODE), the answer, authority and additional
counts, the body after the question, then the additional count and body with the
optional additional records left out (``None`` when there are none). ``_fastpath.c``'s
``E_*`` name where each sits (tests/property/test_fastpath_constants.py holds them
equal)."""

@attrs.frozen
class Signature:
    """What a BADKEY reply echoes of a query's TSIG: its owner (the key name) and
    algorithm as uncompressed wire names, the time signed, the fudge, the original ID."""

    key: bytes
    algorithm: bytes
    time_signed: int
    fudge: int
    original_id: int


Additional = tuple[int, int, int, Signature | None]
"""The additional section as far as answering needs it: the EDNS payload (-1 without an
OPT), the EDNS flags and version, and the TSIG if the query is signed."""

NO_EDNS: Additional = (-1, 0, 0, None)
def badvers_reply(qid: int, qflags: int, qsec: bytes, ednsflags: int) -> bytes:
    """BADVERS (RFC 6891 section 6.1.3): an EDNS version this server does not speak."""
    badvers = b"\x00" + RR_HEAD.pack(
        OPT, SERVER_PAYLOAD, (BADVERS >> 4) << 24 | (ednsflags & DO), 0
    )
    return bare_reply(qid, qflags, qsec, BADVERS & 0xF, badvers)


def question_end(query: bytes, size: int) -> int:
    """Offset just past the question (name, type, class), or 0 if it is malformed.

    A question name is never compressed (nothing precedes it to point at), so a pointer
    or any other label type is malformed.
    """
    i = 12
    while True:
        if i >= size:
            return 0
        length = query[i]
        if not length:
            break
        if length > wire.MAX_LABEL:
            return 0
        i += length + 1
    i += 1
    if i - 12 > wire.MAX_NAME or i + 4 > size:
        return 0
    return i + 4


def scan_additional(query: bytes, qend: int, size: int, arcount: int) -> int | Additional:
    """The additional section read by hand, or the RCODE to refuse the query with.

    The scan is bounded whatever the query says: more than ``MAX_ADDITIONAL`` records is
    FORMERR before anything is read, a second OPT or a TSIG that is not last stops it,
    and each record costs at most ``MAX_OPTIONS`` options or ``MAX_POINTERS`` pointers.
    So a hostile message costs a small multiple of a plain query, never a full parse.
    """
    if arcount > MAX_ADDITIONAL:
        return FORMERR
    payload = -1
    ednsflags = version = 0
    signed: Signature | None = None
    i = qend
    for position in range(arcount):
        if i < size and not query[i]:  # the root, as an OPT's owner always is
            name = wire.ROOT
            i += 1
        else:
            owner = read_name(query, i, size)
            if owner is None:
                return FORMERR
            name, i = owner
        if i + 10 > size:
            return FORMERR
        rtype, rclass, ttl, rdlen = RR_HEAD.unpack_from(query, i)
        start = i + 10
        i = start + rdlen
        if i > size:
            return FORMERR
        if rtype == OPT:
            if payload >= 0 or name != wire.ROOT or not options_well_formed(query, start, i):
                return FORMERR
            payload = rclass
            version = (ttl >> 16) & 0xFF
            ednsflags = ttl & 0xFFFF
        elif rtype == TSIG and rclass == ANY and position == arcount - 1:
            signed = read_tsig(query, name, start, i)
            if signed is None:
                return FORMERR
        else:
            return FORMERR
    if i != size:
        return FORMERR
    return payload, ednsflags, version, signed


def read_name(message: bytes, at: int, size: int) -> tuple[bytes, int] | None:
    """The name at ``at`` in uncompressed wire form, and the offset just past it where
    it is written; ``None`` if it is malformed. A compression pointer must point before
    the previous one (so reading ends), at most ``MAX_POINTERS`` of them."""
    out = bytearray()
    end = 0
    i = floor = at
    pointers = 0
    while i < size:
        length = message[i]
        if not length:
            out.append(0)
            return bytes(out), end or i + 1
        if length >= 0xC0:
            if i + 1 >= size or pointers == MAX_POINTERS:
                return None
            target = (length & 0x3F) << 8 | message[i + 1]
            if target >= floor:
                return None
            if not end:
                end = i + 2
            pointers += 1
            i = floor = target
            continue
        if length > wire.MAX_LABEL or i + 1 + length > size:
            return None
        out += message[i : i + 1 + length]
        if len(out) >= wire.MAX_NAME:
            return None
        i += length + 1
    return None


def read_tsig(query: bytes, key: bytes, start: int, end: int) -> Signature | None:
    """The TSIG rdata between ``start`` and ``end``, or ``None`` if it is malformed. The
    algorithm name is never compressed (RFC 8945 section 4.2)."""
    i = start
    while i < end and query[i]:
        if query[i] > wire.MAX_LABEL:
            return None
        i += query[i] + 1
    i += 1
    if i + 10 > end or i - start > wire.MAX_NAME:
        return None
    algorithm = query[start:i]
    high, low, fudge, mac_size = struct.unpack_from("!HIHH", query, i)
    i += 10 + mac_size
    if i + 6 > end:
        return None
    original_id, _error, other_size = struct.unpack_from("!HHH", query, i)
    if i + 6 + other_size != end:
        return None
    return Signature(key, algorithm, high << 32 | low, fudge, original_id)


def options_well_formed(query: bytes, start: int, end: int) -> bool:
    """Whether the OPT rdata is a whole number of (code, length, value) options, at
    most ``MAX_OPTIONS`` of them."""
    i = start
    for _ in range(MAX_OPTIONS):
        if i == end:
            return True
        if i + 4 > end:
            return False
        i += 4 + (query[i + 2] << 8 | query[i + 3])
    return i == end


def parse_general(query: bytes) -> int | Additional:
    """``scan_additional`` done by dnspython's full parse: the reference the scan is
    tested against, never used to serve (its cost grows with the message)."""
    try:
        # A keyring that knows no key: dnspython then parses the TSIG without checking it.
        message = dns.message.from_wire(query, keyring=no_key)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return FORMERR
    if message.answer or message.authority or message.additional:
        return FORMERR
    signed = tsig_signature(message)
    if message.edns < 0:
        return (-1, 0, 0, signed)
    return (message.payload, message.ednsflags, message.edns, signed)


def tsig_signature(message: dns.message.Message) -> Signature | None:
    """What a BADKEY reply echoes of ``message``'s TSIG, if it has one."""
    if message.tsig is None:
        return None
    rdata = message.tsig[0]
    return Signature(wire.name_wire(message.tsig.name), wire.name_wire(rdata.algorithm),
                     rdata.time_signed, rdata.fudge, rdata.original_id)


def no_key(message: dns.message.Message, name: dns.name.Name) -> bool:
    return False


def size_limit(payload: int, tcp: bool) -> int:
    """The response size limit: TCP's, 512 without EDNS, else the client's payload
    clamped to 512..``SERVER_PAYLOAD``."""
    if tcp:
        return TCP_LIMIT
    if payload < 0:
        return PLAIN_UDP_LIMIT
    return max(PLAIN_UDP_LIMIT, min(payload, SERVER_PAYLOAD))


def badkey_reply(
    qid: int, qflags: int, qsec: bytes, opt: bytes, signed: Signature, *, limit: int,
    error: int = BADKEY,
) -> bytes:
    """NOTAUTH with an unsigned TSIG telling the client its key is unknown (RFC 8945
    section 5.2.1), or with another ``error`` sent unsigned (BADSIG, section 5.2.2),
    after the OPT if the query had one (RFC 6891 section 7). The key
    name is compressed against the question where it can be; if the reply still
    exceeds ``limit`` the TSIG is left out and TC set, so the client retries over TCP."""
    rdata = signed.algorithm + struct.pack(
        "!HIHHHHH",
        signed.time_signed >> 32,
        signed.time_signed & 0xFFFFFFFF,
        signed.fudge,
        0,  # no MAC
        signed.original_id,
        error,
        0,  # no other data
    )
    owner = compressed_against(signed.key, qsec[:-4])
    record = owner + RR_HEAD.pack(TSIG, ANY, 0, len(rdata)) + rdata
    flags = QR | (qflags & (OPCODE | ECHOED)) | NOTAUTH
    has_opt = 1 if opt else 0
    if 12 + len(qsec) + len(opt) + len(record) > limit:
        return HEADER.pack(qid, flags | TC, 1, 0, 0, has_opt) + qsec + opt
    return HEADER.pack(qid, flags, 1, 0, 0, has_opt + 1) + qsec + opt + record


def compressed_against(name: bytes, qname: bytes) -> bytes:
    """``name`` with its longest suffix shared with the question name (at offset 12 of
    the response) replaced by a pointer; the root alone is not worth one."""
    lower = name.lower()
    suffixes = {qname[at:].lower(): at for at in wire.label_offsets(qname)}
    for at in wire.label_offsets(name):
        found = suffixes.get(lower[at:])
        if found is not None:
            return name[:at] + (0xC000 | (12 + found)).to_bytes(2, "big")
    return name


def bare_reply(qid: int, qflags: int, qsec: bytes, rcode: int, extra: bytes = b"") -> bytes:
    """A response with no data: the RCODE, the question if any, and one additional
    record (the OPT, or a TSIG) if given."""
    flags = QR | (qflags & (OPCODE | ECHOED)) | rcode
    header = HEADER.pack(qid, flags, 1 if qsec else 0, 0, 0, 1 if extra else 0)
    return header + qsec + extra


_COMPRESSED_NAME_RDATA = frozenset({NS, CNAME, PTR})
"""Types whose rdata is one name that may be compressed (RFC 3597 section 4)."""


class Writer:
    """Writes records after a question, compressing names against everything written."""

    __slots__ = ("buf", "offsets")

    def __init__(self, qname: bytes, skip: int = 0) -> None:
        """Start after a question whose name is ``qname``, or, with ``skip``, whose
        name is ``skip`` octets of labels not to compress against, then ``qname``."""
        self.buf = bytearray(12 + skip)
        self.offsets: dict[bytes, int] = {}
        self.name(qname)
        self.buf += b"\x00\x00\x00\x00"

    def name(self, name: bytes) -> None:
        buf = self.buf
        offsets = self.offsets
        lower = name.lower()
        start = len(buf)
        fresh = []
        i = 0
        while name[i]:
            pointer = offsets.get(lower[i:])
            if pointer is not None:
                buf += name[:i]
                buf += (0xC000 | pointer).to_bytes(2, "big")
                break
            fresh.append(i)
            i += name[i] + 1
        else:
            buf += name
        for i in fresh:
            if start + i < 0x4000:
                offsets[lower[i:]] = start + i

    def record(self, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> None:
        buf = self.buf
        self.name(owner)
        buf += RR_HEAD.pack(rtype, IN, ttl, 0)
        at = len(buf)
        if rtype in _COMPRESSED_NAME_RDATA:
            self.name(rdata)
        elif rtype == MX:
            buf += rdata[:2]
            self.name(rdata[2:])
        elif rtype == SOA:
            mname, i = wire.read_name(rdata, 0)
            rname, j = wire.read_name(rdata, i)
            self.name(mname)
            self.name(rname)
            buf += rdata[j:]
        else:
            buf += rdata
        struct.pack_into("!H", buf, at - 2, len(buf) - at)



"""Records as values: what the zone index is built from and keeps.

The numbers of the DNS's record types, classes and response codes are declared here once
(the plain lines' types in ``plain_types``, re-exported), as plain ints taken from
dnspython's enums (the answer path compares ints and pays
nothing for an enum); ``RecordRow`` is one record as the operator states it, ``ZoneError``
the refusal of a zone that cannot be served, and the rest is the encoding the index keeps
for one owner: its RRs in wire form without the owner name (type, class, TTL, rdata
length, rdata), grouped by type in ascending type order, exactly as they follow the owner
in a response.
"""

from __future__ import annotations

import struct
from collections.abc import Container
from typing import TYPE_CHECKING

import attrs
import dns.rcode
import dns.rdataclass
import dns.rdatatype

if TYPE_CHECKING:
    import dns.rdata

import valis_core.dns.wire.plain_types as plain
from valis_core.errors import ValisError

A = plain.A
NS = plain.NS
CNAME = plain.CNAME
SOA = plain.SOA
PTR = plain.PTR
MX = plain.MX
AAAA = plain.AAAA
SRV = plain.SRV
NAPTR = int(dns.rdatatype.NAPTR)
DNAME = int(dns.rdatatype.DNAME)
OPT = int(dns.rdatatype.OPT)
DS = int(dns.rdatatype.DS)
RRSIG = int(dns.rdatatype.RRSIG)
NSEC = int(dns.rdatatype.NSEC)
TSIG = int(dns.rdatatype.TSIG)
IXFR = int(dns.rdatatype.IXFR)
AXFR = int(dns.rdatatype.AXFR)
SVCB = int(dns.rdatatype.SVCB)
HTTPS = int(dns.rdatatype.HTTPS)
ANY = int(dns.rdatatype.ANY)

IN = int(dns.rdataclass.IN)
CLASS_NONE = int(dns.rdataclass.NONE)
CLASS_ANY = int(dns.rdataclass.ANY)
"""RFC 2136's classes NONE and ANY (an UPDATE's deletions and prerequisites)."""

NOERROR = int(dns.rcode.NOERROR)
FORMERR = int(dns.rcode.FORMERR)
SERVFAIL = int(dns.rcode.SERVFAIL)
NXDOMAIN = int(dns.rcode.NXDOMAIN)
NOTIMP = int(dns.rcode.NOTIMP)
REFUSED = int(dns.rcode.REFUSED)
YXDOMAIN = int(dns.rcode.YXDOMAIN)
NOTAUTH = int(dns.rcode.NOTAUTH)
BADVERS = int(dns.rcode.BADVERS)
BADSIG = 16
"""RFC 8945 TSIG error BADSIG (the MAC does not verify); the same number as BADVERS."""
BADKEY = 17
"""RFC 8945 TSIG error BADKEY (dnspython keeps TSIG errors apart from rcodes)."""
BADTIME = 18
"""RFC 8945 TSIG error BADTIME (the time signed is outside the fudge)."""

MAX_TTL = 2**31 - 1
"""RFC 2181 section 8: a TTL is an unsigned 31-bit number of seconds."""

RR_HEAD = struct.Struct("!HHIH")
"""Type, class, TTL and rdata length: what follows an owner name in wire form."""

RRset = tuple[int, tuple[bytes, ...]]
"""The TTL and the rdatas (uncompressed wire form) of one owner's records of one type."""


def header_only(query: bytes, rcode: int) -> bytes | None:
    """A response of only the header, for a query too broken to answer otherwise: its ID,
    opcode, RD and CD echoed (RFC 1035 section 4.1.1, RFC 6840 section 5.9), no section.
    None for what is no query (shorter than a header, or a response itself)."""
    if len(query) < 12 or query[2] & 0x80:
        return None
    flags = bytes((0x80 | (query[2] & 0x79), (query[3] & 0x10) | rcode))
    return query[:2] + flags + bytes(8)


@attrs.frozen
class RecordRow:
    """One resource record as the operator states it.

    ``zone`` and ``owner`` are absolute names (trailing dot; compared case-insensitively),
    ``rtype`` a type mnemonic (``"A"``, ``"MX"``, ``"TYPE65280"``), ``ttl`` seconds, and
    ``rdata`` the presentation form with absolute names (``"10 mail.example.com."``).
    """

    zone: str
    owner: str
    rtype: str
    ttl: int
    rdata: str


class ZoneError(ValisError):
    """A zone that cannot be served as given; nothing from it is served."""

    def __init__(self, zone: str, owner: str, reason: str) -> None:
        self.zone = zone
        self.owner = owner
        self.reason = reason
        super().__init__(f"zone {zone} cannot be served: {owner}: {reason}")


def rdata_bytes(rdata: dns.rdata.Rdata, *, canonical: bool = False) -> bytes:
    """dnspython's wire form of ``rdata`` (its canonical form: ``canonical``). A value its
    text form took but its wire field cannot hold (a LOC altitude beyond 32 bits, say)
    is a ``ValueError`` like any other bad rdata, not the ``struct.error`` dnspython
    lets out."""
    try:
        data = rdata.to_digestable() if canonical else rdata.to_wire()
    except (struct.error, OverflowError):
        raise ValueError("a value is out of the range its wire field holds") from None
    assert data is not None  # no file given, so dnspython returns the bytes
    return data


def decode_node(blob: bytes) -> dict[int, RRset]:
    """An owner's records by type, from the form ``ServedZone.nodes`` holds."""
    out: dict[int, RRset] = {}
    size = len(blob)
    i = 0
    while i < size:
        rtype, _, ttl, length = RR_HEAD.unpack_from(blob, i)
        start = i + 10
        i = start + length
        rdata = blob[start:i]
        held = out.get(rtype)
        out[rtype] = (ttl, (rdata,)) if held is None else (ttl, (*held[1], rdata))
    return out


def node_holds(blob: bytes, types: Container[int]) -> bool:
    """Whether an owner's encoding holds a record of one of ``types``."""
    size = len(blob)
    i = 0
    while i < size:
        rtype, _, _, length = RR_HEAD.unpack_from(blob, i)
        if rtype in types:
            return True
        i += 10 + length
    return False


def node_without(blob: bytes, rtype: int) -> bytes:
    """An owner's encoding with its records of ``rtype`` left out (two owners that
    differ only in that type give the same bytes: the encoding is canonical)."""
    size = len(blob)
    kept: list[bytes] = []
    i = 0
    while i < size:
        held, _, _, length = RR_HEAD.unpack_from(blob, i)
        end = i + 10 + length
        if held != rtype:
            kept.append(blob[i:end])
        i = end
    return b"".join(kept)


def count_records(blob: bytes) -> int:
    count = 0
    size = len(blob)
    i = 0
    while i < size:
        i += 10 + RR_HEAD.unpack_from(blob, i)[3]
        count += 1
    return count


def is_wildcard(name: bytes) -> bool:
    return name.startswith(b"\x01*")


def merge_node(held: bytes | bytearray) -> tuple[bytes, dict[int, int]]:
    """Group an owner's records by type, drop duplicates, give each RRset the lowest
    TTL stated for it (RFC 2181 section 5.2), and re-encode in type order; return the
    encoding and how many records each type keeps, in type order."""
    blob = bytes(held)
    ttls: dict[int, int] = {}
    rdatas: dict[int, dict[bytes, None]] = {}
    size = len(blob)
    i = 0
    while i < size:
        rtype, _, ttl, length = RR_HEAD.unpack_from(blob, i)
        start = i + 10
        i = start + length
        ttls[rtype] = min(ttl, ttls.get(rtype, ttl))
        rdatas.setdefault(rtype, {})[blob[start:i]] = None
    counts: dict[int, int] = {}
    out = bytearray()
    for rtype in sorted(rdatas):
        ttl = ttls[rtype]
        counts[rtype] = len(rdatas[rtype])
        for rdata in rdatas[rtype]:
            out += RR_HEAD.pack(rtype, IN, ttl, len(rdata))
            out += rdata
    return bytes(out), counts

"""Answering one DNS query from a zone index: bytes in, bytes (or nothing) out.

``answer`` behaves as NSD and Knot do for an authoritative-only server. The whole
behaviour, top to bottom:

- Shorter than a header, or a response (QR=1): dropped (``None``).
- UPDATE (opcode 5): NOTIMP, signed or not (this port takes no updates; the TSIG is not
  judged, so a right key is never told BADKEY), with an OPT if the message carries one,
  and in it an Extended DNS Error (RFC 8914) 21 "Not Supported" whose EXTRA-TEXT says
  updates go to the owner terminus (``UPDATE_ELSEWHERE``).
- Another opcode other than QUERY: NOTIMP, with an OPT if the message (of at most
  ``MAX_SIGNED_OTHER`` bytes) carries a well-formed one (RFC 6891 section 7), BADVERS if
  that OPT's version is above 0 (section 6.1.3; as Knot); one signed (TSIG last, the
  message at most ``MAX_SIGNED_OTHER`` bytes): BADKEY as below, the TSIG judged before
  the opcode (RFC 8945 section 5.2), as NSD and Knot judge a signed NOTIFY.
- QDCOUNT other than 1, a question that does not parse, records in the answer or
  authority section, anything in the additional section but one OPT and a TSIG (last),
  trailing bytes, a malformed OPT or one with more than ``MAX_OPTIONS`` options:
  FORMERR, with the question echoed when it parsed. These are decided by a bounded
  scan, never a full parse, so no message costs much more than a plain query.
- A TSIG-signed query: NOTAUTH with an unsigned TSIG carrying BADKEY (RFC 8945 section
  5.2.1; no keys are held), after the OPT if the query had one; a reply that would
  exceed the size limit leaves the TSIG out and sets TC.
- EDNS (RFC 6891): an OPT is answered with an OPT carrying ``SERVER_PAYLOAD`` and the
  query's DO bit; version above 0 gets BADVERS. The UDP size limit is 512 without EDNS,
  otherwise the client's payload clamped to 512..``SERVER_PAYLOAD``; TCP allows 65535.
- Class other than IN: REFUSED (CH ``version.bind`` included). No zone transfer is
  offered: AXFR over UDP is NOTIMP (as NSD and Knot answer it), AXFR over TCP and IXFR
  are REFUSED. Any other question type, meta types included, is looked up like data.
- A name outside every served zone: REFUSED without AA. Inside, the deepest served
  zone answers (RFC 1034 section 4.3.2), with AA except on referrals:
  data; NODATA and NXDOMAIN with the zone's SOA in authority at TTL min(SOA TTL, SOA
  MINIMUM) (RFC 2308); empty non-terminals are NODATA; CNAME chains are followed while
  they stay in served zones (at most ``MAX_CHAIN`` links, never round a loop), and the
  RCODE is the last link's; a name at or beneath a delegation gets a referral (AA=0, the
  NS in authority, the addresses the parent zone holds for its name servers in
  additional), except that DS at the cut
  is answered by the parent, and DS at a zone apex by the served parent zone if there
  is one; wildcards per RFC 4592 (closest encloser, never for names that exist, never
  beneath a delegation, wildcard CNAMEs followed); DNAME per RFC 6672 (the DNAME and a
  CNAME synthesized with the DNAME's TTL, YXDOMAIN when the new name is too long);
- Additional data comes only from the zone that answers (another served zone's records
  would be out of bailiwick to a resolver, and would tell which zones this node serves),
  at exactly the names the answer points at: A/AAAA of NS targets (glue beneath a cut
  included), of MX and SRV targets; for NAPTR (RFC 3403 section 4.2) the SRV its
  replacement names and their targets' addresses (flag S) or the replacement's addresses
  (flag A); for SVCB and HTTPS (RFC 9460 section 4.1) the TargetName's addresses (``.``
  in ServiceMode: the owner's) and, in AliasMode, the target's records of the same type
  and their targets' addresses. Apart from NS targets, only the zone's authoritative
  data is used (never glue beneath a cut), and wildcards are not expanded for it.
- ANY (RFC 8482): one RRset, the owner's lowest-numbered type (its CNAME if it has
  one), over UDP and TCP alike.
- A response over the size limit first loses the optional additional records (never a
  required glue record, never part of an RRset); if still too big it is the question
  alone with TC=1 (and the OPT, if the query had one). A referral's required glue is
  its in-domain glue, the addresses of name servers at or beneath the cut (RFC 9471
  section 3.1): a referral that cannot carry it is truncated; sibling glue and the other
  name servers' addresses are optional (section 3.2).

The question is echoed byte for byte (0x20 case mixing survives), as are the ID, RD
and CD. Malformed input never raises: an internal failure becomes a bare FORMERR.

Speed: every query takes one path, ``_answer``, a short step per check. The common
additional section (nothing, or a bare OPT: one dictionary probe) is read directly and
anything else by a bounded scan (``answer_general`` uses dnspython's full parser instead:
the reference the scan is tested against). The response comes from a bounded cache of
encoded responses kept with the snapshot being served (``valis_core.dns.answer.snapshot``),
keyed by the lowercased question name and type; a miss resolves against the index and
encodes once. A cached response compresses every name against the question at offset 12,
so it fits any spelling of the same name: each query only patches in its ID, its flags
and its own question bytes. A question whose lookup ends at once in NXDOMAIN or NODATA
is not cached: its answer is the zone's SOA alone, encoded once per zone version and
offset of the apex in the question (kept beside the cache), so a flood of random names
or types in a served zone costs a lookup and never pushes served answers out.

Where this deliberately differs from NSD or Knot: A/AAAA for MX and SRV targets are
added (as Knot does; NSD with ``minimal-responses`` omits them), though never glue nor a
wildcard's; CNAME and DNAME chains continue into other served zones (as NSD; Knot stops
at the zone edge); ANY picks the lowest-numbered type (as Knot; NSD prefers the SOA at
an apex); FORMERR echoes the question (as Knot; NSD clears it) and trailing bytes are
FORMERR (as Knot; NSD ignores them); CH-class and class-ANY questions are REFUSED (both
answer ``version.bind``); an unsigned NOTIFY is NOTIMP (NSD: REFUSED, Knot: NOTAUTH); a
signed UPDATE is NOTIMP (both judge its TSIG first: NOTAUTH with BADKEY, which told an
operator with the right key that it was wrong); an OPT with
more than ``MAX_OPTIONS`` options is FORMERR (both read any number).
"""

from __future__ import annotations

import enum
import struct
from typing import TYPE_CHECKING

import attrs
import dns.exception
import dns.message
import dns.name

from valis_core.dns.answer.snapshot import ResponseCache, Snapshot
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import (
    AAAA,
    ANY,
    AXFR,
    BADKEY,
    BADVERS,
    CNAME,
    DNAME,
    DS,
    FORMERR,
    HTTPS,
    IN,
    IXFR,
    MX,
    NAPTR,
    NOERROR,
    NOTAUTH,
    NOTIMP,
    NS,
    NXDOMAIN,
    OPT,
    PTR,
    REFUSED,
    SOA,
    SRV,
    SVCB,
    TSIG,
    YXDOMAIN,
    A,
    RRset,
    decode_node,
    header_only,
)
from valis_core.dns.zone import ServedZone, ZoneIndex

if TYPE_CHECKING:
    from valis_core.dns.answer.signed import Signer


class Transport(enum.Enum):
    """How the query arrived; it decides the response size limit."""

    UDP = "udp"
    TCP = "tcp"


_TCP = Transport.TCP

SERVER_PAYLOAD = 1232
"""The UDP payload this server offers in its OPT (the DNS Flag Day 2020 value)."""

PLAIN_UDP_LIMIT = 512
TCP_LIMIT = 65535
MAX_CHAIN = 12
"""CNAME/DNAME links followed for one answer."""

MAX_ADDITIONAL = 2
"""Records a query may carry in its additional section: one OPT and one TSIG, last."""

MAX_SIGNED_OTHER = 1232
"""Bytes of a message with another opcode (a NOTIFY, an UPDATE) read for its TSIG: enough
for any NOTIFY, small enough that reading one costs little."""

EDE_NOT_SUPPORTED = 21
"""Extended DNS Error (RFC 8914 section 4.22) an UPDATE on the query port carries."""

UPDATE_ELSEWHERE = (
    "this port answers queries only: DNS UPDATE goes to the node's owner terminus, on the "
    "launcher config's owner-port (closed when it has none)"
)
"""The EXTRA-TEXT of that error: where the operator sends updates instead."""

MAX_OPTIONS = 64
"""EDNS options scanned in one OPT; a query carrying more is FORMERR. Real clients send
a few (a cookie, a client subnet, padding); the bound keeps every query's cost small."""

MAX_POINTERS = 127
"""Compression pointers followed while reading one name (each must point backwards)."""

CACHE_ENTRIES = 65536
"""Encoded responses kept per snapshot (least recently used go first)."""

NEGATIVE_ENTRIES = 4096
"""Prebuilt negative answers kept per snapshot: one per zone, RCODE and offset of the
zone's apex in the question; past this many (thousands of zones) they are built afresh."""

_QR = 0x8000
_OPCODE = 0x7800
_AA = 0x0400
_TC = 0x0200
_RD = 0x0100
_CD = 0x0010
_ECHOED = _RD | _CD
_DO = 0x8000

_HEADER = struct.Struct("!HHHHHH")
_RR_HEAD = struct.Struct("!HHIH")
_QTAIL = struct.Struct("!HH")
_UPDATE = 5 << 11
_OPT_PLAIN = b"\x00" + _RR_HEAD.pack(OPT, SERVER_PAYLOAD, 0, 0)
_OPT_DO = b"\x00" + _RR_HEAD.pack(OPT, SERVER_PAYLOAD, _DO, 0)

Entry = tuple[int, int, int, int, bytes, int, bytes | None]
"""An encoded response without header values: flags (QR, AA, RCODE), the answer,
authority and additional counts, the body after the question, then the additional count
and body with the optional additional records left out (``None`` when there are none)."""

_REFUSED_ENTRY: Entry = (_QR | REFUSED, 0, 0, 0, b"", 0, None)

_RR = tuple[bytes, int, int, bytes]
"""One record to write: owner (wire), type, TTL, rdata (uncompressed wire)."""


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

_NO_EDNS: Additional = (-1, 0, 0, None)
_CLASS_IN = IN.to_bytes(2, "big")


def answer(source: Snapshot | ZoneIndex, query: bytes, *, transport: Transport) -> bytes | None:
    """The response to ``query`` from ``source``, or ``None`` when it must be dropped.
    Never raises. Answers are kept in a snapshot's cache; a bare index is answered
    afresh each time (for callers that keep no snapshot)."""
    try:
        if type(source) is Snapshot:
            return _answer(
                source.index, source.cache, query, transport is _TCP, False, signer=source.signer
            )
        assert isinstance(source, ZoneIndex)
        return _answer(source, ResponseCache(), query, transport is _TCP, False)
    except Exception:  # malformed input must never take a server down
        return header_only(query, FORMERR)


def answer_general(
    source: Snapshot | ZoneIndex, query: bytes, *, transport: Transport
) -> bytes | None:
    """``answer`` with every query's additional section parsed by dnspython instead of
    the bounded scan: the reference the scan is tested against."""
    try:
        signer = None
        if isinstance(source, Snapshot):
            index, cache, signer = source.index, source.cache, source.signer
        else:
            index, cache = source, ResponseCache()
        return _answer(index, cache, query, transport is Transport.TCP, True, signer=signer)
    except Exception:
        return header_only(query, FORMERR)


def _answer(
    index: ZoneIndex,
    cache: ResponseCache,
    query: bytes,
    tcp: bool,
    general: bool,
    *,
    signer: Signer | None = None,
) -> bytes | None:
    """One path for every query, a step per check in the order the module docstring
    lists them: the header, the question, the additional section (``_additional``), the
    question's class and type, then the answer from the cache (or resolved and kept,
    ``_miss``) fitted to the size limit (``_assemble``)."""
    size = len(query)
    if size < 12:
        return None
    qid, qflags, qdcount, ancount, nscount, arcount = _HEADER.unpack_from(query)
    if qflags & _QR:
        return None
    qend = _question_end(query, size) if qdcount == 1 else 0
    if qflags & _OPCODE:
        return _other_opcode(query, qend, ancount + nscount, arcount,
                             qid=qid, qflags=qflags, tcp=tcp)
    if not qend:
        return _bare(qid, qflags, b"", FORMERR)
    if ancount or nscount:
        return _bare(qid, qflags, query[12:qend], FORMERR)

    extra = _additional(query, qend, size, arcount, general)
    if isinstance(extra, int):
        return _bare(qid, qflags, query[12:qend], extra)
    payload, ednsflags, version, signed = extra
    opt = b"" if payload < 0 else _OPT_DO if ednsflags & _DO else _OPT_PLAIN
    if version and signed is None:
        return _badvers(qid, qflags, query[12:qend], ednsflags)
    if signed is not None:
        return _badkey(qid, qflags, query[12:qend], opt, signed, limit=_limit(payload, tcp))

    qtype = query[qend - 4] << 8 | query[qend - 3]
    if query[qend - 2:qend] != _CLASS_IN or qtype in (AXFR, IXFR):
        qclass = query[qend - 2] << 8 | query[qend - 1]
        return _bare(qid, qflags, query[12:qend], _refusal(qtype, qclass, tcp), opt)
    key = query[12 : qend - 4].lower() + query[qend - 4 : qend - 2]
    if signer is not None:  # a signed zone's answers (valis_core.dns.answer.signed)
        signed_entry = signer.entry(index, cache, key, qtype, bool(ednsflags & _DO))
        if signed_entry is not None:
            return _assemble(signed_entry, query, qend, payload, opt, tcp=tcp)
    entry: Entry | None = cache.get(key)
    if entry is None:
        entry = _miss(index, cache, key, qtype)
    else:
        try:  # noqa: SIM105 - contextlib.suppress costs more per query
            cache.move_to_end(key)
        except KeyError:  # evicted meanwhile by a caller on another thread
            pass
    return _assemble(entry, query, qend, payload, opt, tcp=tcp)


def _additional(
    query: bytes, qend: int, size: int, arcount: int, general: bool
) -> int | Additional:
    """The additional section: nothing, or one bare OPT (version 0, no options), read
    directly as almost every query is; anything else by the bounded scan (or, for the
    reference, dnspython's parse). An RCODE to refuse the query with if it is wrong."""
    if general:
        return _parse_general(query)
    if not arcount and qend == size:
        return _NO_EDNS
    if arcount == 1 and size == qend + 11:
        tail = query[qend:]
        bare = _BARE_OPTS.get(tail)
        if bare is not None:
            return bare
        if tail[:3] == b"\x00\x00\x29" and tail[9:] == b"\x00\x00":
            bare = (tail[3] << 8 | tail[4], tail[7] << 8 | tail[8], tail[6], None)
            if len(_BARE_OPTS) < _BARE_OPTS_KEPT:
                _BARE_OPTS[tail] = bare
            return bare
    return _scan_additional(query, qend, size, arcount)


_BARE_OPTS: dict[bytes, Additional] = {}
"""Bare OPT records (root owner, no options) already read, by their 11 bytes: clients
send a handful of distinct ones (their payload and DO bit), so most queries' additional
section is one dictionary probe."""
_BARE_OPTS_KEPT = 256


def _badvers(qid: int, qflags: int, qsec: bytes, ednsflags: int) -> bytes:
    """BADVERS (RFC 6891 section 6.1.3): an EDNS version this server does not speak."""
    badvers = b"\x00" + _RR_HEAD.pack(
        OPT, SERVER_PAYLOAD, (BADVERS >> 4) << 24 | (ednsflags & _DO), 0
    )
    return _bare(qid, qflags, qsec, BADVERS & 0xF, badvers)


def _refusal(qtype: int, qclass: int, tcp: bool) -> int:
    """The RCODE refusing a question of another class or a zone transfer (RFC 5936: AXFR
    only over TCP, so NOTIMP over UDP)."""
    if qclass == IN and qtype == AXFR and not tcp:
        return NOTIMP
    return REFUSED


def _miss(index: ZoneIndex, cache: ResponseCache, key: bytes, qtype: int) -> Entry:
    """Resolve a question the cache does not hold, and keep the answer. Refusals and
    plain negative answers are not kept: they cost a lookup and no encoding, and a
    flood of random names or types would otherwise push the served answers out."""
    entry, keep = _resolve(index, cache, key[:-2], qtype)
    if keep:
        cache[key] = entry
        while len(cache) > CACHE_ENTRIES:
            try:
                cache.popitem(last=False)
            except KeyError:  # emptied meanwhile by a caller on another thread
                break
    return entry


def _assemble(
    entry: Entry, query: bytes, qend: int, payload: int, opt: bytes, *, tcp: bool
) -> bytes:
    """The response from a cached entry: the query's ID, RD and CD, its question bytes
    exactly, the cached body (or less of it, or none with TC) to fit the size limit."""
    qsec = query[12:qend]
    qid = query[0] << 8 | query[1]
    flags, an, ns, ar, body, short_ar, short_body = entry
    flags |= (query[2] << 8 | query[3]) & _ECHOED
    room = _limit(payload, tcp) - 12 - len(qsec) - len(opt)
    has_opt = 1 if opt else 0
    if len(body) <= room:
        return _HEADER.pack(qid, flags, 1, an, ns, ar + has_opt) + qsec + body + opt
    if short_body is not None and len(short_body) <= room:
        return _HEADER.pack(qid, flags, 1, an, ns, short_ar + has_opt) + qsec + short_body + opt
    return _HEADER.pack(qid, flags | _TC, 1, 0, 0, has_opt) + qsec + opt


def _other_opcode(
    query: bytes, qend: int, records: int, arcount: int, *, qid: int, qflags: int, tcp: bool
) -> bytes:
    """NOTIMP for an opcode other than QUERY, with an OPT when the message carries one
    (RFC 6891 section 7, as Knot answers; BADVERS for a version above 0), or BADKEY when
    the message is signed (read by dnspython: a NOTIFY carries records a query does not,
    and this path is rare, so only messages of at most ``MAX_SIGNED_OTHER`` bytes are
    read; a longer one is NOTIMP without an OPT). An UPDATE is ``_update_elsewhere``'s."""
    if qflags & _OPCODE == _UPDATE:
        return _update_elsewhere(query, qend, records, arcount, qid=qid, qflags=qflags)
    opt = b""
    if arcount and qend and len(query) <= MAX_SIGNED_OTHER:
        try:
            message = dns.message.from_wire(query, keyring=_no_key)
        except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
            message = None
        signed = _signature(message) if message is not None else None
        if message is not None and signed is not None:
            payload = message.payload if message.edns >= 0 else -1
            opt = b"" if payload < 0 else _OPT_DO if message.ednsflags & _DO else _OPT_PLAIN
            return _badkey(qid, qflags, query[12:qend], opt, signed, limit=_limit(payload, tcp))
        extra = _other_additional(query, qend, records, arcount)
        if extra is not None and extra[0] >= 0:
            if extra[2]:
                return _badvers(qid, qflags, query[12:qend], extra[1])
            opt = _OPT_DO if extra[1] & _DO else _OPT_PLAIN
    return _bare(qid, qflags, query[12:qend], NOTIMP, opt)


def _update_elsewhere(
    query: bytes, qend: int, records: int, arcount: int, *, qid: int, qflags: int
) -> bytes:
    """NOTIMP to an UPDATE, its TSIG (if any) left unjudged: the query port holds no
    keys and takes no updates, so the client hears that, not that its key is bad. With
    EDNS the OPT carries an Extended DNS Error saying where updates go (RFC 8914)."""
    qsec = query[12:qend]
    extra = _other_additional(query, qend, records, arcount) if arcount and qend else None
    if extra is None or extra[0] < 0:
        return _bare(qid, qflags, qsec, NOTIMP)
    if extra[2]:
        return _badvers(qid, qflags, qsec, extra[1])
    text = UPDATE_ELSEWHERE.encode()
    option = struct.pack("!HHH", 15, 2 + len(text), EDE_NOT_SUPPORTED) + text
    opt = b"\x00" + _RR_HEAD.pack(OPT, SERVER_PAYLOAD, extra[1] & _DO, len(option)) + option
    return _bare(qid, qflags, qsec, NOTIMP, opt)


def _other_additional(query: bytes, qend: int, records: int, arcount: int) -> Additional | None:
    """The additional section of a message of another opcode, read as a query's once the
    records after its question are skipped (a NOTIFY's SOA, an UPDATE's prerequisites and
    updates); ``None`` when it is malformed."""
    size = len(query)
    i = qend
    for _ in range(records):  # each record is at least 11 octets: bounded by the size
        owner = _read_name(query, i, size)
        if owner is None or owner[1] + 10 > size:
            return None
        i = owner[1] + 10 + (query[owner[1] + 8] << 8 | query[owner[1] + 9])
    extra = _scan_additional(query, i, size, arcount) if i <= size else FORMERR
    return None if isinstance(extra, int) else extra


def _question_end(query: bytes, size: int) -> int:
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


def _scan_additional(query: bytes, qend: int, size: int, arcount: int) -> int | Additional:
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
            owner = _read_name(query, i, size)
            if owner is None:
                return FORMERR
            name, i = owner
        if i + 10 > size:
            return FORMERR
        rtype, rclass, ttl, rdlen = _RR_HEAD.unpack_from(query, i)
        start = i + 10
        i = start + rdlen
        if i > size:
            return FORMERR
        if rtype == OPT:
            if payload >= 0 or name != wire.ROOT or not _options_well_formed(query, start, i):
                return FORMERR
            payload = rclass
            version = (ttl >> 16) & 0xFF
            ednsflags = ttl & 0xFFFF
        elif rtype == TSIG and rclass == ANY and position == arcount - 1:
            signed = _read_tsig(query, name, start, i)
            if signed is None:
                return FORMERR
        else:
            return FORMERR
    if i != size:
        return FORMERR
    return payload, ednsflags, version, signed


def _read_name(message: bytes, at: int, size: int) -> tuple[bytes, int] | None:
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


def _read_tsig(query: bytes, key: bytes, start: int, end: int) -> Signature | None:
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


def _options_well_formed(query: bytes, start: int, end: int) -> bool:
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


def _parse_general(query: bytes) -> int | Additional:
    """``_scan_additional`` done by dnspython's full parse: the reference the scan is
    tested against, never used to serve (its cost grows with the message)."""
    try:
        # A keyring that knows no key: dnspython then parses the TSIG without checking it.
        message = dns.message.from_wire(query, keyring=_no_key)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return FORMERR
    if message.answer or message.authority or message.additional:
        return FORMERR
    signed = _signature(message)
    if message.edns < 0:
        return (-1, 0, 0, signed)
    return (message.payload, message.ednsflags, message.edns, signed)


def _signature(message: dns.message.Message) -> Signature | None:
    """What a BADKEY reply echoes of ``message``'s TSIG, if it has one."""
    if message.tsig is None:
        return None
    rdata = message.tsig[0]
    return Signature(wire.name_wire(message.tsig.name), wire.name_wire(rdata.algorithm),
                     rdata.time_signed, rdata.fudge, rdata.original_id)


def _no_key(message: dns.message.Message, name: dns.name.Name) -> bool:
    return False


def _limit(payload: int, tcp: bool) -> int:
    """The response size limit: TCP's, 512 without EDNS, else the client's payload
    clamped to 512..``SERVER_PAYLOAD``."""
    if tcp:
        return TCP_LIMIT
    if payload < 0:
        return PLAIN_UDP_LIMIT
    return max(PLAIN_UDP_LIMIT, min(payload, SERVER_PAYLOAD))


def _badkey(
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
    owner = _compressed(signed.key, qsec[:-4])
    record = owner + _RR_HEAD.pack(TSIG, ANY, 0, len(rdata)) + rdata
    flags = _QR | (qflags & (_OPCODE | _ECHOED)) | NOTAUTH
    has_opt = 1 if opt else 0
    if 12 + len(qsec) + len(opt) + len(record) > limit:
        return _HEADER.pack(qid, flags | _TC, 1, 0, 0, has_opt) + qsec + opt
    return _HEADER.pack(qid, flags, 1, 0, 0, has_opt + 1) + qsec + opt + record


def _compressed(name: bytes, qname: bytes) -> bytes:
    """``name`` with its longest suffix shared with the question name (at offset 12 of
    the response) replaced by a pointer; the root alone is not worth one."""
    lower = name.lower()
    suffixes = {qname[at:].lower(): at for at in wire.label_offsets(qname)}
    for at in wire.label_offsets(name):
        found = suffixes.get(lower[at:])
        if found is not None:
            return name[:at] + (0xC000 | (12 + found)).to_bytes(2, "big")
    return name


def _bare(qid: int, qflags: int, qsec: bytes, rcode: int, extra: bytes = b"") -> bytes:
    """A response with no data: the RCODE, the question if any, and one additional
    record (the OPT, or a TSIG) if given."""
    flags = _QR | (qflags & (_OPCODE | _ECHOED)) | rcode
    header = _HEADER.pack(qid, flags, 1 if qsec else 0, 0, 0, 1 if extra else 0)
    return header + qsec + extra


# --- resolution -----------------------------------------------------------------------


class _Draft:
    """The sections of one answer while it is being found."""

    __slots__ = ("aa", "answer", "authority", "extra", "glue", "listed", "rcode")

    def __init__(self) -> None:
        self.aa = True
        self.rcode = NOERROR
        self.answer: list[_RR] = []
        self.authority: list[_RR] = []
        self.glue: list[_RR] = []
        self.extra: list[_RR] = []
        self.listed: set[tuple[bytes, int]] = set()

    def negative(self, zone: ServedZone, rcode: int) -> None:
        self.rcode = rcode
        self.authority.append((zone.apex, SOA, zone.negative_ttl, zone.soa))

    def rrset(self, into: list[_RR], zone: ServedZone, name: bytes, rtype: int) -> RRset | None:
        """Put the ``rtype`` records ``zone`` holds at ``name`` into ``into``, once per
        answer; return them (``None`` if there are none, or they are already there)."""
        blob = zone.nodes.get(name)
        if blob is None or (name, rtype) in self.listed:
            return None
        rrset = decode_node(blob).get(rtype)
        if rrset is not None:
            self.listed.add((name, rtype))
            into.extend(_records(name, rtype, rrset))
        return rrset

    def addresses(self, into: list[_RR], zone: ServedZone, name: bytes) -> None:
        """The A and AAAA records ``zone`` holds at ``name``, once per answer."""
        blob = zone.nodes.get(name)
        if blob is None:
            return
        sets = decode_node(blob)
        for rtype in (A, AAAA):
            rrset = sets.get(rtype)
            if rrset is not None and (name, rtype) not in self.listed:
                self.listed.add((name, rtype))
                into.extend(_records(name, rtype, rrset))


def _records(owner: bytes, rtype: int, rrset: RRset) -> list[_RR]:
    ttl, rdatas = rrset
    return [(owner, rtype, ttl, rdata) for rdata in rdatas]


def _resolve(
    index: ZoneIndex, cache: ResponseCache, qname: bytes, qtype: int
) -> tuple[Entry, bool]:
    """The answer to a question, and whether it is worth keeping in the response cache.
    A question the lookup finds no data for at its first link (NXDOMAIN, NODATA) takes
    the zone's prebuilt negative answer (``_negative``) and is not kept: that costs the
    lookup alone, never an encoding. Refusals are not kept either."""
    zone = index.zone_for(qname)
    if zone is None:
        return _REFUSED_ENTRY, False
    if qtype == DS and qname == zone.apex:
        zone = index.parent_of(zone) or zone
    found = _find(zone, qname, qtype)
    if found[0] is None:
        rcode = NOERROR if found[1] else NXDOMAIN
        return _negative(cache, zone, rcode, len(qname) - len(zone.apex)), False
    draft = _Draft()
    name = qname
    seen = {qname}
    for link in range(MAX_CHAIN):
        if link:
            if qtype == DS and name == zone.apex:
                zone = index.parent_of(zone) or zone
            found = _find(zone, name, qtype)
        target = _step(zone, name, qtype, found, draft, first=not link)
        if target is None:
            break
        link_to = next_link(index, seen, target)
        if link_to is None:
            break
        zone, name = link_to
    return _encode(qname, draft), True


def next_link(
    index: ZoneIndex, seen: set[bytes], target: bytes
) -> tuple[ServedZone, bytes] | None:
    """Where a CNAME or DNAME chain goes next: the zone serving ``target`` and its
    lowercased name, noted in ``seen``; None where the chain ends (a loop, or a name no
    served zone holds). The signed path follows chains by the same rule."""
    name = target.lower()
    if name in seen:
        return None
    seen.add(name)
    zone = index.zone_for(name)
    if zone is None:
        return None
    return zone, name


def _negative(cache: ResponseCache, zone: ServedZone, rcode: int, at: int) -> Entry:
    """The NXDOMAIN or NODATA answer of ``zone`` for a question whose name holds the
    zone's apex at offset ``at``: the same SOA for every name, so it is encoded once
    per zone version and offset and kept apart from the response cache (a flood of
    random names or types costs a lookup, and never pushes served answers out)."""
    key = (zone.apex, rcode, at)
    entry: Entry | None = cache.negatives.get(key)
    if entry is None:
        writer = _Writer(zone.apex, skip=at)
        start = len(writer.buf)
        writer.record(zone.apex, SOA, zone.negative_ttl, zone.soa)
        entry = (_QR | _AA | rcode, 0, 1, 0, bytes(writer.buf[start:]), 0, None)
        if len(cache.negatives) >= NEGATIVE_ENTRIES:
            cache.negatives.clear()
        cache.negatives[key] = entry
    return entry


_Found = tuple[int | None, bytes, dict[int, RRset] | None]
"""Where a lookup ends: the kind (``_CUT``, ``_DNAME``, ``_DATA``, or ``None`` when there is
nothing to answer), the owner that decided it (for ``None``: the name if it exists, else
empty) and that owner's records."""

_CUT, _DNAME, _DATA = 1, 2, 3


def _find(zone: ServedZone, name: bytes, qtype: int) -> _Found:
    """Look ``name`` up in ``zone`` (RFC 1034 section 4.3.2 step 3): a delegation at or
    above it, a DNAME above it, its own records (a CNAME, or the type asked), the
    wildcard's that covers it (RFC 4592), or nothing: NODATA when the name or its
    wildcard exists, NXDOMAIN when neither does."""
    above = _interruption(zone, name, qtype)
    if above is not None:
        owner, is_cut = above
        return (_CUT if is_cut else _DNAME), owner, decode_node(zone.nodes[owner])
    blob = zone.nodes.get(name)
    if blob is None:
        if name in zone.empty_nonterminals:
            return None, name, None
        if zone.has_wildcard:
            encloser = wire.parent(name)
            while not zone.exists(encloser):
                encloser = wire.parent(encloser)
            source = b"\x01*" + encloser
            blob = zone.nodes.get(source)
            if blob is None and source in zone.empty_nonterminals:
                return None, source, None
        if blob is None:
            return None, b"", None
    sets = decode_node(blob)
    if qtype == ANY or qtype in sets or (CNAME in sets and qtype != CNAME):
        return _DATA, name, sets
    return None, name, None


def _step(
    zone: ServedZone, name: bytes, qtype: int, found: _Found, draft: _Draft, *, first: bool
) -> bytes | None:
    """Answer ``name`` from ``zone`` into ``draft`` as the lookup ``found``; return a name
    to chase, if any."""
    kind, owner, sets = found
    if sets is None:
        draft.negative(zone, NOERROR if owner else NXDOMAIN)
        return None
    if kind == _CUT:
        if first:
            draft.aa = False
        _referral(zone, owner, sets[NS], draft)
        return None
    if kind == _DNAME:
        ttl, (dname_target,) = sets[DNAME]
        if (owner, DNAME) not in draft.listed:  # a chain through it again: once (RFC 2181 5)
            draft.listed.add((owner, DNAME))
            draft.answer.append((owner, DNAME, ttl, dname_target))
        synthesized = name[: len(name) - len(owner)] + dname_target
        if len(synthesized) > wire.MAX_NAME:
            draft.rcode = YXDOMAIN
            return None
        draft.answer.append((name, CNAME, ttl, synthesized))
        return synthesized
    cname = sets.get(CNAME)
    if cname is not None and qtype != CNAME:
        ttl, (target,) = cname
        draft.answer.append((name, CNAME, ttl, target))
        return None if qtype == ANY else target
    rtype = min(sets) if qtype == ANY else qtype
    rrset = sets[rtype]
    draft.answer.extend(_records(name, rtype, rrset))
    if rtype in _POINTING:
        _point(zone, name, rtype, rrset, draft)
    return None


def _referral(zone: ServedZone, cut: bytes, ns: RRset, draft: _Draft) -> None:
    """The delegation at ``cut``: its NS in authority, and the addresses of its name
    servers that ``zone`` holds. Those at or beneath the cut (in-domain glue) are
    required: without them the delegation cannot be followed, so a response that cannot
    carry them is truncated (RFC 9471 section 3.1). The others (sibling glue, in-zone
    names) are optional, dropped first when the response is too big (section 3.2)."""
    draft.authority.extend(_records(cut, NS, ns))
    for target in ns[1]:
        key = target.lower()
        if wire.is_at_or_below(key, cut):
            draft.addresses(draft.glue, zone, key)
    for target in ns[1]:
        key = target.lower()
        if wire.is_at_or_below(key, zone.apex):
            draft.addresses(draft.extra, zone, key)


_POINTING = frozenset({NS, MX, SRV, NAPTR, SVCB, HTTPS})
"""Types whose records name a host whose addresses (or records) go in additional."""


def _point(zone: ServedZone, owner: bytes, rtype: int, rrset: RRset, draft: _Draft) -> None:
    """Additional data for an answer RRset that names other hosts: only what the
    answering ``zone`` holds with authority, never another served zone's records
    (resolvers discard them as out of bailiwick, and they would tell which other zones
    this node serves). NS targets may be glue beneath a cut; the others must not be.

    MX and SRV: the targets' A and AAAA. NAPTR (RFC 3403 section 4.2): with the flag S
    the replacement's SRV and their targets' addresses, with A its addresses. SVCB and
    HTTPS (RFC 9460 section 4.1): the TargetName's addresses (``.`` is the owner itself
    in ServiceMode, and no target in AliasMode) and, in AliasMode, the target's records of
    the same type and their own targets' addresses: one alias deep, no further."""
    extra = draft.extra
    if rtype == NS:
        for rdata in rrset[1]:
            draft.addresses(extra, zone, rdata.lower())
        return
    for rdata in rrset[1]:
        if rtype == MX:
            _addresses_held(zone, rdata[2:].lower(), draft)
        elif rtype == SRV:
            _addresses_held(zone, rdata[6:].lower(), draft)
        elif rtype == NAPTR:
            flags, replacement = _naptr_lookup(rdata)
            if b"s" in flags:
                srv = _rrset_held(zone, replacement, SRV, draft)
                for target in srv[1] if srv is not None else ():
                    _addresses_held(zone, target[6:].lower(), draft)
            elif b"a" in flags:
                _addresses_held(zone, replacement, draft)
        else:
            alias = _svcb_target(owner, rdata)
            if alias is None:
                continue
            _addresses_held(zone, alias, draft)
            if rdata[:2] == b"\x00\x00":
                aliased = _rrset_held(zone, alias, rtype, draft)
                for record in aliased[1] if aliased is not None else ():
                    held = _svcb_target(alias, record)
                    if held is not None:
                        _addresses_held(zone, held, draft)


def _held(zone: ServedZone, name: bytes) -> bool:
    """Whether ``zone`` holds ``name``'s records with authority: in the zone, at no
    delegation point and beneath neither a delegation nor a DNAME."""
    return wire.is_at_or_below(name, zone.apex) and _interruption(zone, name, A) is None


def _addresses_held(zone: ServedZone, name: bytes, draft: _Draft) -> None:
    if _held(zone, name):
        draft.addresses(draft.extra, zone, name)


def _rrset_held(zone: ServedZone, name: bytes, rtype: int, draft: _Draft) -> RRset | None:
    if not _held(zone, name):
        return None
    return draft.rrset(draft.extra, zone, name, rtype)


def _naptr_lookup(rdata: bytes) -> tuple[bytes, bytes]:
    """A NAPTR's flags (lowercased) and its replacement (lowercased wire name): order
    and preference, then flags, services and regexp as character strings, then the
    replacement."""
    i = 4
    flags = rdata[i + 1 : i + 1 + rdata[i]].lower()
    for _ in range(3):
        i += rdata[i] + 1
    return flags, rdata[i:].lower()


def _svcb_target(owner: bytes, rdata: bytes) -> bytes | None:
    """The host an SVCB or HTTPS record points at (lowercased wire name): its
    TargetName, or in ServiceMode the owner when that is ``.``; ``None`` for an
    AliasMode record whose target is ``.`` (the service does not exist)."""
    target, _ = wire.read_name(rdata, 2)
    if target != wire.ROOT:
        return target.lower()
    return None if rdata[:2] == b"\x00\x00" else owner


def _interruption(zone: ServedZone, name: bytes, qtype: int) -> tuple[bytes, bool] | None:
    """The topmost delegation at or above ``name`` (``(cut, True)``), or DNAME strictly
    above it (``(owner, False)``), within ``zone``. DS at a cut belongs to the parent side,
    so the cut at ``name`` itself does not interrupt a DS query."""
    if not zone.cuts and not zone.dnames:
        return None
    apex_size = len(zone.apex)
    size = len(name)
    for offset in reversed(wire.label_offsets(name)):
        suffix = size - offset
        if suffix < apex_size:
            continue
        ancestor = name[offset:]
        if ancestor in zone.cuts and not (offset == 0 and qtype == DS):
            return ancestor, True
        if offset and ancestor in zone.dnames:
            return ancestor, False
    return None


# --- encoding -------------------------------------------------------------------------

_COMPRESSED_NAME_RDATA = frozenset({NS, CNAME, PTR})
"""Types whose rdata is one name that may be compressed (RFC 3597 section 4)."""


class _Writer:
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
        buf += _RR_HEAD.pack(rtype, IN, ttl, 0)
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


def _encode(qname: bytes, draft: _Draft) -> Entry:
    writer = _Writer(qname)
    start = len(writer.buf)
    for record in (*draft.answer, *draft.authority, *draft.glue):
        writer.record(*record)
    mark = len(writer.buf)
    for record in draft.extra:
        writer.record(*record)
    flags = _QR | (_AA if draft.aa else 0) | draft.rcode
    buf = writer.buf
    return (
        flags,
        len(draft.answer),
        len(draft.authority),
        len(draft.glue) + len(draft.extra),
        bytes(buf[start:]),
        len(draft.glue),
        bytes(buf[start:mark]) if draft.extra else None,
    )

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
  CNAME synthesized with the DNAME's TTL, YXDOMAIN when the new name is too long; a
  DNAME whose target lies beneath itself ends the chain at that CNAME, as NSD does: it
  would apply again to every name it makes);
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
keyed by the lowercased question name and type; a miss takes the answer the holder's
earlier snapshots kept when every zone it was read from is this version's too
(``_cache``: a swap keeps every unchanged zone's answers), else resolves against the
index and encodes once. A cached response compresses every name against the question at offset 12,
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

import dns.exception
import dns.message
import dns.name

from valis_core.dns.answer._cache import CACHE_ENTRIES, ResponseCache
from valis_core.dns.answer._lookup import resolve
from valis_core.dns.answer.message import (
    DO,
    ECHOED,
    HEADER,
    MAX_SIGNED_OTHER,
    NO_EDNS,
    OPCODE,
    OPT_DO,
    OPT_PLAIN,
    QR,
    RR_HEAD,
    SERVER_PAYLOAD,
    TC,
    UPDATE_OPCODE,
    Additional,
    Entry,
    badkey_reply,
    badvers_reply,
    bare_reply,
    no_key,
    parse_general,
    question_end,
    read_name,
    scan_additional,
    size_limit,
    tsig_signature,
)
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.wire.records import (
    AXFR,
    FORMERR,
    IN,
    IXFR,
    NOTIMP,
    OPT,
    REFUSED,
    header_only,
)
from valis_core.dns.zone import ZoneIndex

if TYPE_CHECKING:
    from valis_core.dns.answer.signed import Signer


class Transport(enum.Enum):
    """How the query arrived; it decides the response size limit."""

    UDP = "udp"
    TCP = "tcp"


_TCP = Transport.TCP

EDE_NOT_SUPPORTED = 21
"""Extended DNS Error (RFC 8914 section 4.22) an UPDATE on the query port carries."""

UPDATE_ELSEWHERE = (
    "this port answers queries only: DNS UPDATE goes to the node's owner terminus, on the "
    "launcher config's owner-port (closed when it has none)"
)
"""The EXTRA-TEXT of that error: where the operator sends updates instead."""

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
    qid, qflags, qdcount, ancount, nscount, arcount = HEADER.unpack_from(query)
    if qflags & QR:
        return None
    qend = question_end(query, size) if qdcount == 1 else 0
    if qflags & OPCODE:
        return _other_opcode(query, qend, ancount + nscount, arcount,
                             qid=qid, qflags=qflags, tcp=tcp)
    if not qend:
        return bare_reply(qid, qflags, b"", FORMERR)
    if ancount or nscount:
        return bare_reply(qid, qflags, query[12:qend], FORMERR)

    extra = _additional(query, qend, size, arcount, general)
    if isinstance(extra, int):
        return bare_reply(qid, qflags, query[12:qend], extra)
    payload, ednsflags, version, signed = extra
    opt = b"" if payload < 0 else OPT_DO if ednsflags & DO else OPT_PLAIN
    if version and signed is None:
        return badvers_reply(qid, qflags, query[12:qend], ednsflags)
    if signed is not None:
        limit = size_limit(payload, tcp)
        return badkey_reply(qid, qflags, query[12:qend], opt, signed, limit=limit)

    qtype = query[qend - 4] << 8 | query[qend - 3]
    if query[qend - 2:qend] != _CLASS_IN or qtype in (AXFR, IXFR):
        qclass = query[qend - 2] << 8 | query[qend - 1]
        return bare_reply(qid, qflags, query[12:qend], _refusal(qtype, qclass, tcp), opt)
    key = query[12 : qend - 4].lower() + query[qend - 4 : qend - 2]
    if signer is not None:  # a signed zone's answers (valis_core.dns.answer.signed)
        signed_entry = signer.entry(index, cache, key, qtype, bool(ednsflags & DO))
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
        return parse_general(query)
    if not arcount and qend == size:
        return NO_EDNS
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
    return scan_additional(query, qend, size, arcount)


_BARE_OPTS: dict[bytes, Additional] = {}
"""Bare OPT records (root owner, no options) already read, by their 11 bytes: clients
send a handful of distinct ones (their payload and DO bit), so most queries' additional
section is one dictionary probe."""
_BARE_OPTS_KEPT = 256


def _refusal(qtype: int, qclass: int, tcp: bool) -> int:
    """The RCODE refusing a question of another class or a zone transfer (RFC 5936: AXFR
    only over TCP, so NOTIMP over UDP)."""
    if qclass == IN and qtype == AXFR and not tcp:
        return NOTIMP
    return REFUSED


def _miss(index: ZoneIndex, cache: ResponseCache, key: bytes, qtype: int) -> Entry:
    """Answer a question this snapshot's cache does not hold: from what the holder's
    snapshots kept across swaps when it is this version's answer too, or resolved, and
    kept in both. Refusals and plain negative answers are not kept: they cost a lookup
    and no encoding, and a flood of random names or types would otherwise push the
    served answers out."""
    kept = cache.kept
    entry = None if key not in kept.answers else kept.take(key, index)
    if entry is None:
        entry, reading = resolve(index, cache, key[:-2], qtype)
        if reading is None:
            return entry
        kept.keep(key, reading.kept(entry, None))
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
    flags |= (query[2] << 8 | query[3]) & ECHOED
    room = size_limit(payload, tcp) - 12 - len(qsec) - len(opt)
    has_opt = 1 if opt else 0
    if len(body) <= room:
        return HEADER.pack(qid, flags, 1, an, ns, ar + has_opt) + qsec + body + opt
    if short_body is not None and len(short_body) <= room:
        return HEADER.pack(qid, flags, 1, an, ns, short_ar + has_opt) + qsec + short_body + opt
    return HEADER.pack(qid, flags | TC, 1, 0, 0, has_opt) + qsec + opt


def _other_opcode(
    query: bytes, qend: int, records: int, arcount: int, *, qid: int, qflags: int, tcp: bool
) -> bytes:
    """NOTIMP for an opcode other than QUERY, with an OPT when the message carries one
    (RFC 6891 section 7, as Knot answers; BADVERS for a version above 0), or BADKEY when
    the message is signed (read by dnspython: a NOTIFY carries records a query does not,
    and this path is rare, so only messages of at most ``MAX_SIGNED_OTHER`` bytes are
    read; a longer one is NOTIMP without an OPT). An UPDATE is ``_update_elsewhere``'s."""
    if qflags & OPCODE == UPDATE_OPCODE:
        return _update_elsewhere(query, qend, records, arcount, qid=qid, qflags=qflags)
    opt = b""
    if arcount and qend and len(query) <= MAX_SIGNED_OTHER:
        try:
            message = dns.message.from_wire(query, keyring=no_key)
        except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
            message = None
        signed = tsig_signature(message) if message is not None else None
        if message is not None and signed is not None:
            payload = message.payload if message.edns >= 0 else -1
            opt = b"" if payload < 0 else OPT_DO if message.ednsflags & DO else OPT_PLAIN
            return badkey_reply(
                qid, qflags, query[12:qend], opt, signed, limit=size_limit(payload, tcp)
            )
        extra = _other_additional(query, qend, records, arcount)
        if extra is not None and extra[0] >= 0:
            if extra[2]:
                return badvers_reply(qid, qflags, query[12:qend], extra[1])
            opt = OPT_DO if extra[1] & DO else OPT_PLAIN
    return bare_reply(qid, qflags, query[12:qend], NOTIMP, opt)


def _update_elsewhere(
    query: bytes, qend: int, records: int, arcount: int, *, qid: int, qflags: int
) -> bytes:
    """NOTIMP to an UPDATE, its TSIG (if any) left unjudged: the query port holds no
    keys and takes no updates, so the client hears that, not that its key is bad. With
    EDNS the OPT carries an Extended DNS Error saying where updates go (RFC 8914)."""
    qsec = query[12:qend]
    extra = _other_additional(query, qend, records, arcount) if arcount and qend else None
    if extra is None or extra[0] < 0:
        return bare_reply(qid, qflags, qsec, NOTIMP)
    if extra[2]:
        return badvers_reply(qid, qflags, qsec, extra[1])
    text = UPDATE_ELSEWHERE.encode()
    option = struct.pack("!HHH", 15, 2 + len(text), EDE_NOT_SUPPORTED) + text
    opt = b"\x00" + RR_HEAD.pack(OPT, SERVER_PAYLOAD, extra[1] & DO, len(option)) + option
    return bare_reply(qid, qflags, qsec, NOTIMP, opt)


def _other_additional(query: bytes, qend: int, records: int, arcount: int) -> Additional | None:
    """The additional section of a message of another opcode, read as a query's once the
    records after its question are skipped (a NOTIFY's SOA, an UPDATE's prerequisites and
    updates); ``None`` when it is malformed."""
    size = len(query)
    i = qend
    for _ in range(records):  # each record is at least 11 octets: bounded by the size
        owner = read_name(query, i, size)
        if owner is None or owner[1] + 10 > size:
            return None
        i = owner[1] + 10 + (query[owner[1] + 8] << 8 | query[owner[1] + 9])
    extra = scan_additional(query, i, size, arcount) if i <= size else FORMERR
    return None if isinstance(extra, int) else extra



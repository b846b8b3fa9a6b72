"""Zone transfer out (RFC 5936 AXFR; RFC 1995 IXFR answered in full): who may transfer a
zone, and the messages that carry it. Bytes and values in, bytes out; no IO.

Access (``decide``): a transfer is granted only to a secondary listed for the zone (see
``valis_core.operator_state.secondaries``) whose address is the peer's and whose TSIG key
signed the request. A signed request's TSIG is checked first, as RFC 8945 section 5.2
orders it and NSD and Knot do, against the keys of every listed secondary (``authenticate``,
by ``valis_core.dns.transfer.tsig_verdict``): a key name and algorithm no secondary has is NOTAUTH
with TSIG error BADKEY, a MAC that no such key verifies NOTAUTH with BADSIG (both
unsigned, MAC empty, section 5.3.2), a time signed outside the fudge NOTAUTH with BADTIME,
signed, its Other Data the server's time (section 5.2.3; its time signed is the
request's, as Knot and BIND send it); a TSIG record whose TTL is not 0 (section 4.2) is
FORMERR, as NSD answers it. Then a name that is not a served zone's apex is NOTAUTH (as
NSD and Knot answer it); an address not listed for the zone, an unsigned request, and a
key not listed for that zone at that address are REFUSED (as NSD answers an ACL miss;
Knot answers NOTAUTH). Each refusal names its reason for the log; every response to a
request whose TSIG verified is signed with its key (section 5.3), and every response to a
query with EDNS carries an OPT (RFC 6891 section 7). A request that does not parse is FORMERR.

The messages (``transfer_messages``) come from one ``ServedZone`` (one version: the
caller takes it once, so a transfer never mixes versions): the SOA first, every other
record of the zone (glue and delegations included), the SOA last, packed into messages
of at most ``MESSAGE_SIZE`` bytes with names compressed, each carrying the question.
When the request was signed every message is signed, the first over the request's MAC
and each later one over the previous message's (RFC 8945 section 5.3.1). An IXFR whose
SOA serial is already the zone's (or newer, by RFC 1982) gets that SOA alone (RFC 1995
section 2). An IXFR the zone's change journal reaches back to gets the condensed
difference (``incremental_records``: the new SOA, the secondary's SOA, the records
removed, the new SOA, the records added, the new SOA again); any other gets the whole
zone in AXFR form, which RFC 1995 section 4 allows a server without the history to send.

A secondary also signs the ordinary queries it sends before a transfer (Knot asks for
the SOA over UDP, signed, on every NOTIFY and refresh). The answer path holds no keys
and answers any signed query BADKEY; ``signed_answer`` instead checks the TSIG as above
and answers a query signed with a listed secondary's key (from any address: the answer
is what anyone gets unsigned, as NSD answers it) as the answer path answers it
unsigned, signed over the query's MAC; over UDP a response the TSIG would push past the
client's limit is sent as the question alone with TC set, signed (section 5.3).

An IXFR over UDP from a listed secondary, decided as over TCP, is answered in one
datagram (``datagram_response``, RFC 1995 section 2): the SOA alone when it is up to
date, the condensed difference when that fits the query's UDP payload, and otherwise
the SOA alone with TC set, which tells it to ask again over TCP.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Iterator, Sequence

import attrs
import dns.exception
import dns.message
import dns.name
import dns.rdatatype
import dns.tsig

from valis_core.dns.answer.message import (  # the answer path's UDP limit, compression
    Writer,
    size_limit,
)
from valis_core.dns.transfer.journal import Difference
from valis_core.dns.transfer.tsig_verdict import Rejection, Signer, opt, reply, signs_as, verify
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import (
    AXFR,
    FORMERR,
    IN,
    IXFR,
    NOERROR,
    NOTAUTH,
    REFUSED,
    SOA,
    RecordRow,
    ZoneError,
    decode_node,
    header_only,
)
from valis_core.dns.zone import ServedZone, ZoneIndex
from valis_core.dns.zone.build import rdata_wire  # the loader's, shared
from valis_core.dns.zone.serial import serial_gt

MESSAGE_SIZE = 16384
"""Bytes of records per message before its TSIG: big enough that a transfer is a few
messages per thousand records, small enough that a slow reader holds little."""

PAUSE_EVERY = 64
"""Records written between the points where a transfer lets other work run."""

_HEADER = struct.Struct("!HHHHHH")
_QR = 0x8000
_AA = 0x0400
_TC = 0x0200
_RD = 0x0100


WireRecord = tuple[bytes, int, int, bytes]
"""Owner, type, TTL and rdata, names and rdata in uncompressed wire form."""


@attrs.frozen
class Listed:
    """A secondary as access needs it: its zone, address and TSIG key; and the port its
    NOTIFY goes to (``None``: the sender's, 53)."""

    zone: str
    address: str
    key_name: str
    algorithm: str
    secret: bytes = attrs.field(repr=False)
    notify_port: int | None = None
    signs_as: tuple[str, str] = attrs.field(
        init=False, repr=False, eq=False,
        default=attrs.Factory(
            lambda self: signs_as(self.key_name, self.algorithm),
            takes_self=True,
        ),
    )
    """The key name and algorithm as a TSIG names them (absolute, lowercase), made once:
    every signed query is matched against every listed secondary's."""

    def key(self) -> dns.tsig.Key:
        return dns.tsig.Key(self.key_name, self.secret, self.algorithm)


@attrs.frozen
class Grant:
    """A transfer to make: the zone version, the request, and the key it was signed with."""

    zone: ServedZone
    query: dns.message.Message
    key: dns.tsig.Key
    full: bool
    """False when an IXFR is already up to date: the answer is the SOA alone."""
    incremental: tuple[WireRecord, ...] | None = None
    """An IXFR's records from the journal (``incremental_records``), when it reaches."""
    whole: Callable[[], Iterator[WireRecord]] | None = None
    """The whole zone's records when they are not its own (``zone_records``): a signed
    zone's, signatures and chain included (``valis_core.dns.transfer.signed``)."""


@attrs.frozen
class Refusal:
    """A transfer refused: the response to send (``None``: nothing), why (for the log)
    and the kind of refusal (a metric label: one of ``REFUSAL_KINDS``)."""

    response: bytes | None
    reason: str
    kind: str


REFUSAL_KINDS = (
    "malformed", "not_served", "unlisted", "unsigned", "unknown_key", "bad_signature",
    "bad_time", "signed_without_chain",
)


def transfer_question(query: bytes) -> int | None:
    """AXFR or IXFR when ``query`` is a standard query (QR clear, opcode QUERY) with one
    question of that type in class IN, else ``None``: a cheap test that sends zone
    transfers to ``decide`` and everything else to the answer path."""
    size = len(query)
    if size < 17 or query[2] & 0xF8 or query[4:6] != b"\x00\x01":
        return None
    i = 12
    while i < size and query[i]:
        if query[i] > wire.MAX_LABEL:
            return None
        i += query[i] + 1
    if i + 5 > size:
        return None
    qtype, qclass = struct.unpack_from("!HH", query, i + 1)
    if qclass != IN or qtype not in (AXFR, IXFR):
        return None
    return int(qtype)


def peer_host(address: str) -> str:
    """The peer's address as secondaries are listed (an IPv4-mapped IPv6 address as
    IPv4); an unparsable one as given (it then matches nothing)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def decide(
    index: ZoneIndex, query: bytes, peer: str, listed: Sequence[Listed], *, now: float,
    tcp: bool = True,
) -> Grant | Refusal:
    """Whether ``peer`` may transfer what ``query`` asks for from ``index`` (asked over TCP,
    or over UDP when ``tcp`` is false). Never raises: anything malformed is refused."""
    try:
        return _decide(index, query, peer_host(peer), listed, now=now, tcp=tcp)
    except Exception as exc:  # malformed input must never take a server down
        return Refusal(
            header_only(query, FORMERR), f"unreadable request ({type(exc).__name__})",
            "malformed",
        )


def _decide(
    index: ZoneIndex, query: bytes, peer: str, listed: Sequence[Listed], *, now: float,
    tcp: bool,
) -> Grant | Refusal:
    try:
        message = dns.message.from_wire(query, keyring=False)
    except dns.exception.DNSException as exc:
        return Refusal(header_only(query, FORMERR), f"unreadable request ({exc})", "malformed")
    key = authenticate(query, message, listed, now=now, tcp=tcp)
    if isinstance(key, Refusal):
        return key

    def refuse(rcode: int, reason: str, kind: str) -> Refusal:
        return Refusal(reply(query, message, rcode, key, now), reason, kind)

    question = message.question[0]
    apex = wire.name_wire(question.name).lower()
    zone = index.zone_for(apex)
    if zone is None or zone.apex != apex:
        return refuse(NOTAUTH, f"{question.name} is not a served zone", "not_served")
    mine = [entry for entry in listed if entry.zone == zone.origin and entry.address == peer]
    if not mine:
        return refuse(REFUSED, f"{peer} is not a listed secondary of {zone.origin}", "unlisted")
    if key is None:
        return refuse(REFUSED, "the request is not TSIG-signed", "unsigned")
    if not any(entry.key() == key for entry in mine):
        return refuse(REFUSED, f"key {key.name} is not listed for {peer} as a secondary of "
                      f"{zone.origin}", "unlisted")
    full = question.rdtype == AXFR or not _up_to_date(message, zone)
    return Grant(zone, message, key, full)


def authenticate(
    query: bytes, message: dns.message.Message, listed: Sequence[Listed], *, now: float,
    tcp: bool,
) -> dns.tsig.Key | Refusal | None:
    """The key of a listed secondary (of any zone, at any address) that signed ``query``,
    its MAC verified and its time within the fudge (RFC 8945 section 5.2); ``None`` when
    ``query`` (parsed as ``message``) is unsigned; otherwise the refusal, with the
    response the RFC prescribes (see the module docstring)."""
    verdict = verify(
        query, message,
        lambda wanted: (entry.key() for entry in listed if entry.signs_as == wanted),
        now=now, tcp=tcp, unknown="no listed secondary's",
    )
    if isinstance(verdict, Rejection):
        return Refusal(verdict.response, verdict.reason, verdict.kind)
    return verdict


def signed_answer(
    query: bytes,
    listed: Sequence[Listed],
    answer: Callable[[bytes], bytes | None],
    *,
    now: float,
    tcp: bool,
) -> bytes | Refusal | None:
    """The response to an ordinary query signed with a listed secondary's key (the SOA
    query a secondary sends before it transfers, say): ``answer`` gives it for the query
    without its TSIG, and it is signed over the query's MAC. A refusal when the TSIG does
    not pass ``authenticate`` (its response says why); ``None`` when the query is unsigned
    or does not parse (it keeps the answer path's response). Never raises."""
    try:
        message = dns.message.from_wire(query, keyring=False)
        key = authenticate(query, message, listed, now=now, tcp=tcp)
        if key is None or isinstance(key, Refusal):
            return key
        assert message.tsig is not None
        mac = message.tsig[0].mac
        message.tsig = None
        response = answer(message.to_wire())
        if response is None:
            return None
        signer = Signer(key, mac, message.id, now)
        signed = signer.sign(response)
        limit = size_limit(message.payload if message.edns >= 0 else -1, tcp)
        if len(signed) <= limit:
            return signed
        truncated = reply(query, message, response[3] & 0x0F, None, now,
                          flags=_TC | (response[2] << 8 & _AA))
        return Signer(key, mac, message.id, now).sign(truncated)
    except Exception:  # malformed input must never take a server down
        return None


@attrs.frozen
class Datagram:
    """The one datagram answering an IXFR over UDP, and what it says (``DATAGRAM_KINDS``)."""

    response: bytes
    kind: str


DATAGRAM_KINDS = ("up_to_date", "incremental", "truncated")
"""An IXFR over UDP answered with the SOA alone (up to date), with the condensed
difference, or with the SOA alone and TC set (ask again over TCP)."""

_SMALLEST_RECORD = 11
"""Bytes of the smallest record a message can hold (a compressed owner and an empty
rdata): a difference with more records than a datagram has room for at this size cannot
fit, and is not built."""


def datagram_response(grant: Grant, difference: Difference | None, *, now: float) -> Datagram:
    """The answer to ``grant``, an IXFR over UDP (RFC 1995 section 2), in one signed
    datagram: the SOA alone when the secondary is up to date; ``difference`` (the journal's,
    from the secondary's serial) condensed as over TCP when it fits the query's UDP payload
    (512 bytes without EDNS); otherwise, the journal not reaching back included, the SOA
    alone with TC set, so the secondary asks again over TCP. Never raises for a journal
    record that does not parse (that is answered TC too)."""
    limit = size_limit(grant.query.payload if grant.query.edns >= 0 else -1, False)
    soa = next(zone_records(grant.zone))
    if not grant.full:
        return Datagram(_single(grant, (soa,), now, 0), "up_to_date")
    if difference is not None and (
        len(difference.removed) + len(difference.added) + 4 <= limit // _SMALLEST_RECORD
    ):
        try:
            records = incremental_records(grant.zone, difference)
        except ZoneError:
            records = ()
        if records:
            response = _single(grant, records, now, 0, limit=limit)
            if len(response) <= limit:
                return Datagram(response, "incremental")
    return Datagram(_single(grant, (soa,), now, _TC), "truncated")


def _single(
    grant: Grant, records: Sequence[WireRecord], now: float, flags: int, *, limit: int = 0
) -> bytes:
    """One signed message holding ``records`` (and an OPT when the query had one); with
    ``limit``, writing stops once the message is longer, and what comes back is too long."""
    query = grant.query
    writer = _fresh(wire.name_wire(query.question[0].name), query.question[0].rdtype)
    count = 0
    for owner, rtype, ttl, rdata in records:
        writer.record(owner, rtype, ttl, rdata)
        count += 1
        if limit and len(writer.buf) > limit:
            break
    extra = opt(query)
    writer.buf += extra
    flags |= _QR | _AA | (query.flags & _RD) | NOERROR
    _HEADER.pack_into(writer.buf, 0, query.id, flags, 1, count, 0, 1 if extra else 0)
    assert query.tsig is not None
    return Signer(grant.key, query.tsig[0].mac, query.id, now).sign(bytes(writer.buf))


def _up_to_date(query: dns.message.Message, zone: ServedZone) -> bool:
    """Whether an IXFR's SOA (in its authority section) is not older than the zone's."""
    theirs = ixfr_serial(query)
    return theirs is not None and not serial_gt(zone_serial(zone), theirs)


def ixfr_serial(query: dns.message.Message) -> int | None:
    """The serial an IXFR request says its sender has (its authority section's SOA)."""
    for rrset in query.authority:
        if rrset.rdtype == SOA and len(rrset):
            return int(rrset[0].serial)
    return None


def zone_serial(zone: ServedZone) -> int:
    _, end = wire.read_name(zone.soa, 0)
    _, end = wire.read_name(zone.soa, end)
    return int.from_bytes(zone.soa[end : end + 4], "big")


def zone_records(zone: ServedZone) -> Iterator[tuple[bytes, int, int, bytes]]:
    """Every record of ``zone`` in transfer order: the SOA, the rest, the SOA again."""
    sets = decode_node(zone.nodes[zone.apex])
    soa_ttl = sets[SOA][0]
    soa = (zone.apex, SOA, soa_ttl, zone.soa)
    yield soa
    for owner, blob in zone.nodes.items():
        for rtype, (ttl, rdatas) in decode_node(blob).items():
            if owner == zone.apex and rtype == SOA:
                continue
            for rdata in rdatas:
                yield owner, rtype, ttl, rdata
    yield soa


def incremental_records(zone: ServedZone, difference: Difference) -> tuple[WireRecord, ...]:
    """An IXFR's records (RFC 1995 section 4) for ``difference``, condensed into one
    version: ``zone``'s SOA, the secondary's SOA, the removals, ``zone``'s SOA, the
    additions, ``zone``'s SOA. Raises ``ZoneError`` for a journal record that does not
    parse (the caller then sends the whole zone).

    The journal compares rows as the operator wrote them, while the node serves an
    RRset with its rows' lowest TTL and each record once however many rows spell it
    (``2001:db8::53``, ``2001:0db8::53``). Where the difference's own records say what
    the secondary must hold (every one at the TTL served, none it removes still served,
    and the RRset's TTL unchanged: a record removed at it, or none staying), they are
    sent as they are; an RRset touched otherwise is sent whole, as
    ``zone`` serves it: its records that were there before removed, and all of them added
    with the TTL served. The secondary then holds what the node serves, whatever the
    rows."""
    origin = zone.origin
    soa = next(zone_records(zone))
    removed = [_wire_record(origin, row) for row in difference.removed]
    added = [_wire_record(origin, row) for row in difference.added]
    removals, additions = _as_served(zone, removed, added)
    return (soa, _wire_record(origin, difference.old_soa), *removals, soa, *additions, soa)


def _as_served(
    zone: ServedZone, removed: Sequence[WireRecord], added: Sequence[WireRecord]
) -> tuple[list[WireRecord], list[WireRecord]]:
    """The removals and additions that leave each RRset ``removed`` and ``added`` touch
    as ``zone`` serves it (see ``incremental_records``), each record once."""
    touched: dict[tuple[bytes, int], tuple[list[WireRecord], list[WireRecord]]] = {}
    for records, side in ((removed, 0), (added, 1)):
        for record in records:
            touched.setdefault((record[0].lower(), record[1]), ([], []))[side].append(record)
    removals: list[WireRecord] = []
    additions: list[WireRecord] = []
    for (key, rtype), (gone, new) in touched.items():
        node = zone.nodes.get(key)
        rrset = None if node is None else decode_node(node).get(rtype)
        if rrset is None:
            removals += _once(gone)
            continue
        ttl, served = rrset
        fresh = {r[3] for r in new}
        # Exact when every record sent is at the TTL served, none removed is still served,
        # and the secondary's RRset was at that TTL too: it had a record removed at it
        # (the lowest of the RRset then, as now), or it had no record that stays.
        if (all(r[2] == ttl for r in (*gone, *new)) and not any(r[3] in served for r in gone)
                and (gone or all(rdata in fresh for rdata in served))):
            removals += _once(gone)
            additions += _once(new)
            continue
        owner = (new or gone)[0][0]
        there = [(owner, rtype, ttl, rdata) for rdata in served if rdata not in fresh]
        removals += _once([*gone, *there])
        additions += [(owner, rtype, ttl, rdata) for rdata in served]
    return removals, additions


def _once(records: Sequence[WireRecord]) -> list[WireRecord]:
    """``records`` of one RRset, each record data once (rows spelling one record)."""
    first: dict[bytes, WireRecord] = {}
    for record in records:
        first.setdefault(record[3], record)
    return list(first.values())


def _wire_record(origin: str, row: RecordRow) -> WireRecord:
    try:
        rtype = int(dns.rdatatype.from_text(row.rtype))
        owner = wire.from_text(row.owner)
    except (dns.exception.DNSException, wire.BadName, ValueError) as exc:
        raise ZoneError(origin, row.owner, f"journal record unreadable: {exc}") from None
    return owner, rtype, row.ttl, rdata_wire(origin, row.owner, rtype, row.rdata)


def transfer_messages(grant: Grant, *, now: float, size: int = MESSAGE_SIZE) -> Iterator[bytes]:
    """The response messages of ``grant``, each signed."""
    for step in transfer_steps(grant, now=now, size=size):
        if step is not None:
            yield step


def transfer_steps(
    grant: Grant, *, now: float, size: int = MESSAGE_SIZE, pause_every: int = PAUSE_EVERY
) -> Iterator[bytes | None]:
    """``transfer_messages``, with ``None`` after every ``pause_every`` records written:
    a point where the caller may let other work run, so that building one message never
    holds up a server for long."""
    query = grant.query
    qname = wire.name_wire(query.question[0].name)
    qtype = query.question[0].rdtype
    flags = _QR | _AA | (query.flags & _RD) | NOERROR
    records = zone_records(grant.zone) if grant.whole is None else grant.whole()
    if not grant.full:
        records = iter([next(records)])
    elif grant.incremental is not None:
        records = iter(grant.incremental)
    assert query.tsig is not None
    signer = Signer(grant.key, query.tsig[0].mac, query.id, now)
    extra = opt(query)
    writer = _fresh(qname, qtype)
    count = 0
    for written, (owner, rtype, ttl, rdata) in enumerate(records, 1):
        if count and len(writer.buf) + len(owner) + 10 + len(rdata) > size:
            yield _finish(writer, query.id, flags, count, signer, opt=extra)
            writer = _fresh(qname, qtype)
            count = 0
        writer.record(owner, rtype, ttl, rdata)
        count += 1
        if written % pause_every == 0:
            yield None
    yield _finish(writer, query.id, flags, count, signer, opt=extra)


def _fresh(qname: bytes, qtype: int) -> Writer:
    writer = Writer(qname)
    writer.buf[-4:] = struct.pack("!HH", qtype, IN)
    return writer


def _finish(
    writer: Writer, qid: int, flags: int, count: int, signer: Signer, *, opt: bytes
) -> bytes:
    """One message of a transfer, with the OPT in each when the request had EDNS (RFC 6891
    section 7; Knot does so, NSD only in the first)."""
    buf = writer.buf + opt
    _HEADER.pack_into(buf, 0, qid, flags, 1, count, 0, 1 if opt else 0)
    return signer.sign(bytes(buf))


def refused(query: bytes, grant: Grant, *, now: float) -> bytes | None:
    """REFUSED to a request granted by access but not by the zone's state (a signed zone
    that cannot be sent signed: ``valis_core.dns.transfer.signed``), signed with the
    request's key as every response to a verified request is."""
    try:
        return reply(query, grant.query, REFUSED, grant.key, now)
    except ValueError:
        return None

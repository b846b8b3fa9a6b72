"""DNS over HTTPS (RFC 8484) as a pure core: an HTTP request in, a DNS query or a refusal out.

Both HTTP versions hand this module the same four things (method, target, headers,
body), so HTTP/1.1 and HTTP/2 route, refuse and cache alike. ``route`` says what a
request asks for — a DNS query's bytes, the status page — or raises ``DohError`` with
the HTTP status to answer; it raises nothing else whatever the bytes. ``dns_response``
and ``plain_response`` give the status, headers and body to send. No sockets, no trio.

Bytes that are not a DNS query (``query_problem``: a response, no question, or sections
that are not what the header counts: a record cut short, a malformed name, bytes after
the last record) are 400, as Google Public DNS and CoreDNS answer them: there is no DNS
message to answer. A well-formed query the server will not answer (two questions, an
opcode other than QUERY, a record in the answer section) is 200 with the DNS error, as
RFC 8484 section 4.2.1 asks for any valid DNS response.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Callable, Sequence
from urllib.parse import parse_qsl, urlsplit

import attrs

from valis_core.dns.wire import MAX_LABEL, MAX_NAME
from valis_core.errors import ValisError

PATH = "/dns-query"
STATUS_PATH = "/"
DNS_MESSAGE = "application/dns-message"

MIN_MESSAGE = 12
"""A DNS header's length: anything shorter is no query."""
MAX_MESSAGE = 65535
"""The largest DNS message (RFC 1035 over TCP, RFC 8484 §6): the body and ``dns=`` bound."""
MAX_RECORDS = 16
"""Records (the question included) a DNS query may count: a query holds a question, an
OPT, perhaps a TSIG; the bound keeps the walk of any body short (at most this many
names read), where a 64 KiB message of records would cost milliseconds."""
MAX_TARGET = 2 + len(PATH) + 5 + (MAX_MESSAGE * 4 + 2) // 3
"""The longest request target worth reading: the path and a base64url of the largest
message."""

Headers = Sequence[tuple[bytes, bytes]]

_BASE64URL = re.compile(rb"[A-Za-z0-9_-]*")
_RR_TAIL = struct.Struct("!HHIH")
_OPT = 41
_SOA = 6
_TSIG = 250


class DohError(ValisError):
    """A request the edge refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@attrs.frozen
class DnsQuery:
    """A DNS query in wire form, taken from ``dns=`` (GET) or the body (POST)."""

    wire: bytes


@attrs.frozen
class StatusPage:
    """A request for the small page at ``/`` saying what the edge serves."""

    head_only: bool


Route = DnsQuery | StatusPage


@attrs.frozen
class Response:
    """What to send: a status, header fields (lower-case names) and a body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


Respond = Callable[[bytes, bytes, Headers, bytes], Response]
"""What both HTTP versions call per request: method, target, headers, body -> response."""


def route(method: bytes, target: bytes, headers: Headers, body: bytes) -> Route:
    """What the request asks for; raises ``DohError`` (and nothing else) to refuse it."""
    try:
        return _route(method, target, headers, body)
    except DohError:
        raise
    except Exception as exc:  # a malformed request must never take the edge down
        raise DohError(400, f"malformed request ({type(exc).__name__})") from None


def _route(method: bytes, target: bytes, headers: Headers, body: bytes) -> Route:
    if len(target) > MAX_TARGET:
        raise DohError(414, "request target too long")
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        raise DohError(400, "request target is not ASCII") from None
    split = urlsplit(text)
    if split.path == STATUS_PATH:
        if method not in (b"GET", b"HEAD"):
            raise DohError(405, "the status page takes GET or HEAD")
        return StatusPage(head_only=method == b"HEAD")
    if split.path != PATH:
        raise DohError(404, f"nothing here; DNS over HTTPS is at {PATH}")
    if method == b"GET":
        return DnsQuery(_from_query(split.query))
    if method == b"POST":
        return DnsQuery(_from_body(headers, body))
    raise DohError(405, f"{PATH} takes GET or POST")


def _from_query(query: str) -> bytes:
    pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=16)
    values = [value for key, value in pairs if key == "dns"]
    if len(values) != 1:
        raise DohError(400, "GET needs exactly one dns= parameter (base64url, RFC 8484)")
    encoded = values[0].encode("ascii").rstrip(b"=")
    if not _BASE64URL.fullmatch(encoded) or len(encoded) % 4 == 1:
        raise DohError(400, "dns= is not base64url")
    try:
        wire = base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        raise DohError(400, "dns= is not base64url") from None
    return _checked(wire)


def _from_body(headers: Headers, body: bytes) -> bytes:
    types = [value for name, value in headers if name.lower() == b"content-type"]
    if len(types) != 1 or types[0].split(b";")[0].strip().lower() != DNS_MESSAGE.encode():
        raise DohError(415, f"POST takes Content-Type: {DNS_MESSAGE}")
    return _checked(body)


def _checked(wire: bytes) -> bytes:
    if len(wire) > MAX_MESSAGE:
        raise DohError(413, f"a DNS message is at most {MAX_MESSAGE} bytes")
    if len(wire) < MIN_MESSAGE:
        raise DohError(400, "too short to be a DNS message")
    problem = query_problem(wire)
    if problem is not None:
        raise DohError(400, f"not a DNS query: {problem}")
    return wire


def query_problem(wire: bytes) -> str | None:
    """Why ``wire`` (at least a header long) is not a DNS query, or ``None``: a walk of
    the sections its header counts (at most ``MAX_RECORDS``), each name's labels and
    pointers checked (never followed)."""
    if wire[2] & 0x80:
        return "it is a response (QR set)"
    qdcount, ancount, nscount, arcount = struct.unpack_from("!HHHH", wire, 4)
    if not qdcount:
        return "it has no question"
    if qdcount + ancount + nscount + arcount > MAX_RECORDS:
        return (f"it counts {qdcount + ancount + nscount + arcount} records, more than the "
                f"{MAX_RECORDS} a query may hold")
    at = 12
    try:
        for _ in range(qdcount):
            at = _skip_name(wire, at) + 4
        for _ in range(ancount + nscount + arcount):
            at = _skip_name(wire, at) + _RR_TAIL.size
            at += int.from_bytes(wire[at - 2 : at], "big")
    except (IndexError, ValueError):
        return "its sections are cut short or hold a malformed name"
    if at > len(wire):
        return "its last record is cut short"
    if at < len(wire):
        return f"{len(wire) - at} bytes follow its last record"
    return None


def dns_response(wire: bytes | None) -> Response:
    """The HTTP response carrying ``wire`` (the answer), cacheable for its least TTL.

    ``None`` (the answer path dropped the query: a response sent as a query, say) is a
    400: over HTTP there is no silence to fall back on.
    """
    if wire is None:
        return plain_response(400, "not a DNS query this server answers\n")
    headers = (
        (b"content-type", DNS_MESSAGE.encode()),
        (b"content-length", str(len(wire)).encode()),
        (b"cache-control", b"max-age=%d" % max_age(wire)),
    )
    return Response(200, headers, wire)


def plain_response(status: int, text: str, *, head_only: bool = False) -> Response:
    """A short text response (a refusal or the status page), never cached."""
    body = text.encode("utf-8")
    headers: tuple[tuple[bytes, bytes], ...] = (
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    )
    if status == 405:
        headers += ((b"allow", b"GET, POST" if text.startswith(PATH) else b"GET, HEAD"),)
    return Response(status, headers, b"" if head_only else body)


def refusal(error: DohError) -> Response:
    return plain_response(error.status, error.detail + "\n")


def max_age(wire: bytes) -> int:
    """Seconds a response may be cached (RFC 8484 §5.1): the least TTL of its answer and
    authority records; for a negative answer (no answer records) the SOA's TTL bounded
    by its MINIMUM field (RFC 2308 §5). 0 when there is no record to go by."""
    try:
        return _max_age(wire)
    except (IndexError, struct.error, ValueError):
        return 0


def _max_age(wire: bytes) -> int:
    qdcount, ancount, nscount = struct.unpack_from("!HHH", wire, 4)
    at = 12
    for _ in range(qdcount):
        at = _skip_name(wire, at) + 4
    least: int | None = None
    for _ in range(ancount + nscount):
        at = _skip_name(wire, at)
        rtype, _, ttl, rdlength = _RR_TAIL.unpack_from(wire, at)
        at += _RR_TAIL.size
        if rtype in (_OPT, _TSIG):
            continue
        if rtype == _SOA and ancount == 0:
            rdata_end = at + rdlength
            minimum = struct.unpack_from("!I", wire, rdata_end - 4)[0]
            ttl = min(ttl, minimum)
        least = ttl if least is None else min(least, ttl)
        at += rdlength
    return 0 if least is None else least


def _skip_name(wire: bytes, at: int) -> int:
    """The offset after the name at ``at``; ``ValueError`` for a label type other than a
    label or a pointer, a pointer that does not point back, or a name over 255 bytes,
    ``IndexError`` for one cut short."""
    size = 0
    for _ in range(128):
        length = wire[at]
        if length >= 0xC0:
            if (length & 0x3F) << 8 | wire[at + 1] >= at:
                raise ValueError("a compression pointer that does not point back")
            return at + 2
        if length > MAX_LABEL:
            raise ValueError("an unknown label type")
        size += length + 1
        if size > MAX_NAME:
            raise ValueError("a name longer than 255 bytes")
        if length == 0:
            return at + 1
        at += length + 1
    raise ValueError("name too long")

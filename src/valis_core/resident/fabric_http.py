"""The fabric's HTTP/1.1: requests read through h11, responses written whole.

The fabric answers tools on loopback, so it needs only a sliver of HTTP/1.1: one
``GET`` (or ``HEAD``) per connection, no request body, the response closes the
connection. Requests are read by h11, the HTTP stack the public edge speaks too; what
it reads is bounded (``MAX_HEAD`` bytes of request line and headers, ``MAX_HEADERS``
fields) and anything outside that sliver is an ``HttpError`` carrying the status to
answer with, never an exception of another kind: a malformed request cannot crash the
fabric.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import h11

MAX_HEAD = 8192
MAX_HEADERS = 64

_TARGET = re.compile(rb"/[\x21-\x7e]*")
_HTTP_VERSIONS = (b"1.0", b"1.1")

REASONS: Mapping[int, str] = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class HttpError(Exception):
    """A request the fabric refuses; ``status`` is the response to send."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@attrs.frozen
class Request:
    """One request head: method, decoded path, query parameters, headers (names lower)."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]

    def bearer_token(self) -> str | None:
        """The token of an ``Authorization: Bearer <token>`` header, if any."""
        value = self.headers.get("authorization")
        if value is None:
            return None
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return token.strip()


class RequestReader:
    """One connection's request, read through h11 as its bytes arrive."""

    def __init__(self) -> None:
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)

    def receive(self, data: bytes) -> Request | None:
        """Take ``data`` (``b""``: the client closed); the request once its head is whole.

        Raises ``HttpError`` for a request the fabric refuses (431 once a head passes
        ``MAX_HEAD`` bytes unfinished), and nothing else.
        """
        try:
            self._conn.receive_data(data)
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise HttpError(exc.error_status_hint, f"malformed request: {exc}") from None
        if event is h11.NEED_DATA:
            if not data:
                raise HttpError(400, "the request ended before its head did")
            return None
        if not isinstance(event, h11.Request):
            raise HttpError(400, "no request")
        try:
            return _request(event)
        except HttpError:
            raise
        except Exception as exc:  # whatever h11 let through, never a crash
            raise HttpError(400, f"malformed request ({type(exc).__name__})") from None


def parse_head(head: bytes) -> Request:
    """Read a whole request head (through its blank line)."""
    request = RequestReader().receive(head)
    if request is None:
        raise HttpError(400, "the request head is incomplete")
    return request


def _request(event: h11.Request) -> Request:
    if event.http_version not in _HTTP_VERSIONS:
        raise HttpError(505, "only HTTP/1.0 and HTTP/1.1 are spoken here")
    if not _TARGET.fullmatch(event.target):
        raise HttpError(400, "the request target must be an absolute path")
    headers = _headers(event.headers)
    if headers.get("content-length", "0").strip() != "0" or "transfer-encoding" in headers:
        raise HttpError(413, "the fabric takes no request body")
    split = urlsplit(event.target.decode("ascii"))
    try:
        pairs = parse_qsl(split.query, keep_blank_values=True, strict_parsing=False,
                          max_num_fields=32)
    except ValueError as exc:
        raise HttpError(400, f"malformed query: {exc}") from None
    query: dict[str, str] = {}
    for key, value in pairs:
        if key in query:
            raise HttpError(400, f"query parameter {key!r} given twice")
        query[key] = value
    return Request(
        method=event.method.decode("ascii"),
        path=unquote(split.path),
        query=query,
        headers=headers,
    )


def _headers(fields: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    if len(fields) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header fields")
    headers: dict[str, str] = {}
    for name, value in fields:  # h11 gives names lower-cased, values validated
        key = name.decode("ascii")
        if key in headers:
            if key in ("authorization", "content-length", "host"):
                raise HttpError(400, f"header {key} given twice")
            headers[key] = headers[key] + ", " + value.decode("latin-1")
        else:
            headers[key] = value.decode("latin-1")
    return headers


def render_response(
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain; charset=utf-8",
    extra: Mapping[str, str] | None = None,
    include_body: bool = True,
) -> bytes:
    """A whole HTTP/1.1 response that closes the connection."""
    reason = REASONS.get(status, "Unknown")
    fields = {
        "Content-Type": content_type,
        "Content-Length": str(len(body)),
        "Cache-Control": "no-store",
        "Connection": "close",
        **(extra or {}),
    }
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in fields.items()
    )
    return head.encode("latin-1") + b"\r\n" + (body if include_body else b"")

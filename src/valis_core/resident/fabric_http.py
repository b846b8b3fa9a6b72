"""The fabric's HTTP/1.1, as a pure request reader and response writer.

The fabric answers tools on loopback, so it needs only a sliver of HTTP/1.1: one
``GET`` (or ``HEAD``) per connection, no request body, the response closes the
connection. What it reads is bounded (``MAX_HEAD`` bytes of request line and headers,
``MAX_HEADERS`` fields) and anything outside that sliver is an ``HttpError`` carrying
the status to answer with, never an exception of another kind: a malformed request
cannot crash the fabric.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

MAX_HEAD = 8192
MAX_HEADERS = 64
HEAD_END = b"\r\n\r\n"

_METHOD = re.compile(rb"[A-Z]{1,16}")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VERSION = re.compile(rb"HTTP/1\.[01]")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_TARGET = re.compile(rb"/[\x21-\x7e]*")

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


def head_end(buffer: bytes | bytearray) -> int | None:
    """The length of the request head in ``buffer`` (through the blank line), if whole.

    Raises ``HttpError(431)`` when no head ends within ``MAX_HEAD`` bytes.
    """
    at = buffer.find(HEAD_END, 0, MAX_HEAD + len(HEAD_END))
    if at >= 0:
        return at + len(HEAD_END)
    if len(buffer) >= MAX_HEAD:
        raise HttpError(431, f"request head longer than {MAX_HEAD} bytes")
    return None


def parse_head(head: bytes) -> Request:
    """Read a request head (as delimited by ``head_end``)."""
    if len(head) > MAX_HEAD + len(HEAD_END):
        raise HttpError(431, f"request head longer than {MAX_HEAD} bytes")
    lines = head.split(b"\r\n")
    while lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise HttpError(400, "empty request")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not _METHOD.fullmatch(method):
        raise HttpError(400, "malformed method")
    if not _VERSION.fullmatch(version):
        raise HttpError(505, "only HTTP/1.0 and HTTP/1.1 are spoken here")
    if not _TARGET.fullmatch(target):
        raise HttpError(400, "the request target must be an absolute path")
    headers = _headers(lines[1:])
    if headers.get("content-length", "0").strip() != "0" or "transfer-encoding" in headers:
        raise HttpError(413, "the fabric takes no request body")
    split = urlsplit(target.decode("ascii"))
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
        method=method.decode("ascii"),
        path=unquote(split.path),
        query=query,
        headers=headers,
    )


def _headers(lines: Sequence[bytes]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header fields")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "malformed header field")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise HttpError(400, "control character in a header field")
        key = name.decode("ascii").lower()
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

"""One DoH request answered from one snapshot: the pure step both HTTP versions share.

The query goes to the same ``answer()`` as :53, over the TCP transport's size limit, so
the answer is whole (TC is never set: HTTP carries up to 64 KiB) and a name outside the
served zones gets the very REFUSED :53 gives.
"""

from __future__ import annotations

import attrs

from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.edge.doh import (
    PATH,
    DnsQuery,
    DohError,
    Headers,
    Response,
    dns_response,
    plain_response,
    refusal,
    route,
)

STATUS_TEXT = f"valis: DNS over HTTPS (RFC 8484) is served at {PATH}\n"


def respond(snapshot: Snapshot, method: bytes, target: bytes, headers: Headers,
            body: bytes) -> Response:
    """The response to one request (to a HEAD, without its body); never raises."""
    response = _respond(snapshot, method, target, headers, body)
    if method == b"HEAD" and response.body:
        return attrs.evolve(response, body=b"")
    return response


def _respond(snapshot: Snapshot, method: bytes, target: bytes, headers: Headers,
             body: bytes) -> Response:
    try:
        asked = route(method, target, headers, body)
    except DohError as exc:
        return refusal(exc)
    if isinstance(asked, DnsQuery):
        return dns_response(answer(snapshot, asked.wire, transport=Transport.TCP))
    return plain_response(200, STATUS_TEXT, head_only=asked.head_only)

"""HTTP/1.1 on one edge connection, through h11: requests in, ``respond``'s answers out.

Keep-alive up to the bounds' request count; every wait is bounded (idle, whole request,
send). A request h11 refuses gets the status h11 suggests (400, 431 for an oversized
head) and the connection closes; a body over the bound gets 413 before it is read.
"""

from __future__ import annotations

import http

import h11
import trio

from valis_core.clock import trio_now
from valis_core.edge.bounds import EdgeBounds
from valis_core.edge.doh import DohError, Headers, Respond, Response, refusal
from valis_core.edge.stats import EdgeStats
from valis_core.edge.transport import receive_until, send_all

_Request = tuple[bytes, bytes, Headers, bytes]


async def serve_http1(
    stream: trio.abc.Stream, respond: Respond, bounds: EdgeBounds, stats: EdgeStats
) -> None:
    """Serve requests on ``stream`` until the client is done or a bound is reached."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=bounds.max_header_bytes)
    for served in range(1, bounds.requests_per_connection + 1):
        try:
            request = await _read_request(conn, stream, bounds)
        except h11.RemoteProtocolError as exc:
            await _send(conn, stream, refusal(DohError(exc.error_status_hint, str(exc))),
                        bounds, stats, close=True)
            return
        except DohError as exc:
            await _send(conn, stream, refusal(exc), bounds, stats, close=True)
            return
        if request is None:
            return
        response = respond(*request)
        last = served == bounds.requests_per_connection
        if not await _send(conn, stream, response, bounds, stats, close=last):
            return
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return
        conn.start_next_cycle()


async def _read_request(
    conn: h11.Connection, stream: trio.abc.Stream, bounds: EdgeBounds
) -> _Request | None:
    """The next whole request, or ``None`` when the client closed or went quiet."""
    head: h11.Request | None = None
    body = bytearray()
    request_deadline = float("inf")
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            deadline = min(trio_now() + bounds.idle_timeout, request_deadline)
            data = await receive_until(stream, deadline)
            if data is None:
                return None
            if request_deadline == float("inf"):
                request_deadline = trio_now() + bounds.request_timeout
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
            for name, value in event.headers:
                if name == b"content-length" and int(value) > bounds.max_body_bytes:
                    raise DohError(413, f"a request body is at most {bounds.max_body_bytes} bytes")
            if conn.they_are_waiting_for_100_continue:  # curl's POST over 1 KiB waits
                interim = conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                if not await send_all(stream, interim or b"", bounds.send_timeout):
                    return None
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > bounds.max_body_bytes:
                raise DohError(413, f"a request body is at most {bounds.max_body_bytes} bytes")
        elif isinstance(event, h11.EndOfMessage):
            if head is None:
                return None
            return head.method, head.target, list(head.headers), bytes(body)
        else:  # ConnectionClosed, PAUSED
            return None


async def _send(
    conn: h11.Connection,
    stream: trio.abc.Stream,
    response: Response,
    bounds: EdgeBounds,
    stats: EdgeStats,
    *,
    close: bool,
) -> bool:
    """Send ``response``; False when it cannot be (the connection is finished)."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return False
    headers = list(response.headers)
    if close:
        headers.append((b"connection", b"close"))
    try:
        data = conn.send(h11.Response(status_code=response.status, headers=headers,
                                      reason=_reason(response.status)))
        if response.body:
            data += conn.send(h11.Data(data=response.body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
    except h11.LocalProtocolError:
        return False
    stats.responded(response.status, "http/1.1")
    return await send_all(stream, data or b"", bounds.send_timeout)


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""

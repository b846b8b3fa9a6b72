"""HTTP/2 on one edge connection, through h2: each stream one DoH request.

The connection advertises the bounds (concurrent streams, header list size) and holds
them itself too: a stream whose body passes the bound gets 413, one not finished within
the request timeout is reset, a connection past its request count is told GOAWAY. A
protocol error ends the connection with the GOAWAY h2 writes; nothing raises out.
"""

from __future__ import annotations

import contextlib

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

from valis_core.clock import trio_now
from valis_core.edge.bounds import EdgeBounds
from valis_core.edge.doh import DohError, Respond, Response, refusal
from valis_core.edge.stats import EdgeStats
from valis_core.edge.transport import receive_until, send_all

RECEIVE_SIZE = 2048
"""Bytes h2 parses in one go: a read of many small frames (a burst of requests or
resets) is turned into events a slice at a time, each slice a turn of its own."""

EVENTS_PER_TURN = 8
"""Events handled between two checkpoints: one read can carry hundreds of requests, and
answering them all in one go would keep the DNS loops waiting that long."""


@attrs.define
class _Stream:
    headers: list[tuple[bytes, bytes]]
    deadline: float
    body: bytearray = attrs.field(factory=bytearray)


async def serve_http2(
    stream: trio.abc.Stream, respond: Respond, bounds: EdgeBounds, stats: EdgeStats
) -> None:
    """Serve streams on ``stream`` until the client is done or a bound is reached."""
    config = h2.config.H2Configuration(client_side=False, header_encoding=None)
    conn = h2.connection.H2Connection(config)
    conn.local_settings = h2.settings.Settings(
        client=False,
        initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: bounds.concurrent_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: bounds.max_header_bytes,
        },
    )
    conn.initiate_connection()
    serving = _Serving(conn, respond, bounds, stats)
    if not await send_all(stream, conn.data_to_send(), bounds.send_timeout):
        return
    while not serving.finished:
        deadline = min(trio_now() + bounds.idle_timeout, serving.next_deadline())
        data = await receive_until(stream, deadline, RECEIVE_SIZE)
        if data is None:
            if not serving.expire(trio_now()):
                return  # idle, or the client closed
        else:
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                await send_all(stream, conn.data_to_send(), bounds.send_timeout)
                return
            for count, event in enumerate(events, start=1):
                serving.handle(event)
                if count % EVENTS_PER_TURN == 0:
                    await trio.lowlevel.checkpoint()  # :53 gets its turn in a long batch
        if not await send_all(stream, conn.data_to_send(), bounds.send_timeout):
            return


@attrs.define
class _Serving:
    conn: h2.connection.H2Connection
    respond: Respond
    bounds: EdgeBounds
    stats: EdgeStats
    open: dict[int, _Stream] = attrs.field(factory=dict)
    unsent: dict[int, bytes] = attrs.field(factory=dict)
    started: int = 0
    finished: bool = False

    def next_deadline(self) -> float:
        return min((s.deadline for s in self.open.values()), default=float("inf"))

    def expire(self, now: float) -> bool:
        """Reset the streams past their deadline; False when there was none (the wait
        ended because the connection was idle or closed)."""
        late = [sid for sid, s in self.open.items() if s.deadline <= now]
        for sid in late:
            del self.open[sid]
            self._reset(sid, h2.errors.ErrorCodes.CANCEL)
        return bool(late)

    def handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._request(event)
        elif isinstance(event, h2.events.DataReceived):
            self._data(event)
        elif isinstance(event, h2.events.StreamEnded):
            self._ended(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.open.pop(event.stream_id, None)
            self.unsent.pop(event.stream_id, None)
        elif isinstance(event, h2.events.WindowUpdated):
            for sid in list(self.unsent):
                self._push(sid, self.unsent.pop(sid))
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.finished = True

    def _request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        if sid is None:
            return
        self.started += 1
        if self.started > self.bounds.requests_per_connection:
            self._reset(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            self.conn.close_connection(last_stream_id=sid - 2)
            self.finished = True
            return
        headers = [(bytes(name), bytes(value)) for name, value in event.headers or ()]
        deadline = trio_now() + self.bounds.request_timeout
        self.open[sid] = _Stream(headers, deadline)
        if event.stream_ended is not None:
            self._ended(sid)

    def _data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        if sid is None:
            return
        if event.flow_controlled_length:
            self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
        request = self.open.get(sid)
        if request is None:
            return
        request.body += event.data or b""
        if len(request.body) > self.bounds.max_body_bytes:
            del self.open[sid]
            limit = self.bounds.max_body_bytes
            self._send(sid, refusal(DohError(413, f"a request body is at most {limit} bytes")))

    def _ended(self, sid: int | None) -> None:
        request = self.open.pop(sid, None) if sid is not None else None
        if sid is None or request is None:
            return
        fields = dict(request.headers)
        method, path = fields.get(b":method"), fields.get(b":path")
        if method is None or path is None:
            self._send(sid, refusal(DohError(400, "a request needs :method and :path")))
            return
        plain = [(n, v) for n, v in request.headers if not n.startswith(b":")]
        self._send(sid, self.respond(method, path, plain, bytes(request.body)))

    def _send(self, sid: int, response: Response) -> None:
        headers = [(b":status", str(response.status).encode()), *response.headers]
        try:
            self.conn.send_headers(sid, headers, end_stream=not response.body)
        except h2.exceptions.H2Error:
            return  # the stream went away meanwhile
        self.stats.responded(response.status, "h2")
        if response.body:
            self._push(sid, response.body)

    def _push(self, sid: int, body: bytes) -> None:
        """Send what flow control allows of ``body`` now; keep the rest for a window."""
        try:
            while body:
                size = min(self.conn.local_flow_control_window(sid),
                           self.conn.max_outbound_frame_size, len(body))
                if size <= 0:
                    self.unsent[sid] = body
                    return
                self.conn.send_data(sid, body[:size])
                body = body[size:]
            self.conn.end_stream(sid)
        except h2.exceptions.H2Error:
            self.unsent.pop(sid, None)

    def _reset(self, sid: int, code: h2.errors.ErrorCodes) -> None:
        with contextlib.suppress(h2.exceptions.H2Error):
            self.conn.reset_stream(sid, code)

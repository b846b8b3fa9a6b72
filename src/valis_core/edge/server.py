"""The edge's listener: accept, TLS, then HTTP/1.1 or HTTP/2 as ALPN chose.

The listener is the one fulcrum bound (``--edge-tcp-fd``) or the one the resident pushed
to fulcrum's steer: both are a listening TCP socket and are served alike. Each handshake
takes the slot's newest TLS context, so a certificate swapped in serves the next
connection while those in flight finish on theirs. Every connection runs under the
bounds (``edge.bounds``) and in its own task: whatever a client sends or fails to send,
the worst it costs is its own connection, and an error in one never reaches the rest.
"""

from __future__ import annotations

import itertools
import logging

import attrs
import trio

from valis_core.clock import Clock, monotonic
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.edge.bounds import EdgeBounds
from valis_core.edge.certificate import CertificateSlot
from valis_core.edge.doh import Headers, Respond, Response
from valis_core.edge.exchange import respond
from valis_core.edge.http1 import serve_http1
from valis_core.edge.http2 import serve_http2
from valis_core.edge.stats import EdgeStats
from valis_core.log_throttle import LogThrottle

log = logging.getLogger("valis.resident.edge")

#: Seconds between two log lines about failing connections.
_LOG_EVERY = 60.0
#: Seconds to wait before accepting again after accept() failed (EMFILE, say).
_ACCEPT_PAUSE = 0.1


async def serve_edge(
    listener: trio.socket.SocketType,
    slot: CertificateSlot,
    holder: IndexHolder,
    *,
    bounds: EdgeBounds | None = None,
    stats: EdgeStats | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve DNS over HTTPS on ``listener`` until cancelled.

    Waits for the slot's first certificate before accepting anything: until then
    connections stay in the backlog (an on-demand edge), and ``task_status`` is
    reported at once either way.
    """
    limits = bounds if bounds is not None else EdgeBounds()
    counts = stats if stats is not None else EdgeStats()
    arrived = trio.Event()
    slot.on_swap(lambda _certificate: arrived.set())
    if slot.context() is not None:
        arrived.set()

    def answer(method: bytes, target: bytes, headers: Headers, body: bytes) -> Response:
        return respond(holder.snapshot, method, target, headers, body)

    edge = _Edge(slot, answer, limits, counts, _Throttled())
    async with trio.open_nursery() as nursery:
        task_status.started()
        await arrived.wait()
        for serial in itertools.count():
            try:
                conn, _ = await listener.accept()
            except OSError as exc:
                edge.failures.note(f"accept failed: {exc.strerror or exc}")
                await trio.sleep(_ACCEPT_PAUSE)
                continue
            counts.connections += 1
            if len(edge.live) >= limits.max_connections:
                edge.make_room()
            nursery.start_soon(edge.connection, conn, serial)


@attrs.define
class _Live:
    """A connection being served: its cancel scope, and whether TLS is still starting."""

    scope: trio.CancelScope
    handshaking: bool = True


@attrs.frozen
class _Edge:
    slot: CertificateSlot
    answer: Respond
    bounds: EdgeBounds
    stats: EdgeStats
    failures: _Throttled
    live: dict[int, _Live] = attrs.field(factory=dict)
    """Connections being served, oldest first (insertion order is accept order)."""

    def make_room(self) -> None:
        """At the bound, a new connection displaces the oldest one still in its TLS
        handshake, else the oldest of all: connections held open to exhaust the slots
        are recycled, and a client that comes to ask gets served."""
        victim = next((key for key, live in self.live.items() if live.handshaking),
                      next(iter(self.live)))
        self.live.pop(victim).scope.cancel()
        self.stats.displaced += 1

    async def connection(self, sock: trio.socket.SocketType, serial: int) -> None:
        live = self.live[serial] = _Live(trio.CancelScope())
        tcp = trio.SocketStream(sock)
        try:
            context = self.slot.context()
            if context is None:
                return
            tls = trio.SSLStream(tcp, context, server_side=True, https_compatible=True)
            try:
                with live.scope, trio.move_on_after(self.bounds.connection_lifetime):
                    await self._serve(tls, live)
            except Exception as exc:  # a client's bytes must never take the edge down
                self.failures.note(f"connection ended by {type(exc).__name__}: {exc}")
            finally:
                await trio.aclose_forcefully(tls)
        finally:
            self.live.pop(serial, None)
            await trio.aclose_forcefully(tcp)

    async def _serve(self, tls: trio.SSLStream[trio.SocketStream], live: _Live) -> None:
        with trio.move_on_after(self.bounds.handshake_timeout) as handshake:
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.stats.handshakes_failed += 1
                return
        if handshake.cancelled_caught:
            self.stats.handshakes_failed += 1
            return
        live.handshaking = False
        serve = serve_http2 if tls.selected_alpn_protocol() == "h2" else serve_http1
        await serve(tls, self.answer, self.bounds, self.stats)


class _Throttled:
    """Log a failure at most once a minute, with how many were not logged."""

    def __init__(self, ticks: Clock = monotonic) -> None:
        self._ticks = ticks
        self._throttle = LogThrottle(_LOG_EVERY)

    def note(self, text: str) -> None:
        held = self._throttle.admit(self._ticks())
        if held is None:
            return
        more = f" ({held} more since the last report)" if held else ""
        log.warning("edge: %s%s", text, more)

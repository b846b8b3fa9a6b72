"""The DNS serve loops: UDP and TCP over sockets someone else bound, answering from
whatever zone index the holder has at the moment each query arrives.

Nothing here binds a socket. The resident hands in its inherited :53 pair; ``valis serve``
hands in a pair it bound on an unprivileged port. Each query is answered wholly from one
immutable ``Snapshot`` (``valis_core.dns.answer.snapshot``) read from an ``IndexHolder`` (once
per batch of datagrams over UDP, once per query over TCP);
swapping the holder's snapshot is the only mutation on the serving path, so a reload
never mixes two zone versions into one answer. TCP framing and the bounded accept loop,
which the owner terminus shares, are ``valis_core.dns.serve.tcp``.

UDP is the hot path. Waking trio's scheduler once per datagram caps a Python server far
below what the kernel can deliver, so ``serve_udp`` drains the socket until it would
block, answers and sends inline, and only then parks in ``wait_readable``. Every
``UDP_BATCH`` datagrams it passes a checkpoint, so a flood can neither starve other tasks
nor delay cancellation, and it is never cancelled between reading a query and sending
its response. Everything runs on the trio thread, so the engine, its response cache and
the fast path's table are never shared between threads.

The drain has two forms. The compiled fast path (``valis_core.dns.answer.fastpath``, C in
``_fastpath.c``) takes up to ``UDP_BATCH`` datagrams with one ``recvmmsg``, answers in C
those its table for the current snapshot can answer (a question ``answer`` cached, or a
flood's NXDOMAIN or NODATA), hands the rest to ``answer`` here, lets the table learn what
``answer`` kept, and sends the batch with one ``sendmmsg``; the GIL is released for the
two system calls. A new snapshot gets a new table, so a reload never mixes versions, and
since a signing change makes a new snapshot, a table never outlives its signer (with a
signer, C answers only what the signer leaves to the unsigned path). Without a table (a
rate limiter, or a test's ``answer_fn``) every datagram is answered here, still in
batches. A build without the helper (``fastpath.COMPILED`` false) drains with
``recvfrom``/``sendto`` one datagram at a time, says once in the log that it is slower,
and answers the same bytes: ``answer`` is the reference both forms
serve, and the property tests hold C to it. (A loop in a worker thread parked in a
blocking ``poll`` was measured too and not used: under load it contends with the trio
thread for the GIL at every socket call. Figures in docs/performance.md.)

Response rate limiting (``valis_core.dns.serve.rrl``, when the caller gives ``limiter``)
applies to UDP only, to each response just before it is sent: it is sent, replaced by a
minimal truncated reply (slipped), or dropped. TCP is never limited. Without a limiter
the loop pays one comparison per datagram; with one, C answers nothing (each response
must pass the limiter, which is Python), so the limiter sees every response.

Zone transfers (``valis_core.dns.serve.transfer_serve``, when the caller gives ``transfers``):
an AXFR or IXFR read on a TCP connection is served there by ``transfers.transfer``
instead of the answer path, and a response the answer path gives with NOTAUTH (a signed
query: it holds no keys) or, over UDP, FORMERR (an IXFR carries an SOA in its authority
section) is offered to ``transfers.signed`` first, in case a listed secondary sent it.
Other queries never reach them (the fast path's C answers, cached answers and negative
ones, are never either RCODE). An IXFR over UDP from a secondary behind may need the
zone's journal: ``transfers.datagram`` then gives a job, which the UDP loop runs in a task
of its own (the transfers bound how many) and whose response it sends when ready.

TCP (RFC 7766): 2-byte length framing, any number of pipelined queries per connection,
one task per connection, an idle timeout (a connection must complete a query within
``idle_timeout`` of accepting or of its previous query, so a client trickling bytes is
closed too), a write timeout, and a cap on concurrent connections. Hostile clients
cannot starve the others:

- A connection answers at most ``TCP_BATCH`` pipelined queries, sends their answers,
  and then waits for a turn before the next batch; at most ``TCP_TURNS`` connections
  get a turn per scheduler round, in arrival order. It reads no more until every
  complete query it holds is answered. So however many clients pipeline thousands of
  queries per read, a round of the scheduler (and so the wait of a UDP query, or of a
  connection asking one query) holds a bounded amount of TCP work, and each connection
  buffers no more than one read.
- Under pressure (more than half of ``max_connections`` open) the idle timeout drops to
  ``busy_idle_timeout``, for connections already waiting too (RFC 7766 section 6.2.3).
- At the cap, a new connection closes the longest-idle one (waiting for its next query)
  and is served; clients holding connections open cannot lock newcomers out. Only when
  no connection is idle (all are mid-query) is the new one accepted and closed at once,
  rather than left in the kernel backlog, so the client learns immediately.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Protocol

import attrs
import dns.rcode
import trio

from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.serve.rrl import RateLimiter
from valis_core.dns.serve.tcp import accept_bounded, take_frames
from valis_core.dns.transfer import transfer_question
from valis_core.dns.wire.records import FORMERR, NOTAUTH
from valis_core.dns.zone import ZoneIndex

log = logging.getLogger("valis_core.dns.serve")  # the name it logged under before the rooms


class TransferFn(Protocol):
    """Zone transfers and secondaries' signed queries (``dns.transfer_serve``)."""

    async def transfer(self, stream: trio.SocketStream, query: bytes, snapshot: Snapshot) -> bool:
        """Serve one AXFR or IXFR request; whether the connection may go on."""
        ...

    def signed(
        self, snapshot: Snapshot, query: bytes, peer: str, transport: Transport
    ) -> bytes | None:
        """The signed response to a listed secondary's signed query, or ``None``."""
        ...

    def datagram(
        self, snapshot: Snapshot, query: bytes, peer: str
    ) -> bytes | Callable[[], Awaitable[bytes | None]] | None:
        """``signed`` over UDP, where an IXFR's response may come later (a job to await)."""
        ...


class AnswerFn(Protocol):
    """The shape of ``answer``; a parameter of the loops so a test can make it fail."""

    def __call__(
        self, source: Snapshot | ZoneIndex, query: bytes, /, *, transport: Transport
    ) -> bytes | None:
        ...


UDP_BATCH = 64
"""Datagrams handled between checkpoints while the socket stays readable."""

TCP_BATCH = 16
"""Pipelined queries one TCP connection answers (and sends in one write) per turn."""

TCP_TURNS = 2
"""Connections with pipelined queries waiting that get a turn per scheduler round."""

_SECONDARIES_RCODES = (NOTAUTH, FORMERR)
"""The answer path's RCODEs for a signed query (BADKEY) and for an IXFR (its authority
section): over UDP a listed secondary's such query goes to ``transfers.signed``."""
_MAX_DATAGRAM = 65535
_RCODES = 16
_ERROR_LOG_INTERVAL = 1.0


@attrs.frozen
class ServeCounts:
    """A point-in-time copy of ``ServeStats``, shaped for export (e.g. as metrics).

    ``responses`` is keyed by (transport, rcode name), the other mappings by transport.
    The rcode is the 4-bit field of the response header, so an extended rcode (BADVERS)
    counts under its low bits.
    """

    responses: Mapping[tuple[str, str], int]
    dropped: Mapping[str, int]
    truncated: int
    answer_errors: Mapping[str, int]
    send_failures: Mapping[str, int]
    tcp_accepted: int
    tcp_refused: int
    tcp_idle_closed: int
    rate_limited: Mapping[str, int] = attrs.field(factory=dict)
    """UDP responses response rate limiting held back, by action (dropped, slipped)."""
    compiled: int = 0
    """UDP responses the compiled fast path built (``valis_core.dns.answer.fastpath``); the
    others were answered by ``answer``."""

    @property
    def responses_total(self) -> int:
        return sum(self.responses.values())


class ServeStats:
    """Monotonic counters the serve loops bump in place; cheap enough for the UDP hot
    path (one list index per response, read from the response header bytes)."""

    __slots__ = (
        "tcp_accepted",
        "tcp_answer_errors",
        "tcp_dropped",
        "tcp_idle_closed",
        "tcp_rcodes",
        "tcp_refused",
        "tcp_send_failures",
        "udp_answer_errors",
        "udp_compiled",
        "udp_dropped",
        "udp_rate_dropped",
        "udp_rate_slipped",
        "udp_rcodes",
        "udp_send_failures",
        "udp_truncated",
    )

    def __init__(self) -> None:
        self.udp_rcodes = [0] * _RCODES
        self.tcp_rcodes = [0] * _RCODES
        self.udp_dropped = 0
        self.tcp_dropped = 0
        self.udp_truncated = 0
        self.udp_answer_errors = 0
        self.tcp_answer_errors = 0
        self.udp_send_failures = 0
        self.tcp_send_failures = 0
        self.tcp_accepted = 0
        self.tcp_refused = 0
        self.tcp_idle_closed = 0
        self.udp_rate_dropped = 0
        self.udp_rate_slipped = 0
        self.udp_compiled = 0

    def snapshot(self) -> ServeCounts:
        responses: dict[tuple[str, str], int] = {}
        by_transport = ((Transport.UDP, self.udp_rcodes), (Transport.TCP, self.tcp_rcodes))
        for transport, rcodes in by_transport:
            for rcode, count in enumerate(rcodes):
                if count:
                    responses[(transport.value, dns.rcode.to_text(dns.rcode.Rcode(rcode)))] = count
        udp, tcp = Transport.UDP.value, Transport.TCP.value
        return ServeCounts(
            responses=responses,
            dropped={udp: self.udp_dropped, tcp: self.tcp_dropped},
            truncated=self.udp_truncated,
            answer_errors={udp: self.udp_answer_errors, tcp: self.tcp_answer_errors},
            send_failures={udp: self.udp_send_failures, tcp: self.tcp_send_failures},
            tcp_accepted=self.tcp_accepted,
            tcp_refused=self.tcp_refused,
            tcp_idle_closed=self.tcp_idle_closed,
            rate_limited={"dropped": self.udp_rate_dropped, "slipped": self.udp_rate_slipped},
            compiled=self.udp_compiled,
        )


class _ThrottledLog:
    """Log an engine failure at most once a second, so a packet flood that trips a bug
    cannot turn into a log flood; the suppressed count rides on the next line."""

    __slots__ = ("_last", "_suppressed")

    def __init__(self) -> None:
        self._last = -_ERROR_LOG_INTERVAL
        self._suppressed = 0

    def failure(self, transport: Transport, query: bytes) -> None:
        now = trio.current_time()
        if now - self._last < _ERROR_LOG_INTERVAL:
            self._suppressed += 1
            return
        self._last = now
        more = f" ({self._suppressed} more since the last report)" if self._suppressed else ""
        self._suppressed = 0
        log.exception(
            "answering a %d-byte %s query failed; the query was dropped and serving goes on%s",
            len(query),
            transport.value,
            more,
        )


async def serve_udp(
    sock: trio.socket.SocketType,
    holder: IndexHolder,
    *,
    stats: ServeStats | None = None,
    answer_fn: AnswerFn = answer,
    transfers: TransferFn | None = None,
    limiter: RateLimiter | None = None,
) -> None:
    """Answer datagrams on ``sock`` (already bound) until cancelled.

    Runs the drain loop described in the module docstring on a duplicate of the
    socket's descriptor; the caller keeps ownership of ``sock``. A signed query the
    answer path refuses (NOTAUTH) goes to ``transfers``, when given, in case a listed
    secondary signed it. ``limiter``, when given, rate-limits the responses.
    """
    counts = stats if stats is not None else ServeStats()
    raw = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        raw.setblocking(False)
        loop = _serve_udp_compiled if fastpath.COMPILED else _serve_udp
        fastpath.tell_once()
        async with trio.open_nursery() as later:
            datagrams = _Datagrams(
                raw=raw, counts=counts, failures=_ThrottledLog(), answer_fn=answer_fn,
                transfers=transfers, limiter=limiter, later=later,
            )
            await loop(sock, raw, holder, datagrams)
    finally:
        raw.close()


_Peer = tuple[str, int] | tuple[str, int, int, int]


@attrs.frozen(kw_only=True)
class _Datagrams:
    """What both UDP drain loops do with a datagram Python answers, in one place: answer
    it, offer a refused signed query to the transfers, rate-limit the response, send and
    count it (now, or when a journal job gives it)."""

    raw: socket.socket
    counts: ServeStats
    failures: _ThrottledLog
    answer_fn: AnswerFn
    transfers: TransferFn | None
    limiter: RateLimiter | None
    later: trio.Nursery

    def respond(
        self, snapshot: Snapshot, query: bytes, peer_of: Callable[[], _Peer]
    ) -> bytes | None:
        """The response to send to the peer (``peer_of()``, asked only when needed), or
        None when there is none to send now (dropped, failed, limited, or left to a
        journal job that sends it later)."""
        counts = self.counts
        try:
            response = self.answer_fn(snapshot, query, transport=Transport.UDP)
        except Exception:
            counts.udp_answer_errors += 1
            self.failures.failure(Transport.UDP, query)
            return None
        if response is None:
            counts.udp_dropped += 1
            return None
        transfers = self.transfers
        if transfers is not None and response[3] & 0x0F in _SECONDARIES_RCODES:
            peer = peer_of()
            signed = transfers.datagram(snapshot, query, str(peer[0]))
            if callable(signed):
                self.later.start_soon(self._send_later, signed, query, peer)
                return None
            response = signed or response
        return self.limited(response, peer_of)

    def limited(self, response: bytes, peer_of: Callable[[], _Peer]) -> bytes | None:
        """The response as the limiter (if any) lets it go: itself, a slip, or None when
        it drops it; counted either way."""
        limiter = self.limiter
        if limiter is None:
            return response
        limited = limiter.limit(response, peer_of()[0], trio.current_time())
        if limited is None:
            self.counts.udp_rate_dropped += 1
        elif limited is not response:
            self.counts.udp_rate_slipped += 1
        return limited

    def send(self, response: bytes, peer: _Peer) -> None:
        """Send one response with ``sendto``, counted (the batched path counts in C)."""
        counts = self.counts
        try:
            self.raw.sendto(response, peer)
        except OSError:
            # Send buffer full (EAGAIN) or an unroutable peer: UDP may lose it.
            counts.udp_send_failures += 1
            return
        counts.udp_rcodes[response[3] & 0x0F] += 1
        if response[2] & 0x02:
            counts.udp_truncated += 1

    async def _send_later(
        self, job: Callable[[], Awaitable[bytes | None]], query: bytes, peer: _Peer
    ) -> None:
        """Send the response ``job`` gives (an IXFR over UDP answered from the journal)
        as the drain loop sends one; a job that fails drops the query."""
        try:
            response = await job()
        except Exception:
            self.counts.udp_answer_errors += 1
            self.failures.failure(Transport.UDP, query)
            return
        if response is None:
            self.counts.udp_dropped += 1
            return
        limited = self.limited(response, lambda: peer)
        if limited is not None:
            self.send(limited, peer)


async def _serve_udp(
    sock: trio.socket.SocketType,
    raw: socket.socket,
    holder: IndexHolder,
    datagrams: _Datagrams,
) -> None:
    recvfrom = raw.recvfrom
    respond, send = datagrams.respond, datagrams.send
    while True:
        handled = 0
        while handled < UDP_BATCH:
            try:
                query, peer = recvfrom(_MAX_DATAGRAM)
            except OSError:
                # Would block (drained), or a pending socket error (e.g. an ICMP
                # report) that the failing call consumed: wait for the next datagram.
                break
            handled += 1
            response = respond(holder.snapshot, query, partial(_itself, peer))
            if response is not None:
                send(response, peer)
        if handled == UDP_BATCH:
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.wait_readable(sock)


def _itself(peer: _Peer) -> _Peer:
    return peer


async def _serve_udp_compiled(
    sock: trio.socket.SocketType,
    raw: socket.socket,
    holder: IndexHolder,
    datagrams: _Datagrams,
) -> None:
    """``_serve_udp`` through the compiled pump (``valis_core.dns.answer.fastpath``): a batch in
    with one call, the questions the snapshot's table holds answered in C, the others
    here exactly as ``_serve_udp`` answers them, the batch out with one call. The table
    learns what ``answer`` kept after Python answers a question, and a new snapshot gets
    a new table (and a snapshot's signer is its own). With a rate limiter or another
    ``answer_fn`` there is no table: every datagram is answered here (still batched)."""
    from valis_core.dns.answer._fastpath import Pump, Table

    learn = fastpath.learn
    pump = Pump(raw.fileno(), UDP_BATCH)
    drain, reply, flush, peer_of = pump.drain, pump.reply, pump.flush, pump.peer
    respond = datagrams.respond
    counts = datagrams.counts
    rcodes = counts.udp_rcodes
    tabled = datagrams.answer_fn is answer and datagrams.limiter is None
    served: Snapshot | None = None
    table: Table | None = None
    while True:
        snapshot = holder.snapshot
        if snapshot is not served:
            served = snapshot
            table = fastpath.shared_table(snapshot) if tabled else None
        received, misses = drain(table)
        counts.udp_compiled += received - len(misses)
        for slot, query, key, wanted in misses:
            response = respond(snapshot, query, partial(peer_of, slot))
            if response is None:
                continue
            reply(slot, response)
            if table is not None and (key is not None or wanted is not None):
                learn(table, snapshot, key, wanted)
        if received:
            truncated, failed = flush(rcodes)
            counts.udp_truncated += truncated
            counts.udp_send_failures += failed
        if received == UDP_BATCH:
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.wait_readable(sock)


async def serve_tcp(
    listener: trio.SocketListener | trio.socket.SocketType,
    holder: IndexHolder,
    *,
    stats: ServeStats | None = None,
    idle_timeout: float = 10.0,
    busy_idle_timeout: float = 1.0,
    write_timeout: float = 5.0,
    max_connections: int = 128,
    answer_fn: AnswerFn = answer,
    transfers: TransferFn | None = None,
) -> None:
    """Accept DNS-over-TCP connections on ``listener`` (already listening) until
    cancelled; each connection is served by its own task. AXFR and IXFR requests go to
    ``transfers`` when given (otherwise the answer path refuses them).

    At ``max_connections`` a new connection closes the longest-idle one and is served;
    one closed this way counts in ``tcp_idle_closed``. With no idle connection to close
    the new one is accepted and closed at once (counted in ``tcp_refused``).
    """
    if not isinstance(listener, trio.SocketListener):
        listener = trio.SocketListener(listener)
    counts = stats if stats is not None else ServeStats()
    failures = _ThrottledLog()
    pool = _Connections(max_connections, idle_timeout, busy_idle_timeout)
    turns = _Turns()

    async def connection(stream: trio.SocketStream) -> None:
        slot = pool.enter()
        try:
            async with stream:
                await _serve_connection(
                    stream,
                    slot=slot,
                    pool=pool,
                    turns=turns,
                    holder=holder,
                    counts=counts,
                    failures=failures,
                    write_timeout=write_timeout,
                    answer_fn=answer_fn,
                    transfers=transfers,
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            pool.leave(slot)

    def room() -> bool:
        if pool.full() and pool.evict_longest_idle():
            counts.tcp_idle_closed += 1
        return not pool.full()

    def refused() -> None:
        counts.tcp_refused += 1

    def accepted() -> None:
        counts.tcp_accepted += 1
        pool.reserve()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(turns.run)
        try:
            await accept_bounded(
                listener, connection, room, accepted=accepted, refused=refused,
                what="a DNS TCP connection",
            )
        finally:
            nursery.cancel_scope.cancel()


class _Slot:
    """One open TCP connection as the pool sees it: when it last completed a query, and
    the cancel scope of its wait for the next one (``None`` while it is answering)."""

    __slots__ = ("evicted", "last", "wait")

    def __init__(self, now: float) -> None:
        self.last = now
        self.wait: trio.CancelScope | None = None
        self.evicted = False


class _Connections:
    """The open TCP connections of one listener: the cap, the idle timeout that applies
    now (shorter under pressure), and closing the longest-idle connection for a new one.

    A connection is counted from its accept (``reserve``) until its task ends, except
    that an evicted one stops counting at once, so its replacement is admitted.
    """

    __slots__ = ("_busy_idle_timeout", "_idle_timeout", "_max", "_reserved", "_slots")

    def __init__(
        self, max_connections: int, idle_timeout: float, busy_idle_timeout: float
    ) -> None:
        self._max = max_connections
        self._idle_timeout = idle_timeout
        self._busy_idle_timeout = min(busy_idle_timeout, idle_timeout)
        self._reserved = 0
        self._slots: set[_Slot] = set()

    @property
    def open(self) -> int:
        return self._reserved + len(self._slots)

    def full(self) -> bool:
        return self.open >= self._max

    def busy(self) -> bool:
        """Under pressure: more than half the cap in use (as NSD reckons it)."""
        return self.open > self._max // 2

    def idle_timeout(self) -> float:
        return self._busy_idle_timeout if self.busy() else self._idle_timeout

    def reserve(self) -> None:
        """Count a connection just accepted, before its task has started."""
        self._reserved += 1

    def enter(self) -> _Slot:
        """The accepted connection's task has started: it becomes a slot. Under pressure
        the connections already waiting get the shorter idle timeout too."""
        self._reserved -= 1
        slot = _Slot(trio.current_time())
        self._slots.add(slot)
        if self.busy():
            for other in self._slots:
                if other.wait is not None:
                    other.wait.deadline = min(
                        other.wait.deadline, other.last + self._busy_idle_timeout
                    )
        return slot

    def leave(self, slot: _Slot) -> None:
        self._slots.discard(slot)

    def evict_longest_idle(self) -> bool:
        """Close the connection that has waited longest for its next query; whether
        there was one (a connection answering or writing is never closed)."""
        waiting = [slot for slot in self._slots if slot.wait is not None]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda slot: slot.last)
        oldest.evicted = True
        assert oldest.wait is not None
        oldest.wait.cancel()
        self._slots.discard(oldest)
        return True


class _Turns:
    """Turns for connections with more pipelined queries to answer: ``TCP_TURNS`` a
    scheduler round, first come first served. Without it every such connection would
    run in every round, and a round would grow with the number of pipelining clients."""

    __slots__ = ("_lot", "_wake")

    def __init__(self) -> None:
        self._lot = trio.lowlevel.ParkingLot()
        self._wake = trio.Event()

    async def take(self) -> None:
        """Wait for a turn."""
        self._wake.set()
        await self._lot.park()

    async def run(self) -> None:
        """Hand out the turns, once a round, while anyone waits for one."""
        while True:
            if not self._lot:
                self._wake = trio.Event()
                await self._wake.wait()
            self._lot.unpark(count=TCP_TURNS)
            await trio.lowlevel.checkpoint()


async def _serve_connection(
    stream: trio.SocketStream,
    *,
    slot: _Slot,
    pool: _Connections,
    turns: _Turns,
    holder: IndexHolder,
    counts: ServeStats,
    failures: _ThrottledLog,
    write_timeout: float,
    answer_fn: AnswerFn,
    transfers: TransferFn | None = None,
) -> None:
    """Read length-prefixed queries and answer them in order, a batch at a time (one
    send per batch, a turn awaited before each further batch), reading again only when
    every complete query read is answered; return on EOF, idle timeout, eviction or a
    stalled write."""
    tcp = Transport.TCP
    rcodes = counts.tcp_rcodes
    pending = bytearray()
    first = True
    while True:
        queries = take_frames(pending, TCP_BATCH)
        if queries:
            if not first:
                await turns.take()
            first = False
            slot.last = trio.current_time()
            frames: list[bytes] = []
            for query in queries:
                if transfers is not None and transfer_question(query) is not None:
                    # Answers read before it go first; the transfer writes its own.
                    if frames and not await _send(stream, frames, write_timeout):
                        counts.tcp_send_failures += 1
                        return
                    if not await transfers.transfer(stream, query, holder.snapshot):
                        return
                    continue
                try:
                    response = answer_fn(holder.snapshot, query, transport=tcp)
                except Exception:
                    counts.tcp_answer_errors += 1
                    failures.failure(tcp, query)
                    continue
                if response is None:
                    counts.tcp_dropped += 1
                    continue
                if transfers is not None and response[3] & 0x0F == NOTAUTH:
                    peer = _peer_host(stream)
                    response = transfers.signed(holder.snapshot, query, peer, tcp) or response
                frames.append(len(response).to_bytes(2, "big"))
                frames.append(response)
                rcodes[response[3] & 0x0F] += 1
            if frames and not await _send(stream, frames, write_timeout):
                counts.tcp_send_failures += 1
                return
            continue
        first = True
        with trio.CancelScope(deadline=slot.last + pool.idle_timeout()) as wait:
            slot.wait = wait
            try:
                data = await stream.receive_some(_MAX_DATAGRAM + 2)
            finally:
                slot.wait = None
            if not data:
                return
            pending += data
            continue
        if not slot.evicted:
            counts.tcp_idle_closed += 1
        return


async def _send(stream: trio.SocketStream, frames: list[bytes], write_timeout: float) -> bool:
    """Write ``frames`` in one send and clear them; whether that was done in time."""
    with trio.move_on_after(write_timeout):
        await stream.send_all(b"".join(frames))
        frames.clear()
    return not frames


def _peer_host(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:
        return ""

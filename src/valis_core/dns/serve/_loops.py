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
two system calls. A new snapshot moves the holder's table on by what the swap changed
(``fastpath.shared_table``), so a reload never mixes versions and the unchanged zones
stay answered in C; a signing change makes a new snapshot too, and the table follows
each zone's signing (with a signer, C answers only what the signer leaves to the
unsigned path). Without a table (a
rate limiter, or a test's ``answer_fn``) every datagram is answered here, still in
batches. A build without the helper (``fastpath.COMPILED`` false) drains with
``recvfrom``/``sendto`` one datagram at a time, says once in the log that it is slower,
and answers the same bytes: ``answer`` is the reference both forms
serve, and the property tests hold C to it. (An early loop in a worker thread, parked
in a blocking ``poll``, took the GIL at every socket call and under load contended with
the trio thread for it; the workers' loop below takes it only for what C cannot answer
from its table. Figures in docs/performance.md.)

Workers (issue 29): a node answering on N cores has N UDP sockets on one address
(``SO_REUSEPORT``; the kernel spreads the datagrams by their source), and ``serve_udp``
drains each such socket on a worker thread of its own (``trio.to_thread``, a limiter
each) with ``Pump.serve``: a loop in C that receives a batch, answers with the GIL
released every datagram the holder's shared table holds, and sends the batch; a batch
with others takes the GIL for the zones' negative answers (a flood's NXDOMAIN and
NODATA), and hands those still left for ``answer`` to the trio thread
(``trio_token.run_sync_soon``) without waiting: the trio thread answers them from the
snapshot served then, sends each and teaches the table, while the worker drains on.
Past ``WORKER_BACKLOG`` datagrams handed over and not yet answered, or while a write is
under way, the worker's call returns with the batch instead, and the trio thread
finishes it (answers, teaches, sends the batch) and calls the worker again. A worker
also comes back ``WORKER_BUDGET_MS`` (30 s) after its first datagram, an idle one
after ``WORKER_IDLE_MS``, and a cancellation wakes it at once (a byte on a pipe its poll
watches beside the socket); it comes back rarely because each return leaves the socket
unread until the trio thread, perhaps busy with transfers, gets to it. Its counts are
added to the pump's tally after each batch and taken by the trio thread meanwhile
(``Pump.take``, every ``WORKER_COUNTS_S`` while it sends). The trio
thread stays the only writer: it fills the table and moves it at each swap, in the
swap itself (``IndexHolder.watch``), as one write under the table's readers' lock
(batch by batch: a writer waits for the batches under way, which then see the new
version whole), so a worker answers from the snapshot served when
the query arrived or a later one, never from two. A socket on its own (one worker,
``valis serve``'s pair, the IPv6 socket of a pair) is drained so too: a wake-up of the
worker (poll, recvmmsg, sendmmsg, no GIL) costs far less CPU than one of the trio thread
(its epoll, the scheduler, Python per batch), at the same saturation rate; the
trio-thread drains above remain for a socket with a limiter or another ``answer_fn``, or
``threaded=False``.

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

TCP workers (issue 29): with the compiled path and ``answer``, a connection's queries
are answered by ``stream_serve`` (``_fastpath.c``'s TCP section) while the holder's
table holds them: it takes the connection's unread bytes and reads what is there now
(never waiting), answers each whole message the table holds with the very bytes
``answer`` gives over TCP (the entry whole: C hands back a question whose answer needs
TCP's larger room), writes the answers, and returns at the turn's ``TCP_BATCH``
messages, when nothing whole is left to read, or at the first message it cannot
answer. That one and the run of misses after it (``Table.ask``) are answered here,
written after C's answers in one write, and taught to the table; then C goes on. So
every response goes out once, in order, and everything that is per connection stays
here: the cap and eviction, the idle timeout (the wait for the next bytes is trio's,
with the same deadline), the turns, the write timeout (a write C could not finish is
finished here), transfers and signed queries (C hands back AXFR, IXFR and TSIG). On the
trio thread C keeps the GIL (no lock: the writer's own thread) and answers the zones'
negative answers too. ``serve_tcp``'s ``workers`` runs the calls on worker threads
instead (the GIL released, the table read under the readers' lock, entries only); it
is not wired: at dnsperf's batch sizes a thread hop per call cost more CPU per query
than C saved (docs/performance.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import attrs
import dns.rcode
import trio

from valis_core.clock import trio_now
from valis_core.dns.answer import Transport
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.wire.records import FORMERR, NOTAUTH
from valis_core.dns.zone import ZoneIndex
from valis_core.log_throttle import LogThrottle

if TYPE_CHECKING:
    pass

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

SECONDARIES_RCODES = (NOTAUTH, FORMERR)
"""The answer path's RCODEs for a signed query (BADKEY) and for an IXFR (its authority
section): over UDP a listed secondary's such query goes to ``transfers.signed``."""
MAX_DATAGRAM = 65535
RCODES = 16
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
    tcp_compiled: int = 0
    """TCP responses the compiled path built (``_tcp_loop``), as ``compiled`` for UDP."""

    @property
    def responses_total(self) -> int:
        return sum(self.responses.values())


class ServeStats:
    """Monotonic counters the serve loops bump in place; cheap enough for the UDP hot
    path (one list index per response, read from the response header bytes)."""

    __slots__ = (
        "tcp_accepted",
        "tcp_answer_errors",
        "tcp_compiled",
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
        self.udp_rcodes = [0] * RCODES
        self.tcp_rcodes = [0] * RCODES
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
        self.tcp_compiled = 0  # TCP responses C built (``_tcp_loop``'s compiled path)

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
            tcp_compiled=self.tcp_compiled,
        )


class ThrottledLog:
    """Log an engine failure at most once a second, so a packet flood that trips a bug
    cannot turn into a log flood; the suppressed count rides on the next line
    (``valis_core.log_throttle`` decides, on trio's clock)."""

    __slots__ = ("_throttle",)

    def __init__(self) -> None:
        self._throttle = LogThrottle(_ERROR_LOG_INTERVAL)

    def failure(self, transport: Transport, query: bytes) -> None:
        held = self._throttle.admit(trio_now())
        if held is None:
            return
        more = f" ({held} more since the last report)" if held else ""
        log.exception(
            "answering a %d-byte %s query failed; the query was dropped and serving goes on%s",
            len(query),
            transport.value,
            more,
        )

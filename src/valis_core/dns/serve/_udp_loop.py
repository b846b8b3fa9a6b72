"""The UDP serve loop (``serve_udp``): see ``_loops`` for the whole story, and its
"Workers" part for the drain on a worker thread."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

import attrs
import trio

from valis_core.clock import trio_now
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.serve._loops import (
    MAX_DATAGRAM,
    SECONDARIES_RCODES,
    UDP_BATCH,
    AnswerFn,
    ServeStats,
    ThrottledLog,
    TransferFn,
)
from valis_core.dns.serve.rrl import RateLimiter

if TYPE_CHECKING:
    from valis_core.dns.answer.fastpath import Pump, Table

Wanted = tuple[bytes, int, int]
"""A negative answer the table lacks (``fastpath.learn``): apex, RCODE, offset."""

WORKER_BUDGET_MS = 30000
"""How long a worker's drain (``Pump.serve``) runs, from its first datagram, without
coming back to the trio thread when every datagram is answered in C. Long: each return
waits for the trio thread, which may be busy (transfers, a patch) for milliseconds while
the socket is not read (at a second, the fan-out benchmark's slowest answers were such
returns, 40-60 ms); a swap reaches the worker at once (``IndexHolder.watch``), its counts
are taken meanwhile (``WORKER_COUNTS_S``), a table made anew retires the old one, which
sends the worker back at its next batch, and a cancellation wakes it."""

WORKER_COUNTS_S = 0.02
"""How often the trio thread adds what a busy worker sent to the stats (``Pump.take``);
an idle worker's are looked at every ``WORKER_COUNTS_IDLE_S``."""

WORKER_COUNTS_IDLE_S = 0.25

WORKER_IDLE_MS = 1000
"""How long an idle worker waits for its first datagram before coming back to the trio
thread (each return costs the trio thread a wake-up); a cancellation wakes it at once
(``_worker_call``)."""


async def serve_udp(
    sock: trio.socket.SocketType,
    holder: IndexHolder,
    *,
    stats: ServeStats | None = None,
    answer_fn: AnswerFn = answer,
    transfers: TransferFn | None = None,
    limiter: RateLimiter | None = None,
    threaded: bool = True,
) -> None:
    """Answer datagrams on ``sock`` (already bound) until cancelled.

    Runs the drain loop described in the module docstring on a duplicate of the
    socket's descriptor; the caller keeps ownership of ``sock``. A signed query the
    answer path refuses (NOTAUTH) goes to ``transfers``, when given, in case a listed
    secondary signed it. ``limiter``, when given, rate-limits the responses.
    ``threaded``: drain on a worker thread, answering the table's hits without the GIL
    (``_loops``, "Workers"), whether the socket is one of several sharing its address
    (``SO_REUSEPORT``, one per worker) or on its own: a wake-up there costs far less CPU
    than one of the trio thread (docs/performance.md, "One socket on a worker thread");
    false drains on the trio thread. Without a table to answer from (a limiter, another
    ``answer_fn``, no compiled path) it is never threaded.
    """
    counts = stats if stats is not None else ServeStats()
    raw = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        raw.setblocking(False)
        tabled = answer_fn is answer and limiter is None
        loop = (_serve_udp_threaded if threaded and tabled else _serve_udp_compiled) \
            if fastpath.COMPILED else _serve_udp
        fastpath.tell_once()
        async with trio.open_nursery() as later:
            datagrams = _Datagrams(
                raw=raw, counts=counts, failures=ThrottledLog(), answer_fn=answer_fn,
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
    failures: ThrottledLog
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
        if transfers is not None and response[3] & 0x0F in SECONDARIES_RCODES:
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
        limited = limiter.limit(response, peer_of()[0], trio_now())
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
                query, peer = recvfrom(MAX_DATAGRAM)
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


WORKER_BACKLOG = 1024
"""Datagrams a worker may have handed to the trio thread and not yet answered; past it
the worker waits for the trio thread (``Pump.serve`` returns with the batch)."""


HANDED_PASSES = 100
"""Scheduler passes a worker loop that ends waits for what it handed over to be answered."""


class _Later:
    """What a worker hands the trio thread without waiting for it (``Pump.serve``'s
    ``handoff``, called on the worker's thread): the datagrams only ``answer`` answers,
    answered on the trio thread (``trio_token.run_sync_soon``) from the snapshot served
    then, sent one by one and taught to the table, as long as the snapshot is the one
    served when they were handed over (a negative answer to learn is of that version)."""

    __slots__ = ("answered", "closed", "datagrams", "handed", "holder", "token")

    def __init__(
        self, datagrams: _Datagrams, holder: IndexHolder, token: trio.lowlevel.TrioToken
    ) -> None:
        self.datagrams = datagrams
        self.holder = holder
        self.token = token
        self.handed = 0  # written by the worker only
        self.answered = 0  # written by the trio thread only
        self.closed = False

    def handoff(self, misses: list[tuple[bytes, _Peer, bytes | None, Wanted | None]]) -> bool:
        if self.handed - self.answered >= WORKER_BACKLOG:
            return False
        self.handed += len(misses)
        self.token.run_sync_soon(self._answer, misses, self.holder.snapshot)
        return True

    def _answer(
        self, misses: list[tuple[bytes, _Peer, bytes | None, Wanted | None]], handed: Snapshot
    ) -> None:
        self.answered += len(misses)
        if self.closed:  # the loop has ended: its socket is closed
            return
        datagrams = self.datagrams
        snapshot = self.holder.snapshot
        table = fastpath.shared_table(snapshot) if snapshot is handed else None
        for query, peer, key, wanted in misses:
            try:
                response = datagrams.respond(snapshot, query, partial(_itself, peer))
                if response is None:
                    continue
                datagrams.send(response, peer)
                if table is not None and (key is not None or wanted is not None):
                    fastpath.learn(table, snapshot, key, wanted)
            except Exception:  # never into trio's run_sync_soon: it would end the run
                datagrams.counts.udp_answer_errors += 1
                datagrams.failures.failure(Transport.UDP, query)


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
    learns what ``answer`` kept after Python answers a question, and a new snapshot
    moves the holder's table on by what changed (and a snapshot's signer is its own).
    With a rate limiter or another ``answer_fn`` there is no table: every datagram is
    answered here (still batched)."""
    pump = fastpath.pump(raw.fileno(), UDP_BATCH)
    drain, flush = pump.drain, pump.flush
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
        _answer_misses(datagrams, pump, snapshot, table, misses)
        if received:
            _flushed(counts, flush, rcodes)
        if received == UDP_BATCH:
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.wait_readable(sock)


def _flushed(
    counts: ServeStats, flush: Callable[[list[int]], tuple[int, int]], rcodes: list[int]
) -> None:
    """Send every response a batch queued (``Pump.flush``), counting what was sent."""
    truncated, failed = flush(rcodes)
    counts.udp_truncated += truncated
    counts.udp_send_failures += failed


def _answer_misses(
    datagrams: _Datagrams, pump: Pump, snapshot: Snapshot, table: Table | None,
    misses: list[tuple[int, bytes, bytes | None, Wanted | None]],
) -> None:
    """Answer in Python the datagrams of a batch C handed back, queue the responses
    beside C's, and let ``table`` (``snapshot``'s) learn what ``answer`` kept."""
    learn, reply, peer_of = fastpath.learn, pump.reply, pump.peer
    respond = datagrams.respond
    for slot, query, key, wanted in misses:
        response = respond(snapshot, query, partial(peer_of, slot))
        if response is None:
            continue
        reply(slot, response)
        if table is not None and (key is not None or wanted is not None):
            learn(table, snapshot, key, wanted)


async def _worker_call(
    call: Callable[[], int],
    finish: Callable[[int], None],
    wake: int, thread: trio.CapacityLimiter,
) -> None:
    """Run a worker's drain (``call``) on its thread and ``finish`` with what it returns,
    on this thread as soon as it returns. Cancelled meanwhile, it wakes the worker (a
    byte on ``wake``, which ``Pump.serve`` polls beside the socket), waits for it to
    come back (its counts and a batch it left are still finished) and lets the
    cancellation through."""
    finished = trio.CancelScope()

    async def run() -> None:
        finish(await trio.to_thread.run_sync(call, limiter=thread))
        finished.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        try:
            with finished:
                await trio.sleep_forever()
        except trio.Cancelled:
            with contextlib.suppress(BlockingIOError):  # a byte there already wakes it
                os.write(wake, b"\0")
            raise


async def _serve_udp_threaded(
    sock: trio.socket.SocketType,
    raw: socket.socket,
    holder: IndexHolder,
    datagrams: _Datagrams,
) -> None:
    """``_serve_udp_compiled`` with its drain on a worker thread (``Pump.serve`` in
    ``trio.to_thread``): the datagrams the holder's shared table answers are answered
    and sent there without the GIL, batch after batch; a batch with datagrams only
    Python answers comes back here, where they are answered, taught to the table and
    sent with the batch, as the compiled loop does. This thread stays the only writer:
    the table moves at each swap (``IndexHolder.watch``), in one write the worker waits
    out."""
    pump = fastpath.pump(raw.fileno(), UDP_BATCH)
    serve, pending, flush = pump.serve, pump.pending, pump.flush
    counts = datagrams.counts
    rcodes = counts.udp_rcodes
    thread = trio.CapacityLimiter(1)  # its own: a worker holds no token others wait for
    later = _Later(datagrams, holder, trio.lowlevel.current_trio_token())
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def take() -> bool:
        """Add what the worker sent since the last take to the counts; whether it sent."""
        sent, compiled, truncated, failed = pump.take()
        counts.udp_compiled += compiled
        counts.udp_truncated += truncated
        counts.udp_send_failures += failed
        for rcode, count in enumerate(sent):
            if count:
                rcodes[rcode] += count
        return bool(compiled or truncated or failed or any(sent))

    async def keep_counting() -> None:
        while True:
            await trio.sleep(WORKER_COUNTS_S if take() else WORKER_COUNTS_IDLE_S)

    def finish(left: int) -> None:
        """Add what the worker answered to the counts and finish a batch it left."""
        take()
        if left:  # the rest of the batch, from the table of the snapshot now
            snapshot = holder.snapshot
            table = fastpath.shared_table(snapshot)
            misses = pending(table)
            counts.udp_compiled += left - len(misses)
            _answer_misses(datagrams, pump, snapshot, table, misses)
            _flushed(counts, flush, rcodes)

    unwatch = holder.watch(fastpath.shared_table)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_counting)
            while True:
                snapshot = holder.snapshot
                table = fastpath.shared_table(snapshot)
                if table is None:  # no table for this version (out of memory): here
                    await trio.lowlevel.wait_readable(sock)
                    received, misses = pump.drain(None)
                    _answer_misses(datagrams, pump, snapshot, None, misses)
                    if received:
                        _flushed(counts, flush, rcodes)
                else:
                    await _worker_call(
                        partial(serve, table, WORKER_BUDGET_MS, later.handoff, wake_r,
                                WORKER_IDLE_MS), finish, wake_w, thread)
                await trio.lowlevel.checkpoint()
    finally:
        os.close(wake_r)
        os.close(wake_w)
        unwatch()
        take()  # the worker has returned: what it sent last
        # What the worker handed over is queued on this thread already (the worker has
        # returned): answer it before the socket closes, so a restart (a new limiter)
        # drops none. Bounded: each pass runs every callback queued.
        with trio.CancelScope(shield=True):
            for _ in range(HANDED_PASSES):
                if later.answered >= later.handed:
                    break
                await trio.lowlevel.checkpoint()
        later.closed = True

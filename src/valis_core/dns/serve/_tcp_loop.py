"""The TCP serve loop (``serve_tcp``): see ``_loops`` for the whole story."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from valis_core.clock import trio_now
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve._loops import (
    MAX_DATAGRAM,
    TCP_BATCH,
    TCP_TURNS,
    AnswerFn,
    ServeStats,
    ThrottledLog,
    TransferFn,
)
from valis_core.dns.serve.tcp import accept_bounded, take_frames
from valis_core.dns.transfer import transfer_question
from valis_core.dns.wire.records import NOTAUTH

if TYPE_CHECKING:
    from valis_core.dns.answer.fastpath import Table
    from valis_core.dns.serve._udp_loop import Wanted


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
    workers: int = 0,
    drain: TcpDrain | None = None,
) -> None:
    """Accept DNS-over-TCP connections on ``listener`` (already listening) until
    cancelled; each connection is served by its own task. AXFR and IXFR requests go to
    ``transfers`` when given (otherwise the answer path refuses them).

    ``drain``, when asked (``TcpDrain``), stops the accepting and lets the connections
    open finish what they are asked, each closed once idle for ``DRAIN_IDLE``, for at
    most ``DRAIN_SECONDS``: a resident handing over to a successor on the same listening
    socket (which accepts what is queued there) or stopping closes no connection with a
    query unanswered in it, which a client would see as a reset.

    With the compiled path and ``answer`` (``_loops``, "TCP workers"), C answers what
    the holder's table holds: on ``workers`` worker threads at most at once (the GIL
    released), or on the trio thread with ``workers`` 0.

    At ``max_connections`` a new connection closes the longest-idle one and is served;
    one closed this way counts in ``tcp_idle_closed``. With no idle connection to close
    the new one is accepted and closed at once (counted in ``tcp_refused``).
    """
    if not isinstance(listener, trio.SocketListener):
        listener = trio.SocketListener(listener)
    counts = stats if stats is not None else ServeStats()
    failures = ThrottledLog()
    pool = _Connections(max_connections, idle_timeout, busy_idle_timeout)
    turns = _Turns()
    compiled = None
    if fastpath.COMPILED and answer_fn is answer:
        compiled = _Compiled(
            serve=fastpath.stream_server(),
            limiter=trio.CapacityLimiter(workers) if workers > 0 else None,
        )
    conn = _Connection(
        pool=pool, turns=turns, holder=holder, counts=counts, failures=failures,
        write_timeout=write_timeout, answer_fn=answer_fn, transfers=transfers,
        compiled=compiled,
    )

    async def connection(stream: trio.SocketStream) -> None:
        slot = pool.enter()
        try:
            async with stream:
                await _serve_connection(stream, slot, conn)
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

        async def hand_off(stream: trio.SocketStream) -> None:
            # outside the accepting: a drain stops that and leaves the connections be
            nursery.start_soon(connection, stream)

        try:
            with trio.CancelScope() as accepting:
                if drain is not None:
                    drain.running = True
                    nursery.start_soon(drain.serve, accepting, pool)
                await accept_bounded(
                    listener, hand_off, room, accepted=accepted, refused=refused,
                    what="a DNS TCP connection",
                )
            await trio.sleep_forever()  # drained: serving what is open, until cancelled
        finally:
            nursery.cancel_scope.cancel()
            if drain is not None:
                drain.stopped()


DRAIN_IDLE = 0.5
"""Seconds a draining connection may wait for its next query before it is closed (a
client sends its query as soon as it has connected)."""
DRAIN_SECONDS = 2.0
"""Seconds a drain waits at most for the open connections to close."""


class TcpDrain:
    """A stop's first step for ``serve_tcp``: calling it (``Services.start``'s
    ``drain``) stops the accepting and returns once every open connection has closed,
    each once idle for ``DRAIN_IDLE``, or after ``DRAIN_SECONDS``."""

    def __init__(self) -> None:
        self._asked = trio.Event()
        self._done = trio.Event()
        self.running = False
        """Whether a ``serve_tcp`` took it and has not ended: a stop after a failure
        (the loop already cancelled) has nothing to drain and must not wait."""

    async def __call__(self) -> None:
        if not self.running:
            return
        self._asked.set()
        await self._done.wait()

    def stopped(self) -> None:
        """``serve_tcp`` ended (cancelled, or failed): nothing is left to drain."""
        self.running = False
        self._done.set()

    async def serve(self, accepting: trio.CancelScope, pool: _Connections) -> None:
        """``serve_tcp``'s side: wait to be asked, then drain."""
        await self._asked.wait()
        accepting.cancel()
        with trio.move_on_after(DRAIN_SECONDS):
            await pool.drain(DRAIN_IDLE)
        self._done.set()


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

    __slots__ = (
        "_busy_idle_timeout", "_emptied", "_idle_timeout", "_max", "_reserved", "_slots"
    )

    def __init__(
        self, max_connections: int, idle_timeout: float, busy_idle_timeout: float
    ) -> None:
        self._max = max_connections
        self._idle_timeout = idle_timeout
        self._busy_idle_timeout = min(busy_idle_timeout, idle_timeout)
        self._reserved = 0
        self._slots: set[_Slot] = set()
        self._emptied: trio.Event | None = None  # set while draining

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
        slot = _Slot(trio_now())
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
        if self._emptied is not None and not self.open:
            self._emptied.set()

    async def drain(self, idle: float) -> None:
        """From now on (no connection accepted any more) every connection is closed once
        it has waited ``idle`` seconds for its next query (those waiting now, from now);
        return once none is open."""
        self._idle_timeout = self._busy_idle_timeout = min(self._busy_idle_timeout, idle)
        now = trio_now()
        for slot in self._slots:
            if slot.wait is not None:
                slot.wait.deadline = min(slot.wait.deadline, now + idle)
        self._emptied = trio.Event()
        if self.open:
            await self._emptied.wait()

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


@attrs.frozen(kw_only=True)
class _Connection:
    """What a connection's task answers with, the same for every connection of a
    listener: the pool and turns it takes part in, the holder, the counts, the answer
    path and the transfers, and (compiled) how C serves it (``_Compiled``)."""

    pool: _Connections
    turns: _Turns
    holder: IndexHolder
    counts: ServeStats
    failures: ThrottledLog
    write_timeout: float
    answer_fn: AnswerFn
    transfers: TransferFn | None
    compiled: _Compiled | None


@attrs.frozen(kw_only=True)
class _Compiled:
    """C's part of the TCP path (``fastpath.stream_server``): where it runs, on the trio
    thread (``limiter`` None) or on a worker thread, at most ``limiter``'s many at once."""

    serve: Callable[
        [int, Table, bytes, int, int, list[int], bool],
        tuple[int, int, bytes, bytes, bytes | None],
    ]
    limiter: trio.CapacityLimiter | None


async def _serve_connection(stream: trio.SocketStream, slot: _Slot, conn: _Connection) -> None:
    """Read length-prefixed queries and answer them in order, a batch at a time (one
    send per batch, a turn awaited before each further batch), reading again only when
    every complete query read is answered; return on EOF, idle timeout, eviction or a
    stalled write. Compiled (``conn.compiled``), C answers what the table holds, reading
    what is there, and gives the connection back here at the first query it cannot
    answer (``_compiled_step``): here it is answered, with the rest of what was read."""
    pending = bytearray()
    first = True
    left = TCP_BATCH  # messages this turn may still answer (compiled)
    step = _PYTHON
    while True:
        if conn.compiled is not None:
            if not left:
                await conn.turns.take()
                left = TCP_BATCH
            # after a miss, on this thread: misses come in runs (a flood over TCP)
            step, used = await _compiled_step(
                stream, slot, conn, pending, left, threaded=step is not _MISSED)
            left -= used
        if step is _DONE:
            return
        if step is _AGAIN or step is _MISSED:
            continue
        if step is _PYTHON:
            queries = take_frames(pending, TCP_BATCH)
            if queries:
                if not first:
                    await conn.turns.take()
                first = False
                slot.last = trio_now()
                if not await _answer_batch(stream, conn, queries):
                    return
                continue
        first = True
        left = TCP_BATCH
        with trio.CancelScope(deadline=slot.last + conn.pool.idle_timeout()) as wait:
            slot.wait = wait
            try:
                if step is _WAIT:  # C reads what is there
                    await trio.lowlevel.wait_readable(stream.socket)
                    continue
                data = await stream.receive_some(MAX_DATAGRAM + 2)
            finally:
                slot.wait = None
            if not data:
                return
            pending += data
            continue
        if not slot.evicted:
            conn.counts.tcp_idle_closed += 1
        return


_PYTHON, _AGAIN, _MISSED, _WAIT, _DONE = "python", "again", "missed", "wait", "done"
"""What a compiled step leaves the connection's loop to do: answer here, go on (call C
again, after a turn once the turn's messages are answered; ``_MISSED``: Python answered
the last), wait for something to read, or close."""

STREAM_BUDGET_MS = 20
"""How long C waits for a write to the table under way before giving the query to Python."""


async def _compiled_step(
    stream: trio.SocketStream, slot: _Slot, conn: _Connection, pending: bytearray,
    left: int, *, threaded: bool,
) -> tuple[str, int]:
    """One call of C on the connection: it answers the whole queries ``pending`` holds
    and those it reads, while the table holds them, at most ``left``; the first it
    cannot answer is answered here (``_answer_batch``) and taught to the table. What
    the connection's loop does next, and how many messages were answered. A table-less
    version (out of memory): ``_PYTHON``, the loop answers. ``threaded``: on a worker
    thread, if the listener has them."""
    compiled = conn.compiled
    assert compiled is not None
    holder, counts = conn.holder, conn.counts
    snapshot = holder.snapshot
    table = fastpath.shared_table(snapshot)
    if table is None:
        return _PYTHON, 0
    own = [0] * len(counts.tcp_rcodes)
    call = (stream.socket.fileno(), table, bytes(pending), left, STREAM_BUDGET_MS, own)
    if compiled.limiter is None or not threaded:  # here, with the GIL: negatives too
        state, answered, rest, unsent, key = compiled.serve(*call, True)
    else:
        state, answered, rest, unsent, key = await trio.to_thread.run_sync(
            compiled.serve, *call, False, limiter=compiled.limiter)
    rcodes = counts.tcp_rcodes
    for rcode, sent in enumerate(own):
        if sent:
            rcodes[rcode] += sent
    pending[:] = rest
    if answered:
        counts.tcp_compiled += answered
        slot.last = trio_now()
    if state == fastpath.STREAM_MISS:
        # C's answers (unsent) and this batch's go out in one write
        queries, taught = _run_of_misses(pending, table, key, left - answered)
        if not queries and not unsent:  # C gives back only a whole message: never here
            return _WAIT, answered
        slot.last = trio_now()
        if not await _answer_batch(stream, conn, queries, ahead=unsent):
            return _DONE, answered
        if holder.snapshot is snapshot:
            for learnt, wanted in taught:
                fastpath.learn(table, snapshot, learnt, wanted)
        return _MISSED, answered + len(queries)
    if unsent and not await _send(stream, [unsent], conn.write_timeout):
        counts.tcp_send_failures += 1
        return _DONE, answered
    if state in (fastpath.STREAM_TURN, fastpath.STREAM_STALLED):
        return _AGAIN, answered
    if state == fastpath.STREAM_WAIT:
        return _WAIT, answered
    return _DONE, answered  # the peer closed, or the connection failed


def _run_of_misses(
    pending: bytearray, table: Table, key: bytes | None, most: int
) -> tuple[list[bytes], list[tuple[bytes | None, Wanted | None]]]:
    """The queries Python answers when C gives a connection back: the first of
    ``pending`` (C's miss, ``key`` its question), and those after it the table lacks
    too (``Table.ask``), at most ``most``; taken off ``pending``. With them, what the
    table is to learn once they are answered (``fastpath.learn``)."""
    queries = take_frames(pending, 1)
    taught: list[tuple[bytes | None, Wanted | None]] = [(key, None)]
    if queries:  # the negative answer it lacks, if any (C's call gave only the key)
        _response, first, wanted = table.ask(queries[0])
        taught[0] = (first or key, wanted)
    while queries and len(queries) < most and _whole(pending):
        size = pending[0] << 8 | pending[1]
        query = bytes(pending[2 : 2 + size])
        response, other, wanted = table.ask(query)
        if response is not None:  # C's again
            break
        del pending[: 2 + size]
        queries.append(query)
        taught.append((other, wanted))
    return queries, [(k, w) for k, w in taught if k is not None or w is not None]


def _whole(pending: bytearray) -> bool:
    """Whether ``pending`` begins with a whole message."""
    return len(pending) >= 2 and len(pending) >= 2 + (pending[0] << 8 | pending[1])


async def _answer_batch(
    stream: trio.SocketStream, conn: _Connection, queries: list[bytes], *, ahead: bytes = b""
) -> bool:
    """Answer ``queries`` (pipelined on one connection) in order and send the answers in
    one write, after ``ahead`` (responses framed already); whether the connection goes on."""
    tcp = Transport.TCP
    counts, transfers, holder = conn.counts, conn.transfers, conn.holder
    rcodes = counts.tcp_rcodes
    frames: list[bytes] = [ahead] if ahead else []
    for query in queries:
        if transfers is not None and transfer_question(query) is not None:
            # Answers read before it go first; the transfer writes its own.
            if frames and not await _send(stream, frames, conn.write_timeout):
                counts.tcp_send_failures += 1
                return False
            if not await transfers.transfer(stream, query, holder.snapshot):
                return False
            continue
        try:
            response = conn.answer_fn(holder.snapshot, query, transport=tcp)
        except Exception:
            counts.tcp_answer_errors += 1
            conn.failures.failure(tcp, query)
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
    if frames and not await _send(stream, frames, conn.write_timeout):
        counts.tcp_send_failures += 1
        return False
    return True


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

"""The TCP serve loop (``serve_tcp``): see ``_loops`` for the whole story."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from valis_core.clock import trio_now
from valis_core.dns.answer import Transport, answer
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
    pass



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
    failures = ThrottledLog()
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
    failures: ThrottledLog,
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
            slot.last = trio_now()
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
                data = await stream.receive_some(MAX_DATAGRAM + 2)
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

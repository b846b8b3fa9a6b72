"""The UDP serve loop under a rate limiter that can be replaced while it serves.

``serve_udp`` takes its limiter (or none) when it starts, and pays nothing for limiting
when it has none. So a new limiter (a reload turning limiting on or off, or changing its
rate) is applied by restarting the loop: ``LimitedUdp.replace`` cancels it and it starts
again at once on the same socket with the new limiter. The loop is cancelled only where
it waits (between batches of datagrams), never between reading a query and sending its
response, and datagrams that arrive meanwhile wait in the socket's buffer, so every
query is answered under exactly one limiter, the old or the new. What a restart does
lose is an IXFR over UDP still being read from the journal: the secondary asks again.

A limiter is made fresh each time (``limiter_for``): a new random key for its slot hash
and a full table, and it classifies each response by the zones the holder serves at the
moment (wildcard answers, compact denial: ``valis_core.dns.serve.rrl.classify``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence

import trio

from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve._loops import ServeCounts, ServeStats, TransferFn
from valis_core.dns.serve._udp_loop import serve_udp
from valis_core.dns.serve.rrl import RateLimiter, RrlSettings
from valis_core.dns.zone import ZoneIndex


def limiter_for(settings: RrlSettings | None, holder: IndexHolder) -> RateLimiter | None:
    """The limiter ``settings`` ask for (``None``: off), classifying each response by
    the zones ``holder`` serves when it is sent."""
    if settings is None:
        return None

    def zones() -> ZoneIndex:
        return holder.current

    # The slot hash's key: fresh per limiter, so nobody can aim at a victim's bucket.
    return RateLimiter(settings, os.urandom(16), zones)


class LimitedUdp:
    """``serve_udp`` on ``sock`` with a limiter ``replace`` swaps while serving."""

    def __init__(
        self,
        sock: trio.socket.SocketType,
        holder: IndexHolder,
        settings: RrlSettings | None,
        *,
        stats: ServeStats,
        transfers: TransferFn | None = None,
    ) -> None:
        self.sock = sock
        self.holder = holder
        self.stats = stats
        self.transfers = transfers
        self.settings = settings
        self.restarts = 0
        self._limiter = limiter_for(settings, holder)
        self._scope: trio.CancelScope | None = None
        self._pending: tuple[RrlSettings | None, RateLimiter | None] | None = None
        self._restarted = trio.Event()

    @property
    def limiter(self) -> RateLimiter | None:
        """The limiter the loop serves under now (``None``: off)."""
        return self._limiter

    async def run(self) -> None:
        """Serve until cancelled from outside; restart under each replacement."""
        while True:
            with trio.CancelScope() as self._scope:
                await serve_udp(self.sock, self.holder, stats=self.stats,
                                transfers=self.transfers, limiter=self._limiter)
            pending, self._pending = self._pending, None
            if pending is None:  # serve_udp runs until cancelled; only replace cancels here
                return
            self.settings, self._limiter = pending
            self.restarts += 1
            restarted, self._restarted = self._restarted, trio.Event()
            restarted.set()

    async def replace(self, settings: RrlSettings | None) -> None:
        """Serve under a new limiter for ``settings`` (``None``: none) from now on;
        returns once the loop has restarted with it."""
        assert self._scope is not None, "replace before the loop started"
        restarted = self._restarted
        self._pending = (settings, limiter_for(settings, self.holder))
        self._scope.cancel()
        await restarted.wait()


class LimitedUdpWorkers:
    """The DNS workers: one ``LimitedUdp`` per UDP socket of the DNS address (the
    ``SO_REUSEPORT`` group fulcrum bound), each counting into its own ``ServeStats``; a
    replacement applies to every one of them."""

    def __init__(self, workers: Sequence[LimitedUdp]) -> None:
        if not workers:
            raise ValueError("DNS workers: at least one")
        self.workers = tuple(workers)

    @property
    def holder(self) -> IndexHolder:
        return self.workers[0].holder

    @property
    def settings(self) -> RrlSettings | None:
        return self.workers[0].settings

    @property
    def stats(self) -> tuple[ServeStats, ...]:
        """Each worker's counters, worker 0 first."""
        return tuple(worker.stats for worker in self.workers)

    async def run(self) -> None:
        """Serve on every socket until cancelled from outside."""
        async with trio.open_nursery() as nursery:
            for worker in self.workers:
                nursery.start_soon(worker.run)

    async def replace(self, settings: RrlSettings | None) -> None:
        """Serve under a new limiter for ``settings`` on every worker (each its own
        limiter: the buckets are per worker, as each socket sees its own share of a
        source's queries only when the kernel's hash spreads them; one source's flow
        stays on one socket)."""
        for worker in self.workers:
            await worker.replace(settings)


def _summed(maps: Sequence[Mapping[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for item in maps:
        total.update(item)
    return dict(total)


def summed_counts(counts: Sequence[ServeCounts]) -> ServeCounts:
    """The node's totals over every worker's counts (the first holds TCP's too)."""
    responses: Counter[tuple[str, str]] = Counter()
    for item in counts:
        responses.update(item.responses)
    return ServeCounts(
        responses=dict(responses),
        dropped=_summed([item.dropped for item in counts]),
        truncated=sum(item.truncated for item in counts),
        answer_errors=_summed([item.answer_errors for item in counts]),
        send_failures=_summed([item.send_failures for item in counts]),
        tcp_accepted=sum(item.tcp_accepted for item in counts),
        tcp_refused=sum(item.tcp_refused for item in counts),
        tcp_idle_closed=sum(item.tcp_idle_closed for item in counts),
        rate_limited=_summed([item.rate_limited for item in counts]),
        compiled=sum(item.compiled for item in counts),
        tcp_compiled=sum(item.tcp_compiled for item in counts),
    )

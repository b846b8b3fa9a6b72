"""Zone transfers on the DNS TCP loop: the trio shell around ``valis_core.dns.transfer``.

The TCP serve loop hands every AXFR or IXFR it reads to ``Transfers.transfer`` (instead
of the answer path), inside the connection's own task, with the snapshot being served at
that moment: the whole transfer comes from that one version. Access is decided first
against the secondaries held in memory (``known``: the resident's reader reads them
again when the operator's change is announced, every 10 s, and whenever it reads them
for a NOTIFY), so a request from an address not listed, or not signed with a listed key,
costs the database nothing, and is refused even while the database does not answer. Only
a request that passes is decided again against the secondaries read afresh
(``Secondaries``: from operator state), so a secondary removed is refused from its next
request, even one removed by plain SQL. Both serve loops hand ``Transfers.signed`` a
signed query the answer path refused, in case a listed secondary signed it; that check
runs on the serving thread, against the secondaries read last.

An IXFR over UDP (``Transfers.datagram``) is decided the same way and answered in one
datagram: the SOA alone at once when the secondary is up to date; when it is behind, the
UDP loop is handed a job that reads the journal (within ``DATAGRAM_DEADLINE``) and gives
the condensed difference when it fits the datagram, otherwise the SOA with TC set. At
most ``MAX_DATAGRAMS`` such jobs run at once; beyond that, or without a journal, the
answer is TC at once: the secondary asks over TCP, which is always correct.

Bounds: at most ``max_transfers`` run at once (a ``trio.CapacityLimiter``; a request
beyond that waits for a slot), and each, its wait included, must finish within
``deadline`` seconds or its connection is closed (a partial transfer is useless to the
secondary, which retries). Messages are built a few dozen records at a time, with a
checkpoint between, and sent one at a time, so a transfer never holds up UDP or other
connections for long. An IXFR from a secondary behind is answered from the zone's change
journal (``journal``) when it reaches back to the secondary's serial, as one condensed
difference, and otherwise with the whole zone. Every refusal is counted by kind and
logged with its reason (at most ten lines a second: the rest are counted on the next
line); completed (by what was sent), failed and running transfers are counted too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import attrs
import trio

from valis_core.clock import Clock, monotonic, trio_now, wall
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.serve.tcp import framed
from valis_core.dns.transfer import (
    REFUSAL_KINDS,
    Grant,
    Listed,
    Refusal,
    datagram_response,
    decide,
    incremental_records,
    ixfr_serial,
    peer_host,
    refused,
    signed_answer,
    transfer_question,
    transfer_steps,
    zone_serial,
)
from valis_core.dns.transfer.journal import Difference
from valis_core.dns.transfer.secondary_progress import Progress
from valis_core.dns.transfer.signed import refusal, signed_zone, signed_zone_records
from valis_core.dns.wire.records import IXFR, SERVFAIL, ZoneError

log = logging.getLogger("valis.transfer")

Secondaries = Callable[[], Awaitable[Sequence[Listed]]]
"""The listed secondaries of every zone, as they stand now."""

Journal = Callable[[str, int, int], Awaitable[Difference | None]]
"""The change of a zone from one serial to another, when the journal reaches back."""

KINDS = ("axfr", "incremental", "whole_zone", "up_to_date")
"""Completed transfers by what was sent: an AXFR, an IXFR from the journal, an IXFR
answered with the whole zone, an IXFR answered with the SOA alone."""

MAX_TRANSFERS = 4
DEADLINE = 120.0

INCREMENTAL_HERE = 2000
"""Records of a journal difference made into an IXFR's on the serving thread; a larger
one is made on a worker thread, so that it holds up no datagram or connection (each
record is parsed: 10^5 of them take about a third of a second)."""

MAX_DATAGRAMS = 8
"""IXFRs over UDP of secondaries behind whose journal reads may run at once."""

DATAGRAM_DEADLINE = 5.0
"""Seconds an IXFR over UDP may wait for the journal before it is answered TC."""

Later = Callable[[], Awaitable[bytes | None]]
"""A response that needs the journal: the UDP loop awaits it in a task of its own and
sends what it gives."""


@attrs.define
class TransferStats:
    """Counters for metrics: transfers by outcome, refusals by kind."""

    completed: int = 0
    failed: int = 0
    running: int = 0
    signed_answers: int = 0
    """Ordinary queries of listed secondaries answered signed (their SOA queries)."""
    refused: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(REFUSAL_KINDS, 0))
    kinds: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(KINDS, 0))


class Transfers:
    """Serve zone transfers to listed secondaries (see the module docstring)."""

    def __init__(
        self,
        secondaries: Secondaries,
        known: Callable[[], Sequence[Listed]],
        *,
        journal: Journal | None = None,
        current: Callable[[], Sequence[Listed] | None] | None = None,
        max_transfers: int = MAX_TRANSFERS,
        deadline: float = DEADLINE,
        write_timeout: float = 5.0,
        clock: Clock = wall,
    ) -> None:
        self._secondaries = secondaries
        self._known = known
        self._current = current
        self._journal = journal
        self._limiter = trio.CapacityLimiter(max_transfers)
        self._deadline = deadline
        self._write_timeout = write_timeout
        self._clock = clock
        self.stats = TransferStats()
        self.progress = Progress()
        self._refusals = _Refusals()
        self._datagrams = 0

    def signed(
        self, snapshot: Snapshot, query: bytes, peer: str, transport: Transport
    ) -> bytes | None:
        """The response to a signed query, from the secondaries last read: signed when a
        listed secondary's key signed it (its SOA query before a transfer), else the TSIG
        error (BADKEY, BADSIG, BADTIME); ``None`` when it is unsigned or unreadable."""
        response = signed_answer(
            query, self._known(),
            lambda unsigned: answer(snapshot, unsigned, transport=transport),
            now=self._clock(), tcp=transport is Transport.TCP,
        )
        if isinstance(response, Refusal):
            return response.response
        if response is not None:
            self.stats.signed_answers += 1
        return response

    def datagram(self, snapshot: Snapshot, query: bytes, peer: str) -> bytes | Later | None:
        """``signed`` for a datagram, and the answer to an IXFR over UDP: the response, a
        ``Later`` when it needs the journal, or ``None``."""
        if transfer_question(query) != IXFR:
            return self.signed(snapshot, query, peer, Transport.UDP)
        decision = decide(snapshot.index, query, peer, self._known(), now=self._clock(),
                          tcp=False)
        if not isinstance(decision, Grant):
            self.stats.refused[decision.kind] += 1
            self._refusals.say(f"{peer} (IXFR over UDP): {decision.reason}")
            return decision.response
        host = peer_host(peer)
        signed = self._signed(decision, snapshot, f"{peer} (IXFR over UDP)")
        if signed is None:
            return refused(query, decision, now=self._clock())
        theirs = ixfr_serial(decision.query)
        if theirs is not None:
            self.progress.saw(decision.zone.origin, host, theirs, self._clock())
        if (not decision.full or self._journal is None or self._datagrams >= MAX_DATAGRAMS
                or signed.whole is not None):  # a signed zone comes whole, over TCP
            return self._datagram(decision, None, host)
        self._datagrams += 1
        return partial(self._datagram_later, decision, host)

    async def _datagram_later(self, grant: Grant, peer: str) -> bytes | None:
        assert self._journal is not None
        try:
            difference = None
            theirs = ixfr_serial(grant.query)
            with trio.move_on_after(DATAGRAM_DEADLINE):
                if theirs is not None:
                    difference = await self._journal(grant.zone.origin, theirs,
                                                     zone_serial(grant.zone))
            return self._datagram(grant, difference, peer)
        finally:
            self._datagrams -= 1

    def _datagram(self, grant: Grant, difference: Difference | None, peer: str) -> bytes:
        sent = datagram_response(grant, difference, now=self._clock())
        zone, serial = grant.zone.origin, zone_serial(grant.zone)
        if sent.kind != "incremental":
            self.stats.signed_answers += 1
            if sent.kind == "truncated":
                log.info("zone transfer: IXFR over UDP from serial %s of %s serial %d to %s: "
                         "answered TC (ask over TCP)", ixfr_serial(grant.query), zone, serial,
                         peer)
            return sent.response
        self.stats.completed += 1
        self.stats.kinds["incremental"] += 1
        self.progress.saw(zone, peer, serial, self._clock())
        log.info("zone transfer: IXFR from serial %s of %s serial %d to %s over UDP: "
                 "1 message(s), %d bytes", ixfr_serial(grant.query), zone, serial, peer,
                 len(sent.response))
        return sent.response

    async def transfer(self, stream: trio.SocketStream, query: bytes, snapshot: Snapshot) -> bool:
        """Answer one transfer request on ``stream``; whether the connection may go on
        (not after a transfer cut short)."""
        peer = _peer(stream)
        decision = decide(snapshot.index, query, peer, self._known(), now=self._clock())
        if isinstance(decision, Grant):
            # Listed, with its key verified, by the list in memory: only now is the
            # database asked, so a secondary removed since that list was read is refused
            # (unless the list in memory is known to be the database's: ``current``).
            try:
                listed = await self._listed_now()
            except Exception as exc:
                log.error("zone transfer for %s: the secondaries cannot be read (%s); "
                          "answered SERVFAIL", peer, " ".join(str(exc).split()))
                return await self._send(stream, _servfail(query))
            decision = decide(snapshot.index, query, peer, listed, now=self._clock())
        if not isinstance(decision, Grant):
            self.stats.refused[decision.kind] += 1
            self._refusals.say(f"{peer}: {decision.reason}")
            return decision.response is None or await self._send(stream, decision.response)
        signed = self._signed(decision, snapshot, peer)
        if signed is None:
            return await self._send(stream, refused(query, decision, now=self._clock()))
        return await self._transfer(stream, await self._incremental(signed), peer)

    async def _listed_now(self) -> Sequence[Listed]:
        """The secondaries as the database has them now: the list in memory when it is
        known to be current (no read: a fleet's thousands of transfers at start would
        each read every secondary otherwise), else a read."""
        current = None if self._current is None else self._current()
        return current if current is not None else await self._secondaries()

    def _signed(self, grant: Grant, snapshot: Snapshot, peer: str) -> Grant | None:
        """``grant`` as its zone's signing has it sent: as it is for an unsigned zone,
        fully signed for an NSEC3 zone (``valis_core.dns.transfer.signed``); ``None``
        when it cannot be sent (compact denial, a key lacking), counted and logged."""
        reason = refusal(snapshot.signer, grant.zone)
        if reason is not None:
            self.stats.refused["signed_without_chain"] += 1
            self._refusals.say(f"{peer}: {reason}")
            return None
        signer = snapshot.signer
        if signer is None or signed_zone(signer, grant.zone) is None:
            return grant
        whole = partial(signed_zone_records, grant.zone, signer, signer.window())
        return attrs.evolve(grant, whole=whole)

    async def _incremental(self, grant: Grant) -> Grant:
        """``grant`` with the journal's difference when it is an IXFR of a secondary
        behind that the journal reaches back to."""
        theirs = ixfr_serial(grant.query)
        if (self._journal is None or not grant.full or theirs is None or grant.whole
                or grant.query.question[0].rdtype != IXFR):
            return grant
        difference = await self._journal(grant.zone.origin, theirs, zone_serial(grant.zone))
        if difference is None:
            return grant
        made = partial(incremental_records, grant.zone, difference)
        try:
            if len(difference.removed) + len(difference.added) <= INCREMENTAL_HERE:
                return attrs.evolve(grant, incremental=made())
            return attrs.evolve(grant, incremental=await trio.to_thread.run_sync(
                made, abandon_on_cancel=True))
        except ZoneError as exc:
            log.warning("zone transfer: the journal of %s has a record that does not parse "
                        "(%s); sending the whole zone", grant.zone.origin, exc)
            return grant

    async def _transfer(self, stream: trio.SocketStream, grant: Grant, peer: str) -> bool:
        zone = grant.zone.origin
        ixfr = grant.query.question[0].rdtype == IXFR
        kind = ("up_to_date" if not grant.full else "incremental" if grant.incremental
                else "whole_zone" if ixfr else "axfr")
        label = {"axfr": "AXFR", "incremental": f"IXFR from serial {ixfr_serial(grant.query)}",
                 "whole_zone": "IXFR (whole zone)", "up_to_date": "IXFR (up to date)"}[kind]
        started = trio_now()
        sent = messages = 0
        with trio.move_on_after(self._deadline) as bounded:
            async with self._limiter:
                self.stats.running += 1
                try:
                    for step in transfer_steps(grant, now=self._clock()):
                        if step is None:
                            await trio.lowlevel.checkpoint()
                            continue
                        await stream.send_all(framed(step))
                        sent += len(step)
                        messages += 1
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.stats.failed += 1
                    log.warning("zone transfer: %s of %s to %s: the secondary closed the "
                                "connection after %d message(s)", label, zone, peer, messages)
                    return False
                finally:
                    self.stats.running -= 1
        if bounded.cancelled_caught:
            self.stats.failed += 1
            log.warning("zone transfer: %s of %s to %s not done within %.0fs (%d message(s) "
                        "sent); connection closed", label, zone, peer, self._deadline, messages)
            return False
        self.stats.completed += 1
        self.stats.kinds[kind] += 1
        theirs = ixfr_serial(grant.query)
        has = zone_serial(grant.zone) if grant.full or theirs is None else theirs
        self.progress.saw(zone, peer, has, self._clock())
        log.info("zone transfer: %s of %s serial %d to %s: %d message(s), %d bytes in %.3fs",
                 label, zone, zone_serial(grant.zone), peer, messages, sent,
                 trio_now() - started)
        return True

    async def _send(self, stream: trio.SocketStream, response: bytes | None) -> bool:
        if response is None:
            return True
        with trio.move_on_after(self._write_timeout):
            await stream.send_all(framed(response))
            return True
        return False


class _Refusals:
    """Logs refused requests, at most ``_REFUSALS_PER_SECOND`` lines a second: a UDP
    datagram costs a stranger nothing, so a flood of them must not become a log flood;
    the lines left out are counted on the next one (every refusal is in the metrics)."""

    __slots__ = ("_clock", "_left_out", "_said", "_window")

    def __init__(self, clock: Clock = monotonic) -> None:
        self._clock = clock
        self._window = -1.0
        self._said = 0
        self._left_out = 0

    def say(self, what: str) -> None:
        now = self._clock()
        if now - self._window >= 1.0:
            self._window, self._said = now, 0
        if self._said >= _REFUSALS_PER_SECOND:
            self._left_out += 1
            return
        self._said += 1
        more = f" ({self._left_out} more refused, not logged)" if self._left_out else ""
        self._left_out = 0
        log.info("zone transfer: refused %s%s", what, more)


_REFUSALS_PER_SECOND = 10


def _servfail(query: bytes) -> bytes | None:
    if len(query) < 12 or query[2] & 0x80:
        return None
    flags = 0x8000 | (query[2] << 8 & 0x7900) | SERVFAIL
    return query[:2] + flags.to_bytes(2, "big") + bytes(8)


def _peer(stream: trio.SocketStream) -> str:
    try:
        return peer_host(str(stream.socket.getpeername()[0]))
    except OSError:
        return "(gone)"

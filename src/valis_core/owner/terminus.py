"""The owner terminus: DNS UPDATE over TCP on the adopted owner socket, TSIG-signed, each
accepted update one fenced operator-state transaction.

The socket is the one the launcher bound on ``owner-port`` and handed down
(``--owner-fd``); nothing here binds. Connections use the DNS-over-TCP framing of
``valis_core.dns.serve`` and its bounded accept loop: at most ``max_connections`` at
once, each closed after ``idle_timeout`` seconds without a complete message, a response
that cannot be written within ``write_timeout`` ends the connection. Messages on one
connection are handled in order; a message is at most 65535 bytes by its framing.

``valis_core.owner.message`` decides what a message is (only a correctly signed UPDATE
goes further) and ``valis_core.owner.update`` what it does. A correctly signed UPDATE
whose (key, time signed, MAC) the terminus has received before is a replay and is
REFUSED, logged (``valis_core.owner.replay``: every one received within the 300 s window
is remembered, and nothing signed before the terminus started is taken, since what a
previous run received is not remembered). Updates run one at a time on
one database connection, in a worker thread (psycopg is blocking), each as:

1. ``fenced_transaction``: the fence check, its lock held until commit;
2. the zone's row locked ``FOR UPDATE``, the touched owners' records read ``FOR UPDATE``;
3. the decision, checked against the zone index (``ZoneIndex.with_owners_replaced`` on
   the index being served, with the touched owners' rows read in step 2);
4. the row changes written; commit. The zone source then sees the change notes and swaps
   the changed owners into the served index;
5. the answer waits until this node serves the zone at the update's serial or a later one
   (at most ``SERVED_WAIT``), as Knot and BIND answer an update once they serve it: a
   client that asks this node right after NOERROR finds what it wrote. The change is
   committed either way; only the answer waits, and no other update waits for it.

A writer the fence has moved past writes nothing: the update is answered SERVFAIL and
``serve`` raises ``FencedOut``, so the resident fails closed as it does when its
heartbeat is fenced out. A session the server ended while it was idle (a restart, an
outage) is replaced before the next update; its first statement is the fence check, so
a terminus superseded while the database was out of reach writes nothing. A connection
lost during an update is answered SERVFAIL and reopened for the next one. Nothing a
client sends makes ``serve`` fail.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
import trio
from dns.rcode import Rcode

from valis_core.clock import Clock, trio_now, wall
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.serve.tcp import accept_bounded, framed, take_frames
from valis_core.dns.transfer import zone_serial
from valis_core.dns.wire import names as wire
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.serial import serial_gt
from valis_core.fence import FencedOut, FenceState
from valis_core.operator_state.connection import OperatorStateError, connect, still_open
from valis_core.operator_state.fence import fenced_transaction
from valis_core.operator_state.record_writes import write_update
from valis_core.owner.key import TsigKey
from valis_core.owner.message import Received, receive, respond
from valis_core.owner.replay import ReplayCache
from valis_core.owner.update import UpdateOutcome, target_zone

log = logging.getLogger("valis.owner")

#: Bounds on any one statement or lock wait (as the fence heartbeat's).
STATEMENT_TIMEOUT_MS = 5000
#: At most this long an accepted update's answer waits for this node to serve it (the
#: zone source applies a change within milliseconds; this bounds a source that is
#: reconnecting to the database).
SERVED_WAIT = 2.0
#: How the terminus's database session names itself (``pg_stat_activity``).
APPLICATION_NAME = "valis owner terminus"
_MAX_READ = 65535 + 2


class OwnerTerminus:
    """Serve DNS UPDATE on ``listener`` for the zones of the index ``holder`` serves (so
    a zone a reload adds or removes is updatable from the swap that serves it, or no
    longer), writing as ``standing`` (the instance's generation and fence holder)."""

    def __init__(
        self,
        listener: trio.socket.SocketType,
        *,
        key: TsigKey,
        dsn: str,
        standing: FenceState,
        holder: IndexHolder,
        max_connections: int = 16,
        idle_timeout: float = 10.0,
        write_timeout: float = 5.0,
        clock: Clock = wall,
    ) -> None:
        self._listener = listener
        self._key = key
        self._dsn = dsn
        self._standing = standing
        self._holder = holder
        self._max_connections = max_connections
        self._idle_timeout = idle_timeout
        self._write_timeout = write_timeout
        self._clock = clock
        self._replays = ReplayCache(since=int(clock()))
        self._conn: psycopg.Connection[Any] | None = None
        self._db = trio.Lock()
        self._active = 0
        self._fenced: FencedOut | None = None
        self._scope = trio.CancelScope()
        self.applied = 0
        self.refused = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept and answer until cancelled; raise ``FencedOut`` once fenced out."""
        await trio.to_thread.run_sync(self._reconnect)
        task_status.started()
        with self._scope:
            await accept_bounded(
                trio.SocketListener(self._listener),
                self._connection,
                lambda: self._active < self._max_connections,
                accepted=self._opened,
                what="an owner terminus connection",
            )
        if self._fenced is not None:
            raise self._fenced

    @property
    def key_name(self) -> str:
        return self._key.name

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # -- connections ------------------------------------------------------------------

    def _opened(self) -> None:
        self._active += 1

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await self._converse(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._active -= 1

    async def _converse(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        pending = bytearray()
        deadline = trio_now() + self._idle_timeout
        while True:
            for message in take_frames(pending):
                response = await self._handle(message, peer)
                if response is not None:
                    # A fenced-out writer's SERVFAIL goes out even while the resident
                    # is already unwinding (its heartbeat may have seen the fence first).
                    with trio.CancelScope(shield=self._fenced is not None), trio.move_on_after(
                        self._write_timeout
                    ) as sending:
                        await stream.send_all(framed(response))
                    if sending.cancelled_caught:
                        return
                if self._fenced is not None:
                    self._scope.cancel()
                    return
                deadline = trio_now() + self._idle_timeout
            with trio.move_on_at(deadline):
                data = await stream.receive_some(_MAX_READ)
                if not data:
                    return
                pending += data
                continue
            return

    async def _handle(self, message: bytes, peer: str) -> bytes | None:
        got = receive(message, self._key, clock=self._clock)
        if not isinstance(got, Received):
            if got is not None:
                self.refused += 1
                log.info("owner terminus: refused a message from %s (%s)", peer, _rcode(got))
            return got
        replayed = self._replayed(got, peer)
        if replayed is not None:
            return replayed
        served = self._holder.current.zones
        zone = target_zone(got.request, served)
        if isinstance(zone, UpdateOutcome):
            return self._answer(got, zone, got.request.zone, peer)
        try:
            async with self._db:
                outcome = await trio.to_thread.run_sync(self._transact, got, zone, served)
        except FencedOut as exc:
            self._fenced = exc
            log.error("owner terminus: update of %s from %s: %s", zone, peer, exc)
            return respond(got, Rcode.SERVFAIL, now=self._clock())
        except (psycopg.Error, OperatorStateError) as exc:
            self.close()
            text = " ".join(str(exc).split())
            outcome = UpdateOutcome(rcode=Rcode.SERVFAIL, reason=f"operator state: {text}")
        except Exception as exc:
            log.exception("owner terminus: update of %s from %s failed", zone, peer)
            outcome = UpdateOutcome(rcode=Rcode.SERVFAIL, reason=type(exc).__name__)
        if outcome.rcode == Rcode.NOERROR and outcome.serial is not None:
            await self._served(zone, outcome.serial, peer)
        return self._answer(got, outcome, zone, peer)

    async def _served(self, zone: str, serial: int, peer: str) -> None:
        """Return once this node serves ``zone`` at ``serial`` or a later one (RFC 1982),
        or after ``SERVED_WAIT``."""
        apex = wire.from_text(zone).lower()

        def there(index: ZoneIndex) -> bool:
            found = index.zone_for(apex)
            return (found is not None and found.apex == apex
                    and not serial_gt(serial, zone_serial(found)))

        if there(self._holder.current):
            return
        seen = trio.Event()

        def swapped(snapshot: Snapshot) -> None:
            if there(snapshot.index):
                seen.set()

        unwatch = self._holder.watch(swapped)
        try:
            with trio.move_on_after(SERVED_WAIT) as waiting:
                await seen.wait()
        finally:
            unwatch()
        if waiting.cancelled_caught:
            log.warning("owner terminus: update of %s from %s committed (serial %d) but not "
                        "served here after %.0f s; answered anyway", zone, peer, serial,
                        SERVED_WAIT)

    def _replayed(self, got: Received, peer: str) -> bytes | None:
        """REFUSED, signed, for an UPDATE whose (key, time signed, MAC) was accepted
        before (``valis_core.owner.replay``), or signed before what is remembered; ``None``
        for one not seen, which is remembered from now on."""
        assert got.query.tsig is not None  # a ``Received`` is always signed
        tsig = got.query.tsig[0]
        verdict = self._replays.admit(got.key.name.to_text(), tsig.time_signed, tsig.mac,
                                      now=self._clock())
        if verdict == "fresh":
            return None
        self.refused += 1
        why = ("it is a replay of an update already received" if verdict == "replay" else
               "it was signed before the oldest update the node remembers (its start, or "
               "one pushed out by many since), so it cannot be told from a replay; sign it "
               "again")
        log.warning("owner terminus: update of %s from %s (key %s, signed at %d) refused "
                    "REFUSED: %s", got.request.zone, peer, got.key.name, tsig.time_signed, why)
        return respond(got, Rcode.REFUSED, now=self._clock())

    def _answer(self, got: Received, outcome: UpdateOutcome, zone: str, peer: str) -> bytes:
        if outcome.rcode == Rcode.NOERROR:
            self.applied += 1
            serial = f", serial {outcome.serial}" if outcome.changed else ""
            log.info("owner terminus: update of %s from %s: %s%s", zone, peer, outcome.reason,
                     serial)
        else:
            self.refused += 1
            log.info("owner terminus: update of %s from %s refused %s: %s", zone, peer,
                     outcome.rcode.name, outcome.reason)
        return respond(got, outcome.rcode, now=self._clock())

    # -- the transaction (worker thread) -----------------------------------------------

    def _reconnect(self) -> psycopg.Connection[Any]:
        if self._conn is not None and not still_open(self._conn):
            # Ended while idle (a restart, an outage): replaced before the update is tried,
            # so the client is not refused for a session that was already gone.
            self.close()
        if self._conn is None:
            conn = connect(self._dsn, autocommit=True)
            try:
                conn.execute(f"SET application_name = '{APPLICATION_NAME}'")
                conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
                conn.execute(f"SET lock_timeout = {STATEMENT_TIMEOUT_MS}")
            except psycopg.Error:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _transact(self, got: Received, zone: str, served: Sequence[str]) -> UpdateOutcome:
        conn = self._reconnect()
        with fenced_transaction(conn, self._standing) as cur:
            outcome = write_update(
                cur, got.request, zone, served=served, index=self._holder.current,
                now=self._clock(),
            )
            if outcome is None:
                return UpdateOutcome(
                    rcode=Rcode.NOTAUTH, reason=f"zone {zone} is not in operator state"
                )
            return outcome


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "(gone)"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _rcode(response: bytes) -> str:
    try:
        return Rcode(response[3] & 0x0F).name
    except (IndexError, ValueError):
        return "?"

"""The instance fence as the running resident keeps it: checked at boot, then watched by a
fenced heartbeat until the instance is superseded.

At boot (``open``) the resident connects as itself over the DSN, refuses a database
whose schema is older than this valis (``valis db migrate`` first — the resident never
migrates: that would be a write outside the fence), seeds the fence when its own store
is at the genesis generation (refused when another instance holds it), and compares its
standing — generation and holder — with the fence's. A store generation below the
fence's means another instance has claimed the fence since this store was condensed:
the instance is fenced out and refuses to start — a restart never steals the fence back.
A store generation above the fence's was never claimed, and another holder at the same
generation is another instance: both are refused the same way.

While running, every ``interval`` seconds the resident upserts its ``node_liveness`` row
inside ``fenced_transaction``. That heartbeat is the resident's mutating transaction:
once a successor claims a higher generation, the very next beat raises ``FencedOut``,
writes nothing, and ``run`` raises it so the resident stops serving and exits non-zero.
A lost connection is not a verdict either way; the beat is retried on a new connection
at the next interval (the zone source keeps serving the last good index meanwhile). A
session the server ended while idle (a restart, an outage) is found before the beat and
replaced rather than failing it. The fenced transaction is the first thing a new
connection runs, so a resident that was superseded while the database was out of reach
learns it before it writes anything.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

import psycopg
import trio

from valis_core.clock import Clock, utc_now, wall
from valis_core.fence import (
    GENESIS_GENERATION,
    FencedOut,
    FenceState,
    SeedRefused,
    assert_fence_touch,
)
from valis_core.operator_state.connection import (
    OperatorStateError,
    connect,
    redact,
    still_open,
)
from valis_core.operator_state.fence import (
    WRITE_TURN,
    UnseededFence,
    fenced_transaction,
    read_instance_fence,
    seed_instance_fence,
)
from valis_core.operator_state.schema import schema_version, shipped_migrations

log = logging.getLogger("valis.resident.fence")

HEARTBEAT_INTERVAL = 2.0
#: Bounds on any one statement or lock wait, so a stuck database cannot stall shutdown.
STATEMENT_TIMEOUT_MS = 5000

_UPSERT = """
INSERT INTO node_liveness (node, holder, generation, boot_id, started_at, beat_at, beats)
VALUES (%(node)s, %(holder)s, %(generation)s, %(boot_id)s, %(started_at)s, now(), 1)
ON CONFLICT (node) DO UPDATE SET
    holder = EXCLUDED.holder,
    generation = EXCLUDED.generation,
    boot_id = EXCLUDED.boot_id,
    started_at = EXCLUDED.started_at,
    beat_at = now(),
    beats = CASE WHEN node_liveness.boot_id = EXCLUDED.boot_id
                 THEN node_liveness.beats + 1 ELSE 1 END
"""


class FenceWatch:
    """One instance's standing at the fence: ``node``'s ``holder`` at ``generation``."""

    def __init__(
        self,
        dsn: str,
        *,
        node: str,
        holder: str,
        generation: int,
        interval: float = HEARTBEAT_INTERVAL,
        clock: Clock = wall,
    ) -> None:
        self.dsn = dsn
        self.node = node
        self.holder = holder
        self.generation = generation
        self.interval = interval
        self.boot_id = secrets.token_hex(8)
        self._clock = clock
        self.started_at = utc_now(clock)
        self.fence: FenceState | None = None
        self.beats = 0
        #: heartbeats that did not reach the database, since boot
        self.failed_beats = 0
        #: whether the last heartbeat reached the database, and since when (UNIX time)
        self.connected = False
        self.connected_since: float | None = None
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def fence_generation(self) -> int | None:
        return None if self.fence is None else self.fence.generation

    @property
    def standing(self) -> FenceState:
        """This instance as a writer: its generation and holder."""
        return FenceState(generation=self.generation, holder=self.holder)

    # -- boot --------------------------------------------------------------------------

    def open(self) -> FenceState:
        """Connect, check the schema and the fence, and commit the first heartbeat.

        Blocking (run it in a worker thread). Raises ``OperatorStateError`` when the
        database cannot be used and ``FencedOut`` when this instance may not write.
        """
        conn = self._connect()
        try:
            _require_schema(conn)
            if self.generation == GENESIS_GENERATION:
                try:
                    seed_instance_fence(conn, self.holder)
                except SeedRefused as exc:
                    # For a resident, another holder's fence is the same verdict as a
                    # successor's: it may not write, so it does not start.
                    self.fence = exc.current
                    raise FencedOut(exc.current, self.standing) from exc
            current = read_instance_fence(conn)
            if current is None:
                raise UnseededFence(f"start at store generation {self.generation}")
            self.fence = current
            assert_fence_touch(current, self.standing)
            if WRITE_TURN.may_write():
                self._beat(conn)
            else:
                log.info("operator state: a successor: the standing is checked; the first "
                         "heartbeat waits for the write turn fulcrum grants once the "
                         "resident it takes over from has exited")
            self._reached(True)
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                conn.close()
            raise
        self._conn = conn
        return current

    # -- running -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beat every ``interval`` seconds until cancelled; raise ``FencedOut`` when
        superseded."""
        task_status.started()
        failed = 0
        while True:
            await trio.sleep(self.interval)
            if not WRITE_TURN.may_write():
                continue  # a successor not yet given the turn writes nothing, beats neither
            try:
                await trio.to_thread.run_sync(self._beat_reconnecting)
            except (FencedOut, UnseededFence):
                # A verdict, not an outage: without its fence the instance may not write.
                raise
            except (psycopg.Error, OperatorStateError) as exc:
                failed += 1
                self.failed_beats += 1
                self._reached(False)
                if failed == 1:
                    log.warning(
                        "operator state: database unreachable, heartbeat failed (%s); "
                        "serving the last good snapshot, retrying every %.1fs",
                        " ".join(str(exc).split()), self.interval,
                    )
                else:
                    log.info("fence: heartbeat retry %d failed; next in %.1fs", failed - 1,
                             self.interval)
                self.close()
            else:
                was_down = self.connected_since
                self._reached(True)
                if failed:
                    down = self._clock() - was_down if was_down is not None else 0.0
                    log.info("operator state: database reachable again after %d failed "
                             "heartbeat(s) (%.0fs); the fence is still this instance's",
                             failed, down)
                    failed = 0

    def _reached(self, connected: bool) -> None:
        if connected != self.connected or self.connected_since is None:
            self.connected, self.connected_since = connected, self._clock()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # -- internals ---------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect(self.dsn, autocommit=True)
        try:
            conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            conn.execute(f"SET lock_timeout = {STATEMENT_TIMEOUT_MS}")
        except psycopg.Error as exc:
            conn.close()
            raise OperatorStateError(
                f"operator state: cannot configure the session on {redact(self.dsn)}: {exc}"
            ) from exc
        return conn

    def _beat_reconnecting(self) -> None:
        if self._conn is not None and not still_open(self._conn):
            self.close()
        if self._conn is None:
            self._conn = self._connect()
        self._beat(self._conn)

    def _beat(self, conn: psycopg.Connection[Any]) -> None:
        try:
            with fenced_transaction(conn, self.standing) as cur:
                cur.execute(
                    _UPSERT,
                    {
                        "node": self.node,
                        "holder": self.holder,
                        "generation": self.generation,
                        "boot_id": self.boot_id,
                        "started_at": self.started_at,
                    },
                )
        except FencedOut as exc:
            self.fence = exc.current
            raise
        self.fence = self.standing
        self.beats += 1


def _require_schema(conn: psycopg.Connection[Any]) -> None:
    needed = shipped_migrations()[-1].version
    found = schema_version(conn)
    if found is None or found < needed:
        shown = "unmigrated" if found is None else f"at schema version {found}"
        raise OperatorStateError(
            f"operator state: the database is {shown} and this resident needs version "
            f"{needed}; run `valis db migrate --dsn DSN` as the operator first"
        )

"""The pg-zone-source against the private cluster: an eager load that names what it
cannot serve, live reloads after committed changes, a failed rebuild that keeps the
last good zone, reconnection after the backend is killed (with backoff, catching up on
what changed meanwhile), the fence checked first on every connection, and a clean
cancel."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import trio

from tests.scenario.operator_state_helpers import (
    answer_texts,
    import_zone,
    run_sql,
    zone_source,
)
from tests.scenario.pg import PgCluster
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.wire.records import ZoneError
from valis_core.dns.zone import ZoneIndex
from valis_core.fence import FencedOut, FenceState
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence
from valis_core.operator_state.zone_source import PgZoneSource, backoff_delay

WAIT = 10.0  # bound on how long a test waits for a reload; never a timing assertion


def _sql(pg: PgCluster, dsn: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    run_sql(pg, dsn, (sql, params))


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(WAIT):
        while not check():
            await trio.sleep(0.01)


def _sessions(pg: PgCluster, dsn: str) -> int:
    """Connections to the database other than the one asking, once every closed one is
    gone: a backend leaves ``pg_stat_activity`` some time after its client closed the
    connection (its exit is asynchronous), so the count is polled, bounded by ``WAIT``,
    until it reaches zero; what it is then is the answer."""
    deadline = time.monotonic() + WAIT
    with pg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            assert row is not None
            if row[0] == 0 or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.01)


async def test_load_indexes_every_served_zone(pg_cluster: PgCluster, state_dsn: str) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    import_zone(pg_cluster, state_dsn, "example.net.", "www IN A 198.51.100.80\n")
    import_zone(pg_cluster, state_dsn, "not-served.example.", "")
    source = zone_source(pg_cluster, state_dsn, ["Example.ORG", "example.net."])
    try:
        index = await source.load()
    finally:
        source.close()
    assert index.zones == ("example.net.", "example.org.")
    assert index.record_count == 8
    assert answer_texts(index, "www.example.org.", "A") == {"192.0.2.80"}
    assert answer_texts(index, "www.example.net.", "A") == {"198.51.100.80"}


async def test_load_names_a_served_zone_missing_from_the_database(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.")
    source = zone_source(pg_cluster, state_dsn, ["example.org.", "example.net."])
    with pytest.raises(OperatorStateError, match=r"served zone\(s\) example\.net\. not in"):
        await source.load()
    assert _sessions(pg_cluster, state_dsn) == 0


async def test_load_names_a_zone_it_cannot_serve(pg_cluster: PgCluster, state_dsn: str) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    # SQL cannot see that a CNAME may not share its owner; the index can.
    _sql(
        pg_cluster,
        state_dsn,
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) "
        "VALUES ('example.org.', 'www.example.org.', 'CNAME', 300, 'ns1.example.org.')",
    )
    source = zone_source(pg_cluster, state_dsn, ["example.org."])
    with pytest.raises(ZoneError, match=r"zone example\.org\. cannot be served: www"):
        await source.load()


async def test_a_committed_change_is_served_by_a_running_source(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    import_zone(pg_cluster, state_dsn, "example.net.", "www IN A 198.51.100.80\n")
    source = zone_source(pg_cluster, state_dsn, ["example.org.", "example.net."])
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        untouched = holder.current.zone_for(b"\x07example\x03net\x00")
        _sql(
            pg_cluster,
            state_dsn,
            "UPDATE records SET rdata = '192.0.2.81' WHERE owner = 'www.example.org.'",
        )
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A") != {
            "192.0.2.80"
        })
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.81"}
        # Only the changed zone was rebuilt; the other one is shared whole (a zone is
        # frozen and belongs to no index version).
        reloaded = holder.current.zone_for(b"\x07example\x03net\x00")
        assert reloaded is not None
        assert untouched is not None
        assert reloaded is untouched

        import_zone(pg_cluster, state_dsn, "example.org.", extra="new IN A 192.0.2.99\n", serial=2)
        await _until(lambda: answer_texts(holder.current, "new.example.org.", "A") != set())
        assert answer_texts(holder.current, "www.example.org.", "A") == set()
        nursery.cancel_scope.cancel()
    assert source.stats.reloads >= 2
    assert _sessions(pg_cluster, state_dsn) == 0


async def test_a_failed_rebuild_keeps_serving_the_last_good_zone(
    pg_cluster: PgCluster, state_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    source = zone_source(pg_cluster, state_dsn, ["example.org."])
    holder = IndexHolder(await source.load())
    first = holder.current
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        with caplog.at_level(logging.ERROR, logger="valis.zone_source"):
            _sql(
                pg_cluster,
                state_dsn,
                "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES "
                "('example.org.', 'www.example.org.', 'CNAME', 300, 'ns1.example.org.')",
            )
            await _until(lambda: source.stats.failed_reloads >= 1)
        assert holder.current is first
        assert "www.example.org.: CNAME beside other data" in caplog.text
        assert "still serving its last good version" in caplog.text

        _sql(pg_cluster, state_dsn, "DELETE FROM records WHERE rtype = 'CNAME'")
        _sql(pg_cluster, state_dsn, "UPDATE records SET ttl = 42 WHERE rtype = 'A'")
        await _until(lambda: holder.current is not first)
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
        nursery.cancel_scope.cancel()


async def test_the_source_reconnects_after_its_backends_are_killed_and_reloads(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    source = zone_source(pg_cluster, state_dsn, ["example.org."], initial_backoff=0.2)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        with pg_cluster.connect(state_dsn, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            assert killed == (2,)
            # Changed while the source is away: no notification reaches it for this.
            admin.execute("UPDATE records SET rdata = '192.0.2.81' WHERE rtype = 'A' "
                          "AND owner = 'www.example.org.'")  # fmt: skip
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A") == {
            "192.0.2.81"
        })
        assert source.stats.reconnects >= 1
        # And it follows changes again on its new connection.
        _sql(pg_cluster, state_dsn, "UPDATE records SET rdata = '192.0.2.82' "
                                    "WHERE owner = 'www.example.org.'")  # fmt: skip
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A") == {
            "192.0.2.82"
        })
        nursery.cancel_scope.cancel()


async def test_run_without_load_fails_closed_before_it_reports_started(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    source = zone_source(pg_cluster, state_dsn, ["example.org."])
    holder = IndexHolder(ZoneIndex.from_records([]))
    with pytest.raises(OperatorStateError, match=r"example\.org\. not in the database"):
        await source.run(holder)
    assert _sessions(pg_cluster, state_dsn) == 0


async def test_cancelling_a_load_in_flight_leaves_no_session(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.")
    source = zone_source(pg_cluster, state_dsn, ["example.org."])
    # Hold a lock the load's read must wait for, so the load is mid-query when cancelled.
    with pg_cluster.connect(state_dsn) as blocker:
        blocker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
        with trio.move_on_after(0.5) as scope:
            await source.load()
        assert scope.cancelled_caught
        blocker.rollback()
    assert _sessions(pg_cluster, state_dsn) == 0


def test_the_source_refuses_an_empty_served_list() -> None:
    def never() -> psycopg.Connection[Any]:
        raise AssertionError("must not connect")

    with pytest.raises(OperatorStateError, match="no served zones"):
        PgZoneSource(never, [])


# -- outages and the fence --------------------------------------------------------------

HOLDER = "node-a@loopback#0123456789abcdef"
SUCCESSOR = "node-a@elsewhere#fedcba9876543210"


def _seed(pg: PgCluster, dsn: str) -> FenceState:
    with pg.connect(dsn, autocommit=True) as conn:
        return seed_instance_fence(conn, HOLDER)


def _cut_off(pg: PgCluster, dsn: str) -> None:
    """End every session of the database but the asker's, as an outage does."""
    with pg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


class Gate:
    """A reconnect pause the test ends: what happens while the source waits to reconnect
    is the test's to arrange. Records every delay asked for."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.opened = trio.Event()

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        await self.opened.wait()


async def test_a_source_with_a_standing_refuses_a_fence_that_is_not_its_own(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.")
    standing = _seed(pg_cluster, state_dsn)
    source = zone_source(pg_cluster, state_dsn, ["example.org."], standing=standing)
    try:
        await source.load()
    finally:
        source.close()
    assert source.stats.fence_checks == 2  # on connecting, and after reading the rows
    other = zone_source(
        pg_cluster, state_dsn, ["example.org."], standing=FenceState(0, SUCCESSOR)
    )
    with pytest.raises(FencedOut, match="another instance than the fence's holder"):
        await other.load()
    assert other.stats.loads == 0
    assert _sessions(pg_cluster, state_dsn) == 0


async def test_a_source_superseded_while_cut_off_stops_before_reading_anything(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    standing = _seed(pg_cluster, state_dsn)
    gate = Gate()
    source = zone_source(
        pg_cluster, state_dsn, ["example.org."], standing=standing, sleep=gate.sleep
    )
    holder = IndexHolder(await source.load())
    first = holder.current
    verdicts: list[FencedOut] = []

    async def follow(task_status: trio.TaskStatus[None]) -> None:
        try:
            await source.run(holder, task_status=task_status)
        except FencedOut as exc:
            verdicts.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(follow)
        _cut_off(pg_cluster, state_dsn)
        await _until(lambda: len(gate.delays) >= 1)
        # While it is away, a successor claims the fence and writes its own data.
        with pg_cluster.connect(state_dsn, autocommit=True) as successor:
            claim_instance_fence(successor, standing.generation + 1, SUCCESSOR)
            successor.execute("UPDATE records SET rdata = '192.0.2.66' "
                              "WHERE owner = 'www.example.org.'")  # fmt: skip
        gate.opened.set()
    (verdict,) = verdicts
    assert verdict.current == FenceState(standing.generation + 1, SUCCESSOR)
    assert "was superseded" in str(verdict)
    assert holder.current is first
    assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
    assert source.stats.loads == 1
    assert source.stats.reloads == 0
    assert _sessions(pg_cluster, state_dsn) == 0


async def test_a_source_superseded_while_following_never_serves_what_the_successor_wrote(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    standing = _seed(pg_cluster, state_dsn)
    source = zone_source(pg_cluster, state_dsn, ["example.org."], standing=standing)
    holder = IndexHolder(await source.load())
    first = holder.current
    verdicts: list[FencedOut] = []

    async def follow(task_status: trio.TaskStatus[None]) -> None:
        try:
            await source.run(holder, task_status=task_status)
        except FencedOut as exc:
            verdicts.append(exc)

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            await nursery.start(follow)
            with pg_cluster.connect(state_dsn, autocommit=True) as successor:
                claim_instance_fence(successor, standing.generation + 1, SUCCESSOR)
                # Notified to the source like any change, after the claim's note: the
                # change's rows come with their note, but the fence is read first.
                successor.execute("UPDATE records SET rdata = '192.0.2.66' "
                                  "WHERE owner = 'www.example.org.'")  # fmt: skip
    (verdict,) = verdicts
    assert "was superseded" in str(verdict)
    assert holder.current is first
    assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
    assert _sessions(pg_cluster, state_dsn) == 0


async def test_a_source_back_from_an_outage_with_its_fence_catches_up_and_follows(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    standing = _seed(pg_cluster, state_dsn)
    gate = Gate()
    source = zone_source(
        pg_cluster, state_dsn, ["example.org."], standing=standing, sleep=gate.sleep
    )
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        _cut_off(pg_cluster, state_dsn)
        await _until(lambda: len(gate.delays) >= 1)
        # Changed while the source is away: no notification reaches it for this.
        _sql(pg_cluster, state_dsn, "UPDATE records SET rdata = '192.0.2.81' "
                                    "WHERE owner = 'www.example.org.'")  # fmt: skip
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
        gate.opened.set()
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A") == {
            "192.0.2.81"
        })
        assert source.stats.fence_checks >= 4  # twice on loading, twice on reconnecting
        _sql(pg_cluster, state_dsn, "UPDATE records SET rdata = '192.0.2.82' "
                                    "WHERE owner = 'www.example.org.'")  # fmt: skip
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A") == {
            "192.0.2.82"
        })
        nursery.cancel_scope.cancel()
    (delay,) = gate.delays
    assert 0.1 <= delay <= 0.2  # the first wait, jittered


async def test_reconnect_attempts_back_off_exponentially_up_to_the_bound(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    refusing = [False]

    def connect() -> psycopg.Connection[Any]:
        if refusing[0]:
            raise psycopg.OperationalError("connection refused (the database is down)")
        return pg_cluster.connect(state_dsn, autocommit=True)

    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 8:
            refusing[0] = False
        await trio.sleep(0)

    source = PgZoneSource(connect, ["example.org."], sleep=sleep, draw=lambda: 0.0)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        refusing[0] = True
        _cut_off(pg_cluster, state_dsn)
        _sql(pg_cluster, state_dsn, "UPDATE records SET rdata = '192.0.2.81' "
                                    "WHERE owner = 'www.example.org.'")  # fmt: skip
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A") == {
            "192.0.2.81"
        })
        nursery.cancel_scope.cancel()
    assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert source.stats.reconnects == 8


def test_backoff_doubles_to_its_bound_and_jitters_down_by_at_most_half() -> None:
    assert [backoff_delay(n, 0.2, 5.0, 0.0) for n in range(7)] == [
        0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0
    ]
    assert backoff_delay(0, 0.2, 5.0, 0.999) > 0.1
    assert backoff_delay(10_000, 0.2, 5.0, 0.5) == 3.75


async def test_the_source_follows_again_only_once_it_has_re_read_what_changed_while_away(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """Issue 25 item 7: 'ready' means changes flow. Held back at its first reconnect
    wait (the database down for it, whatever a heartbeat found), the source says it is
    not following; the moment it says it follows again, the change made while it was
    away is already served."""
    import_zone(pg_cluster, state_dsn, "example.org.", "www IN A 192.0.2.80\n")
    refusing = [False]

    def connect() -> psycopg.Connection[Any]:
        if refusing[0]:
            raise psycopg.OperationalError("connection refused (the database is down)")
        return pg_cluster.connect(state_dsn, autocommit=True)

    waiting = trio.Event()
    release = trio.Event()

    async def sleep(delay: float) -> None:
        waiting.set()
        await release.wait()

    source = PgZoneSource(connect, ["example.org."], sleep=sleep, draw=lambda: 0.0)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        assert source.stats.following
        refusing[0] = True
        _cut_off(pg_cluster, state_dsn)
        _sql(pg_cluster, state_dsn, "UPDATE records SET rdata = '192.0.2.81' "
                                    "WHERE owner = 'www.example.org.'")  # fmt: skip
        with trio.fail_after(WAIT):
            await waiting.wait()
        assert not source.stats.following
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
        refusing[0] = False
        release.set()
        await _until(lambda: source.stats.following)
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.81"}
        nursery.cancel_scope.cancel()

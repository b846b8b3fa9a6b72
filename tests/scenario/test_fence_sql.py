"""The instance write-fence in the real database: the pure rules hold on the stored row,
and under real concurrency no write from a superseded writer ever lands."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import psycopg
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.scenario.pg import PgCluster
from valis_core.fence import FencedOut, FenceState, SeedRefused, StaleClaim
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.fence import (
    UnseededFence,
    assert_fence_touch,
    claim_instance_fence,
    fenced_transaction,
    read_instance_fence,
    seed_instance_fence,
)
from valis_core.operator_state.schema import migrate

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def fence_dsn(pg_cluster: PgCluster) -> str:
    """One migrated database for this module, with a table the writers write into."""
    dsn = pg_cluster.new_database("fence")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
        conn.execute(
            "CREATE TABLE fence_writes (write_id int PRIMARY KEY, generation bigint, holder text)"
        )
        conn.commit()
    return dsn


@pytest.fixture
def conn(pg_cluster: PgCluster, fence_dsn: str) -> Iterator[Conn]:
    """A connection as ``valis`` to a database whose fence and writes start empty."""
    with pg_cluster.connect(fence_dsn, autocommit=True) as connection:
        connection.execute("TRUNCATE instance_fence, fence_writes")
        yield connection


def writes(conn: Conn) -> list[tuple[int, int]]:
    rows = conn.execute("SELECT write_id, generation FROM fence_writes ORDER BY 1")
    return [tuple(row) for row in rows]


A0 = FenceState(0, "node-a")


def test_seeding_lays_genesis_once_and_refuses_another_holder(conn: Conn) -> None:
    assert seed_instance_fence(conn, "node-a") == FenceState(0, "node-a")
    assert seed_instance_fence(conn, "node-a") == FenceState(0, "node-a")
    with pytest.raises(SeedRefused, match="already stands at generation 0 held by 'node-a'"):
        seed_instance_fence(conn, "node-b")
    assert read_instance_fence(conn) == FenceState(0, "node-a")
    claim_instance_fence(conn, 3, "node-b")
    with pytest.raises(SeedRefused):
        seed_instance_fence(conn, "node-a")
    assert read_instance_fence(conn) == FenceState(3, "node-b")


def test_a_second_holder_at_the_fence_generation_writes_nothing(conn: Conn) -> None:
    seed_instance_fence(conn, "node-a")
    with pytest.raises(FencedOut, match="another instance"), fenced_transaction(
        conn, FenceState(0, "node-b")
    ) as cur:
        cur.execute("INSERT INTO fence_writes VALUES (1, 0, 'node-b')")
    assert writes(conn) == []


def test_a_claim_advances_only_upwards_and_a_refusal_changes_nothing(conn: Conn) -> None:
    seed_instance_fence(conn, "node-a")
    assert claim_instance_fence(conn, 2, "node-b") == FenceState(2, "node-b")
    assert claim_instance_fence(conn, 2, "node-b") == FenceState(2, "node-b")  # re-claim
    with pytest.raises(StaleClaim, match="already held by 'node-b'"):
        claim_instance_fence(conn, 2, "node-a")
    with pytest.raises(StaleClaim, match="below the fence"):
        claim_instance_fence(conn, 1, "node-b")
    assert read_instance_fence(conn) == FenceState(2, "node-b")


def test_an_unseeded_fence_refuses_claims_and_writes(conn: Conn) -> None:
    with pytest.raises(UnseededFence, match="never seeded"):
        claim_instance_fence(conn, 1, "node-a")
    with pytest.raises(UnseededFence), fenced_transaction(conn, A0) as cur:
        cur.execute("INSERT INTO fence_writes VALUES (1, 0)")
    assert writes(conn) == []


def test_a_writer_at_the_fence_generation_writes(conn: Conn) -> None:
    seed_instance_fence(conn, "node-a")
    with fenced_transaction(conn, A0) as cur:
        cur.execute("INSERT INTO fence_writes VALUES (1, 0)")
    assert writes(conn) == [(1, 0)]


def test_a_fenced_out_transaction_writes_nothing(conn: Conn) -> None:
    seed_instance_fence(conn, "node-a")
    claim_instance_fence(conn, 1, "node-b")

    def write_then_touch() -> None:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("INSERT INTO fence_writes VALUES (1, 0)")  # written before the check
            assert_fence_touch(cur, A0)

    with pytest.raises(FencedOut, match="generation 0 is fenced out"):
        write_then_touch()
    with pytest.raises(FencedOut), fenced_transaction(conn, A0) as cur:
        cur.execute("INSERT INTO fence_writes VALUES (2, 0)")
    with pytest.raises(FencedOut, match="ahead of the fence"), fenced_transaction(
        conn, FenceState(5, "node-b")
    ):
        pass
    assert writes(conn) == []


def test_the_touch_refuses_to_run_outside_a_transaction(conn: Conn) -> None:
    seed_instance_fence(conn, "node-a")
    with (
        pytest.raises(OperatorStateError, match="inside the mutating transaction"),
        conn.cursor() as cur,
    ):
        assert_fence_touch(cur, A0)


# -- real concurrency ----------------------------------------------------------------------


@attrs.define
class Actor:
    """One instance: its own connection, the generation it writes at, an open write.
    Every instance starts believing it writes at generation 0, as two genesis nodes on
    one database would; only the one that seeded the fence may."""

    name: str
    conn: Conn
    generation: int = 0
    in_write: bool = False
    busy: trio.Event | None = None
    open_writes: list[int] = attrs.Factory(list)

    @property
    def standing(self) -> FenceState:
        return FenceState(self.generation, self.name)


@attrs.define
class Log:
    """What happened, in an order every participant agrees with: ``next(seq)`` is taken
    just before a request is sent and just after its reply arrives."""

    seq: Iterator[int] = attrs.Factory(itertools.count)
    landed: dict[int, tuple[int, int]] = attrs.Factory(dict)  # write_id -> (gen, commit sent)
    dropped: set[int] = attrs.Factory(set)
    claims: list[tuple[int, int]] = attrs.Factory(list)  # (generation, commit done)
    standings: set[FenceState] = attrs.Factory(set)  # every standing the fence ever had
    write_ids: Iterator[int] = attrs.Factory(lambda: itertools.count(1))


def _step(actor: Actor, kind: str, log: Log, next_generation: Callable[[], int]) -> None:
    """One action of an instance, run in a worker thread (it may block on the fence)."""
    conn = actor.conn
    if kind == "write":
        write_id = next(log.write_ids)
        if not actor.in_write:
            conn.execute("BEGIN")
            actor.in_write = True
        try:
            with conn.cursor() as cur:
                assert_fence_touch(cur, actor.standing)
                cur.execute(
                    "INSERT INTO fence_writes VALUES (%s, %s, %s)",
                    (write_id, actor.generation, actor.name),
                )
        except FencedOut:
            conn.execute("ROLLBACK")
            actor.in_write = False
            log.dropped.update([*actor.open_writes, write_id])
            actor.open_writes.clear()
            return
        actor.open_writes.append(write_id)
    elif kind in ("commit", "rollback"):
        if not actor.in_write:
            return
        sent = next(log.seq)
        conn.execute("COMMIT" if kind == "commit" else "ROLLBACK")
        for write_id in actor.open_writes:
            if kind == "commit":
                log.landed[write_id] = (actor.generation, sent)
            else:
                log.dropped.add(write_id)
        actor.open_writes.clear()
        actor.in_write = False
    elif kind == "claim":
        if actor.in_write:
            return
        generation = next_generation()
        try:
            claimed = claim_instance_fence(conn, generation, actor.name)
        except StaleClaim:
            return
        log.claims.append((claimed.generation, next(log.seq)))
        log.standings.add(claimed)
        actor.generation = claimed.generation
    elif kind == "seed":
        if actor.in_write:
            return
        try:
            seeded = seed_instance_fence(conn, actor.name)
        except SeedRefused:
            return
        assert seeded.holder == actor.name


async def _blocked_or_done(actor: Actor, observer: Conn) -> None:
    """Return once the actor's step finished or its backend waits on a lock."""
    pid = actor.conn.info.backend_pid
    with trio.fail_after(10):
        while actor.busy is not None and not actor.busy.is_set():
            row = observer.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row is not None and row[0] == "Lock":
                return
            await trio.sleep(0.002)


async def _play(pg: PgCluster, dsn: str, steps: list[tuple[int, str]]) -> tuple[Log, Conn]:
    observer = pg.connect(dsn, autocommit=True)
    observer.execute("TRUNCATE instance_fence, fence_writes")
    log = Log()
    log.standings.add(seed_instance_fence(observer, "node-a"))
    actors = [Actor(name, pg.connect(dsn, autocommit=True)) for name in ("node-a", "node-b")]
    generations = itertools.count(1)
    try:
        async with trio.open_nursery() as nursery:

            async def run(actor: Actor, kind: str, done: trio.Event) -> None:
                try:
                    await trio.to_thread.run_sync(
                        _step, actor, kind, log, lambda: next(generations)
                    )
                finally:
                    done.set()

            for who, kind in [*steps, (0, "commit"), (1, "commit")]:
                actor = actors[who]
                if actor.busy is not None and not actor.busy.is_set():
                    continue  # this instance is blocked on the fence; try another step
                actor.busy = trio.Event()
                nursery.start_soon(run, actor, kind, actor.busy)
                for each in actors:
                    await _blocked_or_done(each, observer)
            with trio.fail_after(10):
                for actor in actors:
                    if actor.busy is not None:
                        await actor.busy.wait()
            # A trailing commit skipped while its instance was blocked: finish it now.
            for actor in actors:
                await trio.to_thread.run_sync(_step, actor, "commit", log, lambda: 0)
    finally:
        for actor in actors:
            actor.conn.close()
    return log, observer


KINDS = st.sampled_from(["write", "write", "commit", "rollback", "claim", "seed"])
STEPS = st.lists(
    st.tuples(st.integers(0, 1), KINDS),
    min_size=1,
    max_size=14,
)


@settings(max_examples=scaled(0.25), deadline=None)
@given(steps=STEPS)
def test_no_write_from_a_superseded_writer_ever_lands(
    pg_cluster: PgCluster, fence_dsn: str, steps: list[tuple[int, str]]
) -> None:
    log, observer = trio.run(_play, pg_cluster, fence_dsn, steps)
    with observer:
        stored = dict(writes(observer))
        fence = read_instance_fence(observer)
        rows = observer.execute("SELECT generation, holder FROM fence_writes").fetchall()
    assert fence is not None
    # Exactly the committed writes are in the database, each at its writer's generation.
    assert stored == {write_id: gen for write_id, (gen, _) in log.landed.items()}
    assert not log.dropped & stored.keys()
    # A write lands only if every claim of a higher generation committed after the
    # write's own commit was sent: once such a claim commits, the writer is fenced out.
    for write_id, (generation, commit_sent) in log.landed.items():
        for claimed, claim_done in log.claims:
            if claimed > generation:
                assert claim_done > commit_sent, (write_id, generation, claimed, log)
    assert all(generation <= fence.generation for generation in stored.values())
    # Every write landed under a standing the fence really had: never a second holder at
    # a generation (node-b believing in generation 0 writes nothing there).
    assert {FenceState(gen, holder) for gen, holder in rows} <= log.standings

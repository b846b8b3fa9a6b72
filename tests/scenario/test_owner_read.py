"""The zone source's read of a few changed owners (``owner_read``), against the private
cluster: one round trip from the trio thread gives exactly the rows a plain SELECT gives
(owners matched lowercased in ASCII, zones that exist with no rows for the owners, zones
that do not exist), the fence as read after them, and a read cut short (cancelled, or
its backend gone) leaves no connection behind to be used again. The read's statements are
prepared once per connection: its parameters are text arrays that PostgreSQL reads back
as the very names asked for, whatever they hold."""

from __future__ import annotations

import functools
import time
from typing import Any

import psycopg
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.scenario.operator_state_helpers import import_zone, run_sql
from tests.scenario.pg import PgCluster
from valis_core.dns.wire.records import RecordRow
from valis_core.fence import FenceState
from valis_core.operator_state.fence import seed_instance_fence
from valis_core.operator_state.owner_read import owner_params, read_owner_rows

WAIT = 10.0  # a bound on waiting for the server, never a timing assertion
ORG = "example.org."
NET = "example.net."
HOLDER = "node-a@loopback#0123456789abcdef"


def _rows_by_select(pg: PgCluster, dsn: str, zone: str, owners: set[str]) -> set[RecordRow]:
    with pg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT zone, owner, rtype, ttl, rdata FROM records"
            ' WHERE zone = %s AND lower(owner COLLATE "C") = ANY(%s)',
            (zone, sorted(owners)),
        ).fetchall()
    return {RecordRow(*row) for row in found}


def _insert(owner: str, rtype: str, rdata: str, zone: str = ORG) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, %s, 300, %s)",
        (zone, owner, rtype, rdata),
    )


async def test_one_read_gives_the_rows_a_select_gives_and_the_fence_after_them(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG, "www IN A 192.0.2.80\nwww IN AAAA 2001:db8::80\n")
    import_zone(pg_cluster, state_dsn, NET, "www IN A 192.0.2.81\n")
    run_sql(
        pg_cluster,
        state_dsn,
        _insert("MiXed.Example.ORG.", "TXT", '"a \\"quoted\\" \\\\ text" "two"'),
        _insert("mixed.example.org.", "A", "192.0.2.9"),
        _insert("other.example.org.", "A", "192.0.2.10"),
    )
    asked = {
        ORG: {f"www.{ORG}", f"mixed.{ORG}", f"gone.{ORG}"},
        NET: {f"nothing.{NET}"},
        "absent.example.": {"www.absent.example."},
    }
    with pg_cluster.connect(state_dsn, autocommit=True) as conn:
        read = await read_owner_rows(conn, asked, fence=False)
        assert set(read.rows[ORG]) == _rows_by_select(pg_cluster, state_dsn, ORG, asked[ORG])
        assert len(read.rows[ORG]) == 4  # www A and AAAA, both spellings of mixed
        assert read.rows[NET] == ()  # the zone exists; the owner holds nothing
        assert read.missing == ("absent.example.",)
        assert read.fence is None
        # Asked for, the fence comes with the rows; unseeded, there is none to give.
        assert (await read_owner_rows(conn, asked, fence=True)).fence is None
        standing = seed_instance_fence(conn, HOLDER)
        assert (await read_owner_rows(conn, asked, fence=True)).fence == standing
        assert standing == FenceState(0, HOLDER)
        # The connection is idle afterwards and serves the next statement as usual.
        assert conn.execute("SELECT 1").fetchone() == (1,)


async def test_a_failed_statement_is_raised_and_leaves_the_connection_usable(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG)
    with pg_cluster.connect(state_dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 1")
        with pg_cluster.connect(state_dsn) as locker:
            locker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(psycopg.errors.QueryCanceled):
                await read_owner_rows(conn, {ORG: {f"www.{ORG}"}}, fence=True)
        conn.execute("RESET statement_timeout")
        read = await read_owner_rows(conn, {ORG: {f"ns1.{ORG}"}}, fence=False)
        assert [row.rdata for row in read.rows[ORG]] == ["192.0.2.53"]


@pytest.fixture(scope="module")
def echo(pg_cluster: PgCluster) -> Any:
    """A connection that reads a parameter back as PostgreSQL parsed it."""
    with pg_cluster.connect(pg_cluster.new_database("owner_params"), autocommit=True) as conn:
        yield conn


_NAMES = st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                          max_size=16), max_size=6)


@settings(max_examples=scaled(0.3), deadline=None)
@given(st.dictionaries(st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                               max_size=16), _NAMES, max_size=4))
def test_the_parameters_are_read_back_as_the_names_asked_for(
    echo: Any, owners: dict[str, list[str]]
) -> None:
    encoding = echo.info.encoding
    zones, names, wanted = (
        None if value is None else value.decode(encoding)
        for value in owner_params(owners, encoding)
    )
    row = echo.execute(
        "SELECT %s::text[], %s::text[], %s::text[]", (zones, names, wanted)
    ).fetchone()
    pairs = [(zone, owner) for zone, held in owners.items() for owner in dict.fromkeys(held)]
    assert row == ([zone for zone, _ in pairs], [owner for _, owner in pairs], sorted(owners))


async def test_a_read_prepares_its_statements_once_per_connection(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG)
    for _ in range(2):  # a new session holds none of them: each prepares its own
        with pg_cluster.connect(state_dsn, autocommit=True) as conn:
            for _ in range(3):
                read = await read_owner_rows(conn, {ORG: {f"ns1.{ORG}"}}, fence=True)
                assert [row.rdata for row in read.rows[ORG]] == ["192.0.2.53"]
            held = conn.execute("SELECT name FROM pg_prepared_statements ORDER BY name")
            assert [name for (name,) in held] == ["valis_owner_fence", "valis_owner_rows"]


def _waiting_on_a_lock(pg: PgCluster, dsn: str) -> bool:
    with pg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


async def _until_waiting(pg: PgCluster, dsn: str) -> None:
    deadline = time.monotonic() + WAIT
    while not await trio.to_thread.run_sync(_waiting_on_a_lock, pg, dsn):
        assert time.monotonic() < deadline, "the read never waited on the lock"
        await trio.sleep(0.01)


async def test_a_cancelled_read_closes_its_connection(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG)
    conn = pg_cluster.connect(state_dsn, autocommit=True)
    with pg_cluster.connect(state_dsn) as locker:
        locker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(read_owner_rows, conn, {ORG: {f"www.{ORG}"}}, fence=False)
            )
            await _until_waiting(pg_cluster, state_dsn)
            nursery.cancel_scope.cancel()
    # Its statement's results were never taken: nothing may use it again.
    assert conn.closed
    with pytest.raises(psycopg.InterfaceError):
        await read_owner_rows(conn, {ORG: {f"www.{ORG}"}}, fence=False)


async def test_a_read_whose_backend_goes_raises_operational_error(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG)
    conn = pg_cluster.connect(state_dsn, autocommit=True)
    pid = conn.info.backend_pid
    failed: list[BaseException] = []

    async def read() -> None:
        try:
            await read_owner_rows(conn, {ORG: {f"www.{ORG}"}}, fence=True)
        except psycopg.OperationalError as exc:
            failed.append(exc)

    with pg_cluster.connect(state_dsn) as locker:
        locker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await _until_waiting(pg_cluster, state_dsn)
            with pg_cluster.connect(state_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert len(failed) == 1
    assert conn.closed

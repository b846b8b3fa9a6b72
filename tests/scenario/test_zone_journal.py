"""Every committed change of a zone lands in its journal with a serial of its own, whoever
writes it (an operator import, a node's record writes, an operator's own SQL), and the
journal gives the condensed difference an IXFR sends, or nothing once pruned."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.scenario.operator_state_helpers import import_zone, run_sql, soa_zone
from tests.scenario.pg import PgCluster, connect_as
from valis_core.dns.transfer.journal import apply, record_key
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone.build import parse_zone_text
from valis_core.dns.zone.serial import SerialNotRaised, raised_serial
from valis_core.fence import FenceState
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence
from valis_core.operator_state.journal import prune, read_difference
from valis_core.operator_state.record_writes import lock_zone, write_row_changes
from valis_core.operator_state.site_facts import JOURNAL_MAX_RECORDS_KEY
from valis_core.operator_state.zones import delete_zone, fetch_zone_rows, set_serial_policy
from valis_core.operator_state.zones import import_zone as import_verb
from valis_core.resident.journal import JournalLimits, JournalReader

ZONE = "journal.test."


def serial_of(pg: PgCluster, dsn: str) -> int:
    with pg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT valis_soa_serial(rdata) FROM records WHERE zone = %s AND rtype = 'SOA'",
            (ZONE,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def rows_of(pg: PgCluster, dsn: str) -> tuple[RecordRow, ...]:
    with pg.connect(dsn) as conn:
        return fetch_zone_rows(conn, [ZONE])[0][ZONE]


def journal(pg: PgCluster, dsn: str) -> list[tuple[Any, ...]]:
    with pg.connect(dsn) as conn:
        return conn.execute(
            "SELECT old_serial, new_serial FROM zone_journal WHERE zone = %s ORDER BY id",
            (ZONE,),
        ).fetchall()


def test_bulk_sql_without_a_serial_raise_gets_one_and_a_journal_entry(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, extra="a IN A 192.0.2.1\n", serial=10)
    before = rows_of(pg_cluster, state_dsn)
    run_sql(
        pg_cluster, state_dsn,
        ("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
         " SELECT %s, 'h' || i || '.' || %s, 'A', 300, '198.51.100.' || i"
         " FROM generate_series(1, 20) AS i", (ZONE, ZONE)),
        ("DELETE FROM records WHERE zone = %s AND owner = %s", (ZONE, "a." + ZONE)),
    )
    assert serial_of(pg_cluster, state_dsn) == 11
    assert journal(pg_cluster, state_dsn)[-1] == (10, 11)
    with pg_cluster.connect(state_dsn) as conn:
        difference = read_difference(conn, ZONE, 10, 11)
    assert difference is not None
    assert len(difference.added) == 20
    assert len(difference.removed) == 1
    after = rows_of(pg_cluster, state_dsn)
    new_soa = next(r for r in after if r.rtype == "SOA")
    assert apply(before, difference, new_soa) == {record_key(r) for r in after}


def test_each_writer_moves_the_serial_once_and_a_netted_no_change_leaves_no_entry(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, serial=5)
    with pg_cluster.connect(state_dsn) as conn:
        set_serial_policy(conn, ZONE, "increment")
        # An import that changes data under its policy: one raise, by the verb.
        import_verb(conn, parse_zone_text(soa_zone(ZONE, serial=5, extra="b IN A 192.0.2.2\n")),
                    now=0.0)
        # A node's write that raises the serial itself (as the owner terminus does).
        with conn.transaction(), conn.cursor() as cur:
            assert lock_zone(cur, ZONE)
            soa = next(r for r in fetch_zone_rows(conn, [ZONE], snapshot=False)[0][ZONE]
                       if r.rtype == "SOA")
            bumped = RecordRow(ZONE, soa.owner, "SOA", soa.ttl, soa.rdata.replace(" 6 ", " 7 "))
            write_row_changes(cur, ZONE, [soa], [bumped,
                              RecordRow(ZONE, "c." + ZONE, "A", 300, "192.0.2.3")])
        # Delete and put back the same record: no change, no entry, no raise.
        with conn.transaction():
            conn.execute("DELETE FROM records WHERE owner = %s", ("c." + ZONE,))
            conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                         " VALUES (%s, %s, 'A', 300, '192.0.2.3')", (ZONE, "c." + ZONE))
    assert journal(pg_cluster, state_dsn)[-2:] == [(5, 6), (6, 7)]
    assert serial_of(pg_cluster, state_dsn) == 7


def test_condensed_difference_spans_versions_and_pruning_cuts_it_off(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, serial=1)
    first = rows_of(pg_cluster, state_dsn)
    for i in range(4):
        run_sql(pg_cluster, state_dsn,
                ("UPDATE records SET ttl = ttl + 1 WHERE zone = %s AND rtype = 'NS'", (ZONE,)),
                ("INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES"
                 " (%s, %s, 'TXT', 60, %s)", (ZONE, f"t{i}.{ZONE}", f'"v{i}"')))
    assert serial_of(pg_cluster, state_dsn) == 5
    last = rows_of(pg_cluster, state_dsn)
    with pg_cluster.connect(state_dsn) as conn:
        difference = read_difference(conn, ZONE, 1, 5)
        assert difference is not None
        assert difference.versions == 4
        assert len(difference.added) == 5
        assert len(difference.removed) == 1
        new_soa = next(r for r in last if r.rtype == "SOA")
        assert apply(first, difference, new_soa) == {record_key(r) for r in last}
        assert read_difference(conn, ZONE, 1, 9) is None  # no such serial yet
        conn.autocommit = True
        assert prune(conn, max_records=5) == 3  # the newest entry's 5 records alone fit
        assert read_difference(conn, ZONE, 1, 5) is None
        assert read_difference(conn, ZONE, 4, 5) is not None
        assert prune(conn, max_age=0) == 1
        assert read_difference(conn, ZONE, 4, 5) is None


def test_a_deleted_zone_takes_its_journal_with_it(pg_cluster: PgCluster, state_dsn: str) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, serial=1)
    run_sql(pg_cluster, state_dsn, ("UPDATE records SET ttl = 9 WHERE zone = %s AND rtype"
                                    " = 'A'", (ZONE,)))
    run_sql(pg_cluster, state_dsn, ("DELETE FROM zones WHERE name = %s", (ZONE,)))
    with pg_cluster.connect(state_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM zone_journal").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM zone_journal_records").fetchone() == (0,)


def test_two_transactions_changing_a_zone_at_once_make_two_versions_in_a_chain(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, serial=1)
    first = rows_of(pg_cluster, state_dsn)
    with pg_cluster.connect(state_dsn) as one, pg_cluster.connect(state_dsn) as two:
        for conn, name in ((one, "one"), (two, "two")):
            conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                         " VALUES (%s, %s, 'A', 300, '192.0.2.7')", (ZONE, f"{name}.{ZONE}"))
        one.commit()
        two.commit()
    assert journal(pg_cluster, state_dsn) == [(1, 2), (2, 3)]
    last = rows_of(pg_cluster, state_dsn)
    with pg_cluster.connect(state_dsn) as conn:
        difference = read_difference(conn, ZONE, 1, 3)
    assert difference is not None
    new_soa = next(r for r in last if r.rtype == "SOA")
    assert apply(first, difference, new_soa) == {record_key(r) for r in last}


def test_the_commit_time_raise_agrees_with_the_policies_the_node_raises_by(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    cases = [(stored, policy, now)
             for stored in (1, 41, 2026120301, 4294967295, 2**31 + 5)
             for policy in (None, "keep", "increment", "unixtime", "dateserial")
             for now in (0.0, 1_790_000_000.0)]
    with pg_cluster.connect(state_dsn) as conn:
        for stored, policy, now in cases:
            row = conn.execute("SELECT valis_policy_serial(%s, %s, to_timestamp(%s))",
                               (stored, policy, now)).fetchone()
            assert row is not None
            wanted = raised_serial(policy, stored, now=now)
            assert row[0] == wanted, (stored, policy, now)


async def test_the_fence_holder_prunes_by_its_limits_and_a_superseded_node_prunes_nothing(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, serial=1)
    for i in range(3):
        run_sql(pg_cluster, state_dsn, ("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                                        " VALUES (%s, %s, 'A', 60, '192.0.2.9')",
                                        (ZONE, f"p{i}.{ZONE}")))
    with pg_cluster.connect(state_dsn) as conn:
        seed_instance_fence(conn, "node-a@here#1")
        claim_instance_fence(conn, 1, "node-a@there#2")
    limits = JournalLimits.from_facts({JOURNAL_MAX_RECORDS_KEY: "3"})
    for standing, left in ((FenceState(0, "node-a@here#1"), 3),
                           (FenceState(1, "node-a@there#2"), 1)):
        reader = JournalReader(lambda: pg_cluster.connect(state_dsn, autocommit=True), limits,
                               standing, prune_every=0.01)
        with trio.move_on_after(0.5):
            await reader.prune_forever()
        reader.close()
        assert len(journal(pg_cluster, state_dsn)) == left


def test_an_import_keeping_a_serial_not_above_the_stored_one_is_raised_and_says_so(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ZONE, serial=8)
    with pg_cluster.connect(state_dsn) as conn:
        outcome = import_verb(conn, parse_zone_text(
            soa_zone(ZONE, serial=3, extra="k IN A 192.0.2.4\n")), policy="keep", now=0.0)
    assert outcome.summary.serial == 9
    assert serial_of(pg_cluster, state_dsn) == 9
    assert journal(pg_cluster, state_dsn)[-1] == (8, 9)


# Plan nodes that read a whole relation, tuplestore or subresult each time they run: run
# more than once (under a nested loop) they make a statement's cost the product of its
# inputs. Index and TID lookups are the bounded kind a nested loop may repeat.
_WHOLE_SCANS = frozenset({
    "Seq Scan", "CTE Scan", "Named Tuplestore Scan", "Materialize", "Function Scan",
    "Subquery Scan", "WorkTable Scan", "Values Scan",
})


def _rescanned_whole(plan: dict[str, Any]) -> list[str]:
    """Each whole-relation scan in ``plan`` (an EXPLAIN ANALYZE tree) that ran again."""
    found = []
    if plan["Node Type"] in _WHOLE_SCANS and plan["Actual Loops"] > 1:
        found.append(f"{plan['Node Type']} x{plan['Actual Loops']}"
                     f" ({plan.get('Relation Name') or plan.get('CTE Name') or ''})")
    for child in plan.get("Plans", ()):
        found += _rescanned_whole(child)
    return found


def test_the_journal_nets_a_whole_zone_rewrite_without_rescanning_whatever_the_planner_picks(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """Rewriting every record of a large zone (a DELETE of all, then an INSERT of all with
    one record changed, as an import once wrote and an operator's own SQL may) is netted
    to that one change, and no statement of the journal's trigger rescans a whole input
    per row even when the planner prefers nested loops to hash and merge joins, as stale
    statistics lead it to: the trigger's cost follows its inputs, not their product."""
    import json

    import psycopg

    size = 2000
    lines = "".join(f"h{i} IN A 198.51.{i // 250}.{i % 250}\n" for i in range(size))
    import_zone(pg_cluster, state_dsn, ZONE, extra=lines, serial=20)
    changed = lines.replace("h7 IN A 198.51.0.7\n", "h7 IN A 203.0.113.7\n")
    plans: list[dict[str, Any]] = []

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1])["Plan"])

    database = psycopg.conninfo.conninfo_to_dict(state_dsn)["dbname"]
    superuser = pg_cluster.cluster.dsn("postgres", str(database))
    with connect_as("postgres", superuser) as conn:
        conn.add_notice_handler(collect)
        conn.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
                        "auto_explain.log_nested_statements = on",
                        "auto_explain.log_format = json", "auto_explain.log_level = notice",
                        "enable_hashjoin = off", "enable_mergejoin = off"):
            conn.execute(f"SET {setting}")
        rows = parse_zone_text(soa_zone(ZONE, serial=21, extra=changed))
        with conn.transaction():
            conn.execute("DELETE FROM records WHERE zone = %s", (ZONE,))
            conn.execute(
                "INSERT INTO records (zone, owner, rtype, ttl, rdata) SELECT %s, *"
                " FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[])",
                (ZONE, [r.owner for r in rows], [r.rtype for r in rows],
                 [r.ttl for r in rows], [r.rdata for r in rows]),
            )
    assert any("zone_journal_records" in json.dumps(plan) for plan in plans), (
        "auto_explain reported none of the journal trigger's statements")
    assert [scan for plan in plans for scan in _rescanned_whole(plan)] == []
    with pg_cluster.connect(state_dsn) as conn:
        difference = read_difference(conn, ZONE, 20, 21)
    assert difference is not None
    assert {(r.owner, r.rdata) for r in difference.added if r.rtype == "A"} == {
        ("h7." + ZONE, "203.0.113.7")}
    assert {(r.owner, r.rdata) for r in difference.removed if r.rtype == "A"} == {
        ("h7." + ZONE, "198.51.0.7")}


def test_a_zone_deleted_and_imported_again_never_takes_its_serial_back(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """Issue 25 item 6: the zone's last serial outlives its deletion. Its file's lower
    serial is refused as for a stored zone (secondaries would ignore it), a serial
    policy raises it above the last one, and a higher file serial is taken."""
    import_zone(pg_cluster, state_dsn, ZONE, serial=40)
    lower = parse_zone_text(soa_zone(ZONE, serial=7, extra="b IN A 192.0.2.2\n"))
    with pg_cluster.connect(state_dsn) as conn:
        assert delete_zone(conn, ZONE)
        with pytest.raises(SerialNotRaised, match="serial 7 is lower than the stored serial 40"):
            import_verb(conn, lower, now=0.0)
        outcome = import_verb(conn, lower, policy="increment", now=0.0)
    assert outcome.summary.serial == 41
    assert serial_of(pg_cluster, state_dsn) == 41
    with pg_cluster.connect(state_dsn) as conn:
        assert delete_zone(conn, ZONE)
        outcome = import_verb(conn, lower, policy="keep", now=0.0)
    assert serial_of(pg_cluster, state_dsn) == 42
    with pg_cluster.connect(state_dsn) as conn:
        assert delete_zone(conn, ZONE)
        import_verb(conn, parse_zone_text(soa_zone(ZONE, serial=50)), now=0.0)
    assert serial_of(pg_cluster, state_dsn) == 50

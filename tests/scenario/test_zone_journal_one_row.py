"""Migration 0014's one-row journal path and the seal journalling its own serial raise
leave the journal and the records exactly as migration 0013 left them: the same
transactions run against a database at 0013 and one at 0013 that holds zones and journal
rows and is then upgraded by ``migrate`` give the same state after each. The notes may
differ (since 0023 a journalled change is noted by its seal, not by each statement), but
on both every owner whose rows a transaction changed is named, to zone sources of every
version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.scenario.operator_state_helpers import migrate_through, soa_zone
from tests.scenario.pg import PgCluster, notes_so_far
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zones import replace_zone

ONE = "one.test."
TWO = "two.test."
EXTRA = "a IN A 192.0.2.1\nb IN A 192.0.2.2\nb IN TXT \"b\"\nc IN AAAA 2001:db8::c\n"
CHANNELS = ("valis_zone_changed", "valis_zone_owners_changed")

Statement = tuple[str, tuple[Any, ...]]


def update(owner: str, rtype: str, rdata: str, to: str, zone: str = ONE) -> Statement:
    return ("UPDATE records SET rdata = %s WHERE zone = %s AND owner = %s AND rtype = %s"
            " AND rdata = %s", (to, zone, owner + zone, rtype, rdata))


def insert(owner: str, rtype: str, rdata: str, zone: str = ONE, ttl: int = 300) -> Statement:
    return ("INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, %s, %s, %s)",
            (zone, owner + zone, rtype, ttl, rdata))


def delete(owner: str, zone: str = ONE) -> Statement:
    return ("DELETE FROM records WHERE zone = %s AND owner = %s", (zone, owner + zone))


def soa(serial: int, refresh: int = 7200, zone: str = ONE) -> Statement:
    return ("UPDATE records SET rdata = %s WHERE zone = %s AND rtype = 'SOA'",
            (f"ns1.{zone} hostmaster.{zone} {serial} {refresh} 3600 1209600 300", zone))


#: Transactions, each a list of statements, run in order on both databases.
TRANSACTIONS: tuple[tuple[Statement, ...], ...] = (
    (update("a.", "A", "192.0.2.1", "192.0.2.11"),),  # one row each side
    (insert("d.", "A", "192.0.2.4"),),
    (delete("c."),),
    # The one-row path taken, then the same owner changed again: back (nets to nothing,
    # no entry, no raise) and on (one removal, one addition).
    (update("a.", "A", "192.0.2.11", "192.0.2.12"), update("a.", "A", "192.0.2.12", "192.0.2.11")),
    (update("a.", "A", "192.0.2.11", "192.0.2.12"), update("a.", "A", "192.0.2.12", "192.0.2.13")),
    (delete("d."), insert("d.", "A", "192.0.2.4")),
    (insert("e.", "A", "192.0.2.5"), delete("e.")),
    (insert("E.", "A", "192.0.2.5"),
     ("DELETE FROM records WHERE lower(owner) = %s", ("e." + ONE,)),
     insert("e.", "A", "192.0.2.5")),
    # Multi-row statements, alone and after or before one-row ones on the same rows.
    (("UPDATE records SET ttl = ttl + 1 WHERE zone = %s AND owner = %s", (ONE, "b." + ONE)),),
    (update("b.", "TXT", '"b"', '"b2"'),
     ("UPDATE records SET ttl = ttl - 1 WHERE zone = %s AND owner = %s", (ONE, "b." + ONE)),
     update("b.", "TXT", '"b2"', '"b"')),
    (("INSERT INTO records (zone, owner, rtype, ttl, rdata) SELECT %s, 'm' || i || '.' || %s,"
      " 'A', 300, '198.51.100.' || i FROM generate_series(1, 3) AS i", (ONE, ONE)),
     delete("m2.")),
    (update("m1.", "A", "198.51.100.1", "198.51.100.9"),
     ("DELETE FROM records WHERE zone = %s AND owner LIKE 'm%%'", (ONE,))),
    # One statement over both zones, and one transaction with a one-row change in each.
    (("UPDATE records SET ttl = 600 WHERE owner IN (%s, %s)", ("a." + ONE, "a." + TWO)),),
    (update("a.", "A", "192.0.2.1", "192.0.2.21", zone=TWO), insert("f.", "A", "192.0.2.6")),
    # An owner's spelling changed only: the journal nets it away.
    (("UPDATE records SET owner = %s WHERE zone = %s AND owner = %s",
      ("F." + ONE, ONE, "f." + ONE)),),
    # The SOA: raised by the writer, changed without a raise (the seal raises it and nets
    # the SOA the writer added), lowered (the seal raises past the serial before), and
    # changed beside another record.
    (soa(30),),
    (soa(30, refresh=7201),),
    (soa(5),),
    (soa(40, refresh=7202), update("a.", "A", "192.0.2.13", "192.0.2.14")),
    (update("a.", "A", "192.0.2.14", "192.0.2.15"), soa(1, refresh=7203)),
    # A change whose journal entry is deleted before its seal: still named (the zone).
    (update("a.", "A", "192.0.2.15", "192.0.2.16"),
     ("DELETE FROM zone_journal WHERE new_serial IS NULL", ())),
    # A change, then its zone deleted in the same transaction; then the zone again.
    (update("a.", "A", "192.0.2.21", "192.0.2.22", zone=TWO),
     ("DELETE FROM zones WHERE name = %s", (TWO,))),
    (("INSERT INTO zones (name) VALUES (%s)", (TWO,)),
     ("INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, 'SOA', 300, %s)",
      (TWO, TWO, f"ns1.{TWO} hostmaster.{TWO} 50 7200 3600 1209600 300"))),
    (insert("g.", "A", "192.0.2.7", zone=TWO),),
)


def state(conn: Any) -> tuple[list[Any], list[Any]]:
    """The records and the journal (each entry's zone, serials and rows), ids left out."""
    records = conn.execute(
        "SELECT zone, owner, rtype, ttl, rdata FROM records ORDER BY 1, 2, 3, 4, 5"
    ).fetchall()
    journal = conn.execute(
        "SELECT j.zone, j.old_serial, j.new_serial, ARRAY(SELECT ROW(r.added, r.owner, r.rtype,"
        " r.ttl, r.rdata)::text FROM zone_journal_records r WHERE r.entry = j.id ORDER BY 1)"
        " FROM zone_journal j ORDER BY j.id"
    ).fetchall()
    return records, journal


@pytest.fixture
def databases(pg_cluster: PgCluster) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Two databases holding the same zones and journal at migration 0013, the second
    then upgraded by ``migrate``; for each a connection and a listener of both channels."""
    opened = []
    for upgrade in (False, True):
        dsn = pg_cluster.new_database("onerow")
        conn = pg_cluster.connect(dsn, autocommit=True)
        opened.append(conn)
        migrate_through(conn, 13)
        for zone in (ONE, TWO):
            with conn.transaction():
                replace_zone(conn, parse_zone_text(soa_zone(zone, serial=10, extra=EXTRA)))
        with conn.transaction():
            conn.execute(*update("b.", "A", "192.0.2.2", "192.0.2.12"))
        if upgrade:
            assert migrate(conn)[0] == 14  # 0014 and every migration after it
        listening = pg_cluster.connect(dsn, autocommit=True)
        opened.append(listening)
        for channel in CHANNELS:
            listening.execute(f"LISTEN {channel}")
    try:
        yield opened[0], opened[1], opened[2], opened[3]
    finally:
        for conn in opened:
            conn.close()


def notes(listening: Any, writer: Any) -> list[tuple[str, str]]:
    """The notes of the transactions since the last call."""
    return [(n.channel, n.payload) for n in notes_so_far(listening, writer)]


def changed_owners(before: list[Any], after: list[Any]) -> set[tuple[str, str]]:
    """The (zone, owner) whose rows differ, owners compared as the journal compares them
    (ASCII-lowercased: a change of spelling alone nets away)."""
    def held(records: list[Any]) -> dict[tuple[str, str], list[Any]]:
        out: dict[tuple[str, str], list[Any]] = {}
        for zone, owner, rtype, ttl, rdata in records:
            out.setdefault((zone, owner.lower()), []).append((rtype, ttl, rdata))
        return {key: sorted(rows) for key, rows in out.items()}

    old, new = held(before), held(after)
    return {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}


def assert_named(heard: list[tuple[str, str]], changed: set[tuple[str, str]]) -> None:
    """Every changed owner is named on valis_zone_owners_changed (its zone whole, or
    everything, names it too), and its zone on valis_zone_changed."""
    payloads = {payload for channel, payload in heard if channel == CHANNELS[1]}
    legacy = {payload for channel, payload in heard if channel == CHANNELS[0]}
    named = set()
    for payload in payloads:
        zone, *owners = payload.split("\n")
        named |= {(zone, owner) for owner in owners} if owners else {(zone, "*")}
    for zone, owner in changed:
        assert "" in payloads or {(zone, owner), (zone, "*")} & named, (zone, owner, heard)
        assert "" in legacy or zone in legacy, (zone, heard)


def test_the_journal_and_records_are_those_of_migration_0013_and_changes_are_named(
    databases: tuple[Any, Any, Any, Any],
) -> None:
    old, old_listening, new, new_listening = databases
    assert state(new) == state(old)
    for transaction in TRANSACTIONS:
        records, _ = state(new)
        for conn in (old, new):
            with conn.transaction():
                for sql, params in transaction:
                    conn.execute(sql, params)
        assert state(new) == state(old), transaction
        changed = changed_owners(records, state(new)[0])
        assert_named(notes(new_listening, new), changed)
        assert_named(notes(old_listening, old), changed)
    _, journal = state(new)
    assert len(journal) >= 15  # the changes that did not net to nothing made entries
    assert all(entry[2] is not None for entry in journal)


OWNERS = ("a.", "A.", "b.", "x.", "y.")
ADDRESSES = ("192.0.2.1", "192.0.2.2", "192.0.2.3")
statements = st.one_of(
    st.builds(insert, st.sampled_from(OWNERS), st.just("A"), st.sampled_from(ADDRESSES),
              st.sampled_from((ONE, TWO)), st.sampled_from((300, 600))),
    st.builds(delete, st.sampled_from(OWNERS),
              st.sampled_from((ONE, TWO))),
    st.builds(lambda owner, rdata, to: update(owner, "A", rdata, to), st.sampled_from(OWNERS),
              st.sampled_from(ADDRESSES), st.sampled_from(ADDRESSES)),
    st.builds(lambda owner, ttl: ("UPDATE records SET ttl = %s WHERE lower(owner) = %s",
                                  (ttl, owner.lower() + ONE)),
              st.sampled_from(OWNERS), st.sampled_from((300, 600))),
    st.builds(lambda ttl: ("UPDATE records SET ttl = %s WHERE rtype = 'A'", (ttl,)),
              st.sampled_from((300, 600))),
    st.builds(soa, st.integers(1, 60), st.sampled_from((7200, 7201))),
)


@settings(max_examples=scaled(0.15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # state carries on
@given(st.lists(st.lists(statements, min_size=1, max_size=4), min_size=1, max_size=4))
def test_any_transactions_journal_as_under_migration_0013(
    databases: tuple[Any, Any, Any, Any], transactions: list[list[Statement]]
) -> None:
    """Random statements, one-row and many-row, alone or several in a transaction (a
    statement that fails, say on a duplicate, rolls back to its savepoint on both)."""
    old, old_listening, new, new_listening = databases
    for transaction in transactions:
        records, _ = state(new)
        failed: dict[int, list[bool]] = {}
        for conn in (old, new):
            with conn.transaction():
                for sql, params in transaction:
                    try:
                        with conn.transaction():
                            conn.execute(sql, params)
                        failed.setdefault(id(conn), []).append(False)
                    except psycopg.errors.UniqueViolation:
                        failed.setdefault(id(conn), []).append(True)
        assert failed[id(new)] == failed[id(old)]
        assert state(new) == state(old), transaction
        changed = changed_owners(records, state(new)[0])
        assert_named(notes(new_listening, new), changed)
        assert_named(notes(old_listening, old), changed)

"""Migration 0019 rewrote the helper functions that every change runs (the records'
CHECK constraints, the seal's serial arithmetic) so that PostgreSQL inlines them, and
0020 made three of them PL/pgSQL, compiled once per session. Each must answer as its
0018 body did: the same inputs are given to a database migrated through 0018 and to one
migrated to the end, in one query each, and the answers compared.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.scenario.operator_state_helpers import migrate_through
from tests.scenario.pg import PgCluster
from valis_core.operator_state.schema import migrate

#: Each function, the SQL types of its arguments.
FUNCTIONS = {
    "valis_servable_rtype": ("text",),
    "valis_name_in_zone": ("text", "text"),
    "valis_serial_gt": ("bigint", "bigint"),
    "valis_next_serial": ("bigint",),
    "valis_soa_serial": ("text",),
    "valis_policy_serial": ("bigint", "text", "timestamptz"),
}

SERIALS = (0, 1, 2, 41, 2147483646, 2147483647, 2147483648, 2147483649, 4294967294,
           4294967295, 2026120401, 1780000000)


@pytest.fixture(scope="module")
def databases(pg_cluster: PgCluster) -> Iterator[tuple[Any, Any]]:
    """A connection to a database at 0018 and one to a database at 0018 then migrated."""
    opened = []
    for upgrade in (False, True):
        conn = pg_cluster.connect(pg_cluster.new_database("cost19"), autocommit=True)
        opened.append(conn)
        migrate_through(conn, 18)
        if upgrade:
            assert migrate(conn)[0] == 19
    try:
        yield opened[0], opened[1]
    finally:
        for conn in opened:
            conn.close()


def answers(conn: Any, function: str, inputs: list[tuple[Any, ...]]) -> list[Any]:
    """``function`` of each input, in order, from one query."""
    types = FUNCTIONS[function]
    columns = ", ".join(f"%s::{t}[]" for t in types)
    arguments = ", ".join(f"a{i}" for i in range(len(types)))
    rows = conn.execute(
        f"SELECT {function}({arguments}) FROM unnest({columns}) WITH ORDINALITY"
        f" AS u({arguments}, n) ORDER BY n",
        [list(column) for column in zip(*inputs, strict=True)],
    ).fetchall()
    return [row[0] for row in rows]


def same(databases: tuple[Any, Any], function: str, inputs: list[tuple[Any, ...]]) -> None:
    before, after = databases
    assert answers(after, function, inputs) == answers(before, function, inputs), function


def test_the_serial_arithmetic_answers_as_before(databases: tuple[Any, Any]) -> None:
    pairs = [(a, b) for a in SERIALS for b in SERIALS]
    same(databases, "valis_serial_gt", [*pairs, (None, 1), (1, None), (None, None)])
    same(databases, "valis_next_serial", [(s,) for s in (*SERIALS, None)])
    moments = [datetime(2026, 12, 4, 23, 59, 59, tzinfo=UTC),
               datetime(2026, 12, 5, 0, 0, 0, tzinfo=UTC),
               datetime(2106, 2, 7, 6, 28, 16, tzinfo=UTC)]
    same(databases, "valis_policy_serial",
         [(stored, policy, at) for stored in (*SERIALS, None)
          for policy in ("increment", "unixtime", "dateserial", "keep", None)
          for at in moments])


def test_the_record_checks_answer_as_before(databases: tuple[Any, Any]) -> None:
    types = ["A", "a", "AAAA", "NSAP-PTR", "NSAP", "TYPE0", "TYPE1", "TYPE41", "TYPE127",
             "TYPE128", "TYPE255", "TYPE256", "TYPE65535", "TYPE65536", "TYPE99999",
             "TYPE000001", "TYPE", "ANY", "OPT", "AXFR", " A", "A ", "A|NS", "", "DLV", None]
    same(databases, "valis_servable_rtype", [(t,) for t in types])
    names = ["example.org.", "www.example.org.", "WWW.Example.ORG.", "wwwexample.org.",
             "org.", ".", "x.y.z.", "", None]
    # Only valis_name_in_zone(NULL, '.') changed (NULL, now true; a CHECK passes both).
    same(databases, "valis_name_in_zone", [(owner, zone) for owner in names for zone in names
                                           if (owner, zone) != (None, ".")])


def test_the_soa_serial_field_reads_as_before(databases: tuple[Any, Any]) -> None:
    rdatas = ["ns1.example. hostmaster.example. 2026120401 7200 3600 1209600 300",
              "  ns1. h. 7 1 1 1 1  ", "ns1.\th.\t7 1 1 1 1", "\tns1. h. 7 1 1 1 1",
              "ns1. h. 4294967295 1 1 1 1", "ns1. h. 99999999999 1 1 1 1", "ns1. h. -1 1",
              "ns1. h. 1e3 1", "ns1. h.", "", None]
    same(databases, "valis_soa_serial", [(r,) for r in rdatas])


@settings(max_examples=scaled(0.2), deadline=None)
@given(st.lists(st.tuples(st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                                  max_size=24),
                          st.text("abcAB.-\\", max_size=12)), min_size=1, max_size=50))
def test_any_text_is_judged_as_before(databases: tuple[Any, Any],
                                      pairs: list[tuple[str, str]]) -> None:
    same(databases, "valis_servable_rtype", [(a,) for a, _ in pairs])
    same(databases, "valis_soa_serial", [(a,) for a, _ in pairs])
    same(databases, "valis_name_in_zone", [(a, b) for a, b in pairs])

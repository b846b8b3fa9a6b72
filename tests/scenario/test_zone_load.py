"""A boot reads every served zone in one COPY and builds each zone once as the rows stream
in (``operator_state.zone_load``): the zones it builds are the ones the rows build one by
one, whatever the rows hold (escapes, tabs and newlines that COPY's text format writes
escaped, names that are not plain); a zone it cannot serve is refused alone; and a load
tells how it goes."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import trio

from tests.conftest import skip_here_fail_in_ci
from tests.scenario.operator_state_helpers import import_zone, run_sql, zone_source
from tests.scenario.pg import PgCluster
from valis_core.dns.zone import ServedZone, ZoneIndex, rows
from valis_core.operator_state import zone_load
from valis_core.operator_state.zone_load import build_zones
from valis_core.operator_state.zones import load_zone_rows

PLAIN = "plain.example."
ODD = "odd.example."
HOSTS = 25_000
"""More than two batches of rows in the plain zone."""


def _fields(zone: ServedZone) -> tuple[object, ...]:
    return (zone.origin, zone.apex, sorted(zone.nodes.items()), zone.empty_nonterminals,
            zone.cuts, zone.dnames, zone.soa, zone.negative_ttl,
            sorted(zone.children.items()), zone.wildcards, zone.record_count)


@pytest.fixture
def two_zones(pg_cluster: PgCluster, state_dsn: str) -> str:
    """A plain zone of ``HOSTS`` addresses, and a zone whose rows hold what COPY's text
    format escapes (backslashes, a tab, a newline) and names that are not plain."""
    hosts = "".join(f"h{i} 300 IN A 10.0.{i >> 8 & 255}.{i & 255}\n" for i in range(HOSTS))
    import_zone(pg_cluster, state_dsn, PLAIN, hosts + "Mixed.Case 60 IN MX 10 h1\n")
    import_zone(pg_cluster, state_dsn, ODD, (
        'txt IN TXT "back\\\\slash" "quote\\"d" "tab\\009here" "line\\010break"\n'
        "dot\\.ted IN A 192.0.2.1\n"
        "\\195\\169t\\195\\169 IN AAAA 2001:db8::1\n"
        "_sip._tcp IN SRV 0 5 5060 sip\n"
        "ns2 IN TYPE65280 \\# 2 abcd\n"
    ))
    insert = "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, %s, 300, %s)"
    odd_rows = (
        (f"tab\there.{ODD}", "A", "192.0.2.9"),
        (f"new\nline\r.{ODD}", "A", "192.0.2.10"),
        (f"txt.{ODD}", "TXT", '"a\tb" back\\slash'),
    )
    run_sql(pg_cluster, state_dsn, *((insert, (ODD, *row)) for row in odd_rows))
    return state_dsn


def _bulk(pg_cluster: PgCluster, dsn: str, zones: list[str]) -> zone_load.BuiltZones:
    with pg_cluster.connect(dsn, autocommit=True) as conn:
        return build_zones(conn, zones)


def test_the_zones_built_from_the_stream_are_the_ones_the_rows_build(
    pg_cluster: PgCluster, two_zones: str
) -> None:
    loaded = _bulk(pg_cluster, two_zones, [ODD, PLAIN])
    with pg_cluster.connect(two_zones) as conn:
        rows = load_zone_rows(conn, [ODD, PLAIN])
    assert list(loaded.built) == [ODD, PLAIN]
    for zone, index in loaded.built.items():
        (built,) = index.served()
        (expected,) = ZoneIndex.from_records(rows[zone]).served()
        assert _fields(built) == _fields(expected)
    assert loaded.built[PLAIN].record_count == HOSTS + 4
    assert loaded.plain == {PLAIN}
    assert loaded.refused == {}
    assert loaded.missing == ()


MIXED = "mixed.example."


@pytest.fixture
def three_zones(pg_cluster: PgCluster, two_zones: str) -> str:
    """``two_zones`` and a zone of every type the compiled reader reads, owners holding
    several records, delegations, wildcards, and rows it hands back (AAAA, TXT, a name
    not written plainly, numbers written with a leading zero)."""
    lines = [
        "@ IN NS ns2.example.net.",
        "@ 60 IN MX 10 mail",
        "Mail IN A 192.0.2.25",
        "mail IN AAAA 2001:db8::25",
        "mail IN TXT \"v=spf1 -all\"",
        "*.wild IN A 192.0.2.42",
        "sub IN NS ns.sub",
        "ns.sub IN A 192.0.2.53",
        "_sip._tcp IN SRV 0 5 5060 mail",
        "alias IN CNAME mail",
        "1.2 IN PTR host.example.net.",
        "e\\.f IN A 192.0.2.99",
    ]
    lines += [f"h{i}.deep.er IN A 10.1.{i >> 8 & 255}.{i & 255}" for i in range(300)]
    lines += [f"h{i}.deep.er IN MX {i} mx{i}.example.net." for i in range(300)]
    import_zone(pg_cluster, two_zones, MIXED, "\n".join(lines) + "\n")
    insert = "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, %s, 300, %s)"
    run_sql(pg_cluster, two_zones, *(
        (insert, (MIXED, owner, rtype, rdata)) for owner, rtype, rdata in (
            (f"Odd-Case.{MIXED.upper()}", "A", "192.0.2.7"),
            (f"other-case.{MIXED}", "CNAME", "x.example."),
            (f"srv.{MIXED}", "SRV", "1 2 3 t.example."),
            (f"srv.{MIXED}", "SRV", "01 2 3 t.example."),
        )))
    return two_zones


@pytest.mark.parametrize("zones", [[ODD, PLAIN, MIXED], [MIXED]], ids=["three", "one"])
@pytest.mark.parametrize("way", ["libpq", "lines"])
def test_the_compiled_way_builds_what_the_python_way_builds(
    pg_cluster: PgCluster,
    three_zones: str,
    way: str,
    zones: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Straight from libpq (or, where the libpq psycopg uses cannot be told, line by line
    from psycopg), the compiled reader builds the zones, refusals and all, that the
    Python way builds from the same rows (one zone's rows leave the zone out)."""
    if not rows.COMPILED:
        skip_here_fail_in_ci("this test needs the compiled row reader (make venv builds it)")
    assert zone_load.compiled_libpq() is not None  # the compiled reader reads from libpq here
    if way == "lines":
        monkeypatch.setattr(zone_load, "compiled_libpq", lambda: None)
    with pg_cluster.connect(three_zones, autocommit=True) as conn:
        compiled = build_zones(conn, zones)
        python = build_zones(conn, zones, compiled=False)
    assert list(compiled.built) == list(python.built) == zones
    for zone in zones:
        (built,) = compiled.built[zone].served()
        (expected,) = python.built[zone].served()
        assert _fields(built) == _fields(expected)
    assert compiled.built[MIXED].record_count == 618
    assert compiled.plain == python.plain == {PLAIN} & set(zones)
    run_sql(pg_cluster, three_zones, (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, 'A', 300, %s)",
        (MIXED, f"h1.deep.er.{MIXED}", "10.0.0.01")))
    with pg_cluster.connect(three_zones, autocommit=True) as conn:
        compiled = build_zones(conn, zones)
        python = build_zones(conn, zones, compiled=False)
    assert list(compiled.built) == list(python.built) == [z for z in zones if z != MIXED]
    assert str(compiled.refused[MIXED]) == str(python.refused[MIXED])
    assert "cannot parse A rdata '10.0.0.01'" in str(compiled.refused[MIXED])


def test_a_zone_that_cannot_be_served_is_refused_alone(
    pg_cluster: PgCluster, two_zones: str
) -> None:
    run_sql(pg_cluster, two_zones, (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) "
        "VALUES (%s, %s, 'A', 300, 'not an address')", (ODD, f"bad.{ODD}"),
    ))
    loaded = _bulk(pg_cluster, two_zones, [ODD, PLAIN, "absent.example."])
    assert list(loaded.built) == [PLAIN]
    assert list(loaded.refused) == [ODD]
    assert "cannot parse A rdata 'not an address'" in str(loaded.refused[ODD])
    assert loaded.missing == ("absent.example.",)


def test_a_zone_held_without_records_is_refused_as_empty(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    run_sql(pg_cluster, state_dsn, ("INSERT INTO zones (name) VALUES (%s)", ("empty.example.",)))
    loaded = _bulk(pg_cluster, state_dsn, ["empty.example."])
    assert str(loaded.refused["empty.example."]).endswith(
        "the zone has no records; import it again")


class _Ticks:
    """A clock two seconds further on at every reading: every report is told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 2.0
        return self.now


@pytest.fixture
def zone_source_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="valis.zone_source"):
        yield caplog


async def test_a_load_tells_how_far_it_got_as_it_goes(
    pg_cluster: PgCluster, two_zones: str, zone_source_log: pytest.LogCaptureFixture
) -> None:
    told: list[str] = []
    source = zone_source(pg_cluster, two_zones, [PLAIN, ODD], ticks=_Ticks())
    try:
        with trio.fail_after(60):
            index = await source.load(progress=told.append)
    finally:
        source.close()
    assert index.zones == (ODD, PLAIN)
    records = HOSTS + 4 + 11
    assert told[0] == "loading zones: 0 of 2, 10000 records"
    assert told[-2:] == [f"loading zones: 1 of 2, {records} records",
                         f"loading zones: 2 of 2, {records} records"]
    logged = [r.getMessage() for r in zone_source_log.records]
    assert [f"zone source: {text}" for text in told] == [
        line for line in logged if "loading zones" in line]

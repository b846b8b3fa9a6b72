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

from tests.scenario.operator_state_helpers import import_zone, run_sql, zone_source
from tests.scenario.pg import PgCluster
from valis_core.dns.zone import ServedZone, ZoneIndex
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

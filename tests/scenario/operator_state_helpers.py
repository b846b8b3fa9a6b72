"""Small helpers shared by the operator-state scenario tests."""

from __future__ import annotations

from typing import Any

import dns.message
import dns.rdatatype
import dns.rrset

from tests.dns_ask import ask
from tests.scenario.pg import PgCluster
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.schema import shipped_migrations
from valis_core.operator_state.zone_source import PgZoneSource
from valis_core.operator_state.zones import replace_zone

EXAMPLE_ZONE = "example.test."
EXAMPLE_WWW = "www IN A 192.0.2.80\n"
"""The zone most scenarios serve, and the one host record they ask for."""


def answer_texts(index: ZoneIndex, name: str, rtype: str) -> set[str]:
    """The rdata (presentation form) of the answer section for one query."""
    found: set[str] = set()
    for rrset in ask(index, name, rtype).answer:
        assert isinstance(rrset, dns.rrset.RRset)
        if rrset.rdtype == dns.rdatatype.from_text(rtype):
            found.update(rdata.to_text() for rdata in rrset)
    return found


def soa_zone(zone: str, *, serial: int = 1, extra: str = "") -> str:
    """A minimal servable master file for ``zone`` plus ``extra`` lines."""
    return (
        f"$ORIGIN {zone}\n$TTL 300\n"
        f"@ IN SOA ns1.{zone} hostmaster.{zone} {serial} 7200 3600 1209600 300\n"
        f"@ IN NS ns1.{zone}\nns1 IN A 192.0.2.53\n{extra}"
    )


def zone_source(pg: PgCluster, dsn: str, zones: list[str], **options: Any) -> PgZoneSource:
    """A zone source over the private cluster, connecting as the cluster's own account."""
    return PgZoneSource(lambda: pg.connect(dsn, autocommit=True), zones, **options)


def import_zone(pg: PgCluster, dsn: str, zone: str, extra: str = "", serial: int = 1) -> None:
    """Store ``soa_zone(zone)`` (plus ``extra`` lines) in operator state, as an import."""
    with pg.connect(dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone(zone, serial=serial, extra=extra)))


def run_sql(pg: PgCluster, dsn: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run the statements in one transaction, as the cluster's own account."""
    with pg.connect(dsn) as conn, conn.transaction():
        for sql, params in statements:
            conn.execute(sql, params)


def addresses(response: dns.message.Message) -> set[str]:
    """The rdata (presentation form) of every record in the answer section."""
    return {rdata.to_text() for rrset in response.answer for rdata in rrset}


def migrate_through(conn: Any, version: int) -> None:
    """Apply the shipped migrations up to ``version`` and record them as ``migrate`` does,
    so a later ``migrate`` upgrades the database from there (an existing node's)."""
    with conn.transaction():
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " sha256 text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in shipped_migrations():
            if migration.version <= version:
                conn.execute(migration.sql.encode("utf-8"))
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, sha256) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )

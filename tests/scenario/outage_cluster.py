"""A PostgreSQL cluster of the tests' own, which they may stop and start without disturbing
any other test (``outage_cluster``; ``running`` starts it again after the test whatever
happened to it), a database on it serving ``ZONE`` (``zone_dsn``), and what a resident
answers for ``WWW`` (``answers``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import require_root
from tests.dns_ask import over_udp, rdata_texts
from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import PgCluster, private_cluster
from tests.scenario.resident_harness import Resident
from valis_core.dns import parse_zone_text
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zones import replace_zone

ZONE = "example.test."
WWW = "www.example.test."


@pytest.fixture(scope="module")
def outage_cluster() -> Iterator[PgCluster]:
    """A cluster these tests may stop and start without disturbing any other test."""
    require_root()
    with private_cluster() as cluster:
        yield cluster


@pytest.fixture
def zone_dsn(outage_cluster: PgCluster) -> str:
    dsn = outage_cluster.new_database("outage")
    with outage_cluster.connect(dsn) as conn:
        migrate(conn)
        replace_zone(conn, parse_zone_text(soa_zone(ZONE, extra="www IN A 192.0.2.80\n"), ZONE))
    return dsn


@pytest.fixture
def running(outage_cluster: PgCluster) -> Iterator[PgCluster]:
    """The cluster, started again after the test whatever happened to it."""
    try:
        yield outage_cluster
    finally:
        outage_cluster.cluster.start()


def answers(resident: Resident, name: str = WWW, *, timeout: float = 5.0) -> set[str]:
    """The rdata of ``resident``'s answer to ``name``/A over UDP."""
    assert resident.port is not None
    return rdata_texts(over_udp(resident.port, name, "A", timeout=timeout))

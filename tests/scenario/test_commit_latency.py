"""Commit → wire latency watched in production (issue 31): a record changed in the
operator-state database is answered by the running resident, and the fabric's
``/metrics`` then counts that change in ``valis_commit_to_wire_seconds`` (its journal
entry's commit time to the swap that served it), a histogram whose sum is not
negative and whose buckets never decrease. Real PostgreSQL, the resident as the
launcher runs it, dnspython on the wire; no timed assertion (``benchmarks/`` measures
the latency itself)."""

from __future__ import annotations

import re

from tests.scenario.bounded_wait import until
from tests.scenario.operator_state_helpers import addresses
from tests.scenario.pg import PgCluster
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts

NAME = "valis_commit_to_wire_seconds"


def histogram(resident: Resident) -> tuple[list[tuple[str, float]], float, float]:
    """The histogram's buckets (bound, cumulative count), sum and count, from /metrics."""
    code, body = resident.fabric_get("/metrics")
    assert code == 200
    text = body.decode()
    assert f"# TYPE {NAME} histogram" in text
    buckets = [(le, float(value)) for le, value in
               re.findall(rf'^{NAME}_bucket{{le="([^"]+)"}} (\S+)$', text, re.MULTILINE)]
    (total,) = re.findall(rf"^{NAME}_sum (\S+)$", text, re.MULTILINE)
    (count,) = re.findall(rf"^{NAME}_count (\S+)$", text, re.MULTILINE)
    return buckets, float(total), float(count)


def test_a_change_in_the_database_is_counted_in_the_commit_to_wire_histogram(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    buckets, _, before = histogram(resident)
    assert buckets[0][0] == "0.0005"
    assert buckets[-1][0] == "+Inf"
    assert buckets[-2][0] == "10"
    with pg_cluster.connect(zone_dsn) as conn:
        conn.execute("UPDATE records SET rdata = '192.0.2.81' WHERE owner = 'www.example.test.'"
                     " AND rtype = 'A'")
        conn.commit()
    until(lambda: addresses(resident.ask("www.example.test.")) == {"192.0.2.81"},
          "the change answered")
    until(lambda: histogram(resident)[2] > before, f"{NAME}_count rising")
    buckets, total, count = histogram(resident)
    assert count >= before + 1
    assert total >= 0
    counts = [value for _, value in buckets]
    assert counts == sorted(counts)
    assert counts[-1] == count

"""What the operator sees while the database is down under a serving node: one line when
it goes, a short line per retry, one when it is back; ``/status`` and ``valis status`` say
the last good snapshot is served and since when (``valis status`` exits 1 for alerting,
``valis status --serving`` 0 for a load balancer: the node answers); the metrics say the
database is down."""

from __future__ import annotations

from tests.scenario.bounded_wait import until
from tests.scenario.outage_cluster import (  # noqa: F401 (fixtures)
    answers,
    outage_cluster,
    running,
    zone_dsn,
)
from tests.scenario.pg import RUN_USER, PgCluster, run_as
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts

GONE = "operator state: database unreachable"
RETRY = "fence: heartbeat retry"
BACK = "operator state: database reachable again"


def metric(text: str, name: str) -> str:
    return next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " "))


def test_a_database_outage_is_one_line_down_short_retries_and_one_line_back(
    resident_harness: Harness, running: PgCluster, zone_dsn: str  # noqa: F811
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    running.cluster.stop()
    until(lambda: resident.stderr().count(RETRY) >= 2, "two heartbeat retries logged")

    assert answers(resident) == {"192.0.2.80"}
    database = resident.status()["database"]
    assert database["connected"] is False
    assert database["serving"].startswith("serving the last good snapshot since ")
    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(resident.state_dir)])
    assert "serving the last good snapshot since " in shown.stdout
    assert shown.stdout.startswith(
        "node node-a@loopback: serving every zone, but NOT READY: the operator-state "
        "database is not connected\n"), shown.stdout
    assert shown.returncode == 1  # for alerting: the database is gone
    # For a load balancer: the node answers, so it stays in the pool.
    serving = run_as(RUN_USER, ["valis", "status", "--serving", "--state-dir",
                                str(resident.state_dir)])
    assert serving.returncode == 0, serving.stdout + serving.stderr
    assert serving.stdout.splitlines()[0] == shown.stdout.splitlines()[0]
    _code, body = resident.fabric_get("/metrics")
    assert metric(body.decode(), "valis_database_up") == "0"
    assert int(metric(body.decode(), "valis_fence_heartbeats_failed_total")) >= 2
    until(lambda: metric(resident.fabric_get("/metrics")[1].decode(),
                         "valis_zone_source_following") == "0",
          "the metrics to say the zone source lost operator state")

    running.cluster.start()
    until(lambda: BACK in resident.stderr(), "the database's return logged")
    log = resident.stderr()
    assert log.count(GONE) == 1
    assert log.count(BACK) == 1
    retries = [line for line in log.splitlines() if RETRY in line]
    assert all("failed; next in" in line for line in retries)
    assert all(len(line) < 120 for line in retries)
    assert resident.status()["database"]["connected"] is True
    # The heartbeat may be back before the zone source has re-read the served zones:
    # ready (exit 0) waits for that too (ready means changes flow).
    until(lambda: resident.status()["database"]["following"] is True,
          "the zone source following again")
    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(resident.state_dir)])
    assert shown.returncode == 0, shown.stdout
    _code, body = resident.fabric_get("/metrics")
    assert metric(body.decode(), "valis_database_up") == "1"
    assert metric(body.decode(), "valis_zone_source_following") == "1"

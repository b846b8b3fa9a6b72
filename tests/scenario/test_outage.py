"""PostgreSQL outages under a serving resident lose nothing, and a resident cut off from
the database re-checks the fence before anything else when it comes back.

- PostgreSQL stopped for a few seconds, or restarted: DNS answers keep coming from the
  last snapshot, the zone source reconnects with backoff and serves a change written
  after the database came back, the heartbeat resumes, and it is the same process.
- One resident cut off while the database stays up for others (its DSN names a socket
  directory of its own, holding a symlink to the cluster's socket, which the test
  removes, then ends its sessions): when another instance claims the fence meanwhile,
  the resident fails closed on reconnecting — exit non-zero, last line naming the
  fence — having answered nothing written after the claim and written nothing after it
  (no heartbeat, no owner update). When nothing was claimed, it reconnects, catches up
  on the change made while it was away and keeps serving.

These tests stop and start PostgreSQL, so they run on a cluster of their own.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.tsig
import dns.update
import psycopg
import pytest

from tests.scenario.bounded_wait import WAIT, until
from tests.scenario.outage_cluster import (  # noqa: F401 (fixtures)
    WWW,
    ZONE,
    answers,
    outage_cluster,
    running,
    zone_dsn,
)
from tests.scenario.pg import PgCluster
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts
from valis_core.identity.custody import load_keyfile
from valis_core.operator_state.fence import claim_instance_fence, read_instance_fence
from valis_core.operator_state.local_cluster import socket_dsn
from valis_core.owner.key import derive_owner_tsig

SUCCESSOR = "node-a@elsewhere#fedcba9876543210"


def set_www(pg: PgCluster, dsn: str, address: str) -> None:
    with pg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE records SET rdata = %s WHERE owner = %s AND rtype = 'A'",
                     (address, WWW))  # fmt: skip


def liveness(pg: PgCluster, dsn: str) -> tuple[Any, ...]:
    """The resident's ``node_liveness`` row: holder, generation, beats."""
    with pg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT holder, generation, beats FROM node_liveness WHERE node = 'node-a'"
        ).fetchone()
    assert row is not None
    return tuple(row)


def beats(pg: PgCluster, dsn: str) -> int:
    return int(liveness(pg, dsn)[2])


def records(pg: PgCluster, dsn: str) -> set[tuple[Any, ...]]:
    with pg.connect(dsn) as conn:
        return set(conn.execute("SELECT owner, rtype, rdata FROM records"))


def assert_back_without_restart(
    resident: Resident, pg: PgCluster, dsn: str, beats_before: int
) -> None:
    """A change written after the database came back is served, the heartbeat resumes,
    and the process is the one that was started (it never became ready twice)."""
    set_www(pg, dsn, "192.0.2.81")
    until(lambda: answers(resident) == {"192.0.2.81"}, "the change is served")
    until(lambda: beats(pg, dsn) > beats_before, "the heartbeat resumes")
    until(lambda: "zone source: reconnected after" in resident.stderr(),
          "the zone source says it is back")  # logged just after the swap
    assert resident.proc.poll() is None, resident.stderr()
    assert sum("READY" in message for message in resident.notify.messages) == 1


def test_postgres_stopped_under_a_serving_resident(
    resident_harness: Harness, running: PgCluster, zone_dsn: str  # noqa: F811
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    pid = resident.pid
    before = beats(running, zone_dsn)

    running.cluster.stop()
    # Answers keep coming from the last snapshot until both the zone source and the
    # heartbeat have found the database gone.
    asked = 0
    while "heartbeat failed" not in resident.stderr() or asked < 10:
        assert answers(resident) == {"192.0.2.80"}
        asked += 1
        assert asked < WAIT / 0.1, resident.stderr()
        time.sleep(0.1)
    assert "zone source: operator-state connection" in resident.stderr()
    running.cluster.start()

    assert_back_without_restart(resident, running, zone_dsn, before)
    assert resident.pid == pid


def test_postgres_restarted_under_a_serving_resident(
    resident_harness: Harness, running: PgCluster, zone_dsn: str  # noqa: F811
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    before = beats(running, zone_dsn)
    running.cluster.stop()
    running.cluster.start()
    assert answers(resident) == {"192.0.2.80"}
    assert_back_without_restart(resident, running, zone_dsn, before)


class CutOff:
    """One resident's own way to the database: a socket directory holding a symlink to
    the cluster's socket, which can be taken away while others still connect."""

    def __init__(self, pg: PgCluster, dsn: str) -> None:
        self.pg = pg
        self.dsn = dsn
        self.directory = Path(tempfile.mkdtemp(prefix="valis-cut-", dir="/tmp"))
        self.directory.chmod(0o755)
        name = f".s.PGSQL.{pg.cluster.port}"
        self.link = self.directory / name
        self.target = pg.cluster.socket_dir / name
        database = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        self.own_dsn = socket_dsn(
            self.directory, role=pg.run_user, database=str(database), port=pg.cluster.port
        )
        self.restore()

    def restore(self) -> None:
        os.symlink(self.target, self.link)

    def cut(self) -> None:
        """No new connection through the resident's directory, and its sessions ended."""
        self.link.unlink()
        with self.pg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            until(lambda: _others(admin) == 0, "the resident's sessions are gone")

    def remove(self) -> None:
        self.link.unlink(missing_ok=True)
        self.directory.rmdir()


def _others(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def cut_off(outage_cluster: PgCluster, zone_dsn: str) -> Iterator[CutOff]:  # noqa: F811
    way = CutOff(outage_cluster, zone_dsn)
    try:
        yield way
    finally:
        way.remove()


def owner_update(resident: Resident) -> dns.message.Message | BaseException:
    """A signed update adding ``late`` A 192.0.2.44, sent to the owner terminus; its
    response, or what stopped it (the resident may already be gone)."""
    key = derive_owner_tsig(load_keyfile(resident.state_dir))
    update = dns.update.UpdateMessage(
        ZONE, keyring=dns.tsig.Key(key.name, key.secret, key.algorithm)
    )
    update.add("late", 300, "A", "192.0.2.44")
    assert resident.owner_port is not None
    try:
        return dns.query.tcp(update, "127.0.0.1", port=resident.owner_port, timeout=10)
    except (OSError, EOFError, dns.exception.DNSException) as exc:
        return exc


def test_a_resident_superseded_while_cut_off_fails_closed_on_reconnecting(
    resident_harness: Harness, outage_cluster: PgCluster, zone_dsn: str, cut_off: CutOff  # noqa: F811
) -> None:
    pg = outage_cluster
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(cut_off.own_dsn), owner=True)
    resident.wait_ready()
    cut_off.cut()
    written = liveness(pg, zone_dsn)  # the last beat it committed; none can follow
    with pg.connect(zone_dsn, autocommit=True) as successor:
        fence = read_instance_fence(successor)
        assert fence is not None
        claim_instance_fence(successor, fence.generation + 1, SUCCESSOR)
    # The successor's data, which the superseded resident must never serve.
    set_www(pg, zone_dsn, "192.0.2.66")
    before = records(pg, zone_dsn)
    assert answers(resident) == {"192.0.2.80"}  # cut off, it serves its last snapshot

    cut_off.restore()
    update: list[dns.message.Message | BaseException] = []
    sender = threading.Thread(target=lambda: update.append(owner_update(resident)))
    sender.start()
    seen: set[str] = set()
    deadline = time.monotonic() + WAIT
    while resident.proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError, dns.exception.Timeout):
            seen |= answers(resident, timeout=0.5)
    sender.join(WAIT)

    assert resident.wait_exit() != 0
    line = resident.last_line()
    assert line.startswith("valis: fence: "), resident.stderr()
    assert "fenced out" in line
    assert "was superseded" in line
    assert seen <= {"192.0.2.80"}
    assert liveness(pg, zone_dsn) == written
    assert records(pg, zone_dsn) == before
    (response,) = update
    if isinstance(response, dns.message.Message):
        assert response.rcode() == dns.rcode.SERVFAIL


def test_a_resident_cut_off_and_not_superseded_catches_up_and_keeps_serving(
    resident_harness: Harness, outage_cluster: PgCluster, zone_dsn: str, cut_off: CutOff  # noqa: F811
) -> None:
    pg = outage_cluster
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(cut_off.own_dsn))
    resident.wait_ready()
    cut_off.cut()
    before = beats(pg, zone_dsn)
    # Changed while it is away: the notification is lost to it.
    set_www(pg, zone_dsn, "192.0.2.81")
    until(lambda: "zone source: operator-state connection" in resident.stderr(),
          "the zone source finds itself cut off")
    assert answers(resident) == {"192.0.2.80"}

    cut_off.restore()
    until(lambda: answers(resident) == {"192.0.2.81"}, "the change made meanwhile is served")
    until(lambda: beats(pg, zone_dsn) > before, "the heartbeat resumes")
    set_www(pg, zone_dsn, "192.0.2.82")
    until(lambda: answers(resident) == {"192.0.2.82"}, "it follows changes again")
    assert resident.proc.poll() is None, resident.stderr()

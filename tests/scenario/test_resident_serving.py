"""The resident as the launcher runs it: adopted descriptors, a real NOTIFY_SOCKET, the
private PostgreSQL cluster, the real ``valis`` run account — serving, reloading live,
stopping cleanly, and booting again as the same node."""

from __future__ import annotations

import signal
import time

import dns.flags
import dns.rcode

from tests.scenario.operator_state_helpers import addresses
from tests.scenario.pg import PgCluster
from tests.scenario.resident_harness import (
    Harness,
    make_state_dir,
    port_is_free,
    session_processes,
    site_facts,
)

ZONE = "example.test."
WWW = "www IN A 192.0.2.80\n"


def test_ready_is_announced_only_after_the_public_view_answers_every_apex(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    statuses = resident.notify.statuses()
    ready_at = next(i for i, m in enumerate(resident.notify.messages) if "READY" in m)
    fabric_at = statuses.index("bring-up: fabric")
    serve_at = statuses.index("bring-up: serve DNS")
    assert fabric_at < serve_at
    assert all("READY" not in m for m in resident.notify.messages[:ready_at])
    log = resident.stderr()
    assert log.index("public view answered every served apex SOA") < log.index("serving DNS on")
    code, body = resident.fabric_get(f"/view/soa?zone={ZONE}")
    assert code == 200
    assert b'"answered": true' in body


def test_answers_over_the_adopted_udp_and_tcp_pair(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    assert "adopting DNS descriptor pair udp=127.0.0.1:" in resident.stderr()
    for tcp in (False, True):
        response = resident.ask("www.example.test.", tcp=tcp)
        assert response.rcode() == dns.rcode.NOERROR
        assert response.flags & dns.flags.AA
        assert addresses(response) == {"192.0.2.80"}
    assert resident.ask("elsewhere.invalid.").rcode() == dns.rcode.REFUSED


def test_a_record_changed_in_the_database_is_answered_without_a_restart(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    assert addresses(resident.ask("www.example.test.")) == {"192.0.2.80"}
    with pg_cluster.connect(zone_dsn) as conn:
        conn.execute(
            "UPDATE records SET rdata = '192.0.2.81' WHERE owner = 'www.example.test.' "
            "AND rtype = 'A'"
        )
        conn.commit()
    # A bound on the wait, not a speed target: benchmarks/reload_latency.py measures that.
    deadline = time.monotonic() + 30.0
    seen: set[str] = set()
    while time.monotonic() < deadline:
        seen = addresses(resident.ask("www.example.test."))
        if seen == {"192.0.2.81"}:
            break
        time.sleep(0.02)
    assert seen == {"192.0.2.81"}


def test_sigterm_announces_stopping_exits_zero_and_closes_every_socket(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    url, _ = resident.fabric()
    fabric_port = int(url.rsplit(":", 1)[1])
    resident.proc.send_signal(signal.SIGTERM)
    assert resident.wait_exit() == 0
    assert resident.notify.seen("STOPPING")
    assert resident.port is not None
    assert port_is_free(resident.port)
    assert port_is_free(fabric_port)
    assert not (resident.state_dir / "fabric.json").exists()
    assert not (resident.state_dir / "fabric.token").exists()
    assert session_processes(resident.pid) == []
    log = resident.stderr()
    assert log.index("listener descriptors closed") > log.index("stopping on SIGTERM")


def test_an_argv_with_a_retired_flag_and_its_value_boots_the_same(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(
        make_state_dir(resident_harness.workdir),
        site_facts(zone_dsn),
        extra_argv=["--retired-flag", "its-value", "--another-retired=1"],
    )
    resident.wait_ready()
    assert addresses(resident.ask("www.example.test.", tcp=True)) == {"192.0.2.80"}


def test_a_second_boot_of_the_same_state_directory_is_the_same_node(
    resident_harness: Harness, zone_dsn: str
) -> None:
    state_dir = make_state_dir(resident_harness.workdir)
    first = resident_harness.start(state_dir, site_facts(zone_dsn))
    first.wait_ready()
    before = first.status()
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait_exit() == 0
    assert "minted at genesis" in first.stderr()

    # The environment now says another location; the configuration store still counts.
    second = resident_harness.start(state_dir, site_facts(zone_dsn, VALIS_LOCATION="moved"))
    second.wait_ready()
    after = second.status()
    assert after["owner_public_key"] == before["owner_public_key"]
    assert after["location"] == "loopback"
    assert after["generation"] == before["generation"] == 0
    log = second.stderr()
    assert "(loaded)" in log
    assert "VALIS_LOCATION in the environment differs from the store" in log


def test_the_fabric_refuses_requests_without_the_capability_token(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    assert resident.fabric_get("/status", token="")[0] == 401
    assert resident.fabric_get("/status", token="not-the-token")[0] == 403
    code, body = resident.fabric_get("/metrics")
    assert code == 200
    text = body.decode()
    assert "valis_fence_generation 0" in text
    assert "valis_zone_index_records 4" in text
    assert "valis_zone_index_load_seconds" in text
    resident.ask("www.example.test.")
    _, body = resident.fabric_get("/metrics")
    assert 'valis_dns_responses_total{transport="udp",rcode="NOERROR"}' in body.decode()

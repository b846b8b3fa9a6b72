"""The resident's edge stage as the launcher runs it: an elected edge (``--edge-tcp-fd``)
with a certificate serves DNS over HTTPS after everything else is up; without one the
boot stops there (fail closed), unless the operator chose ``VALIS_EDGE_CERT=on-demand``:
then :53 serves at once and the edge comes up when the certificate arrives."""

from __future__ import annotations

import pwd
import ssl
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rcode

from tests.scenario.edge_ca import LocalCA, install, make_test_ca
from tests.scenario.operator_state_helpers import addresses
from tests.scenario.pg import RUN_USER
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts

ZONE = "example.test."
LIMIT = 10.0


def run_account() -> tuple[int, int]:
    account = pwd.getpwnam(RUN_USER)
    return account.pw_uid, account.pw_gid


def doh_ask(resident: Resident, ca: LocalCA, cafile: Path, name: str) -> dns.message.Message:
    assert resident.edge_port is not None
    return dns.query.https(
        dns.message.make_query(name, "A"),
        f"https://127.0.0.1:{resident.edge_port}/dns-query",
        timeout=LIMIT,
        verify=ssl.create_default_context(cafile=str(cafile)),
        http_version=dns.query.HTTPVersion.H2,
    )


def test_an_elected_edge_with_a_certificate_serves_doh_after_dns_and_stops_before_it(
    resident_harness: Harness, zone_dsn: str
) -> None:
    ca = make_test_ca()
    cafile = resident_harness.workdir / "root.pem"
    cafile.write_bytes(ca.root_pem)
    state_dir = make_state_dir(resident_harness.workdir)
    install(ca.issue(("example.test",)), state_dir, run_account())
    resident = resident_harness.start(state_dir, site_facts(zone_dsn), edge=True)
    resident.wait_ready()
    statuses = resident.notify.statuses()
    assert statuses.index("bring-up: serve DNS") < statuses.index("bring-up: edge")
    edge_at = statuses.index("bring-up: edge")
    assert statuses.index("bring-up: serve DNS") < edge_at < statuses.index("bring-up: modules")
    reply = doh_ask(resident, ca, cafile, "www.example.test.")
    assert addresses(reply) == {"192.0.2.80"}
    assert doh_ask(resident, ca, cafile, "www.example.net.").rcode() == dns.rcode.REFUSED
    assert resident.ask("elsewhere.invalid.").rcode() == dns.rcode.REFUSED
    edge = resident.status()["edge"]
    assert edge["certificate_not_after"] > time.time() + 20 * 86400
    assert edge["responses"] == 2
    _, metrics = resident.fabric_get("/metrics")
    assert 'valis_edge_responses_total{status="200",protocol="h2"} 2' in metrics.decode()
    resident.proc.terminate()
    assert resident.wait_exit() == 0
    log = resident.stderr()
    assert "edge: serving DNS over HTTPS" in log
    assert "stopping on SIGTERM: modules drain, then the edge, then" in log


def test_an_elected_edge_without_a_certificate_stops_the_boot_naming_the_file(
    resident_harness: Harness, zone_dsn: str
) -> None:
    state_dir = make_state_dir(resident_harness.workdir)
    resident = resident_harness.start(state_dir, site_facts(zone_dsn), edge=True)
    assert resident.wait_exit() != 0
    assert not resident.notify.seen("READY")
    assert "valis: edge: no certificate at" in resident.stderr()
    assert "edge/leaf.crt" in resident.last_line()


def test_on_demand_serves_dns_at_once_and_the_edge_when_the_certificate_arrives(
    resident_harness: Harness, zone_dsn: str
) -> None:
    ca = make_test_ca()
    cafile = resident_harness.workdir / "root.pem"
    cafile.write_bytes(ca.root_pem)
    state_dir = make_state_dir(resident_harness.workdir)
    facts = site_facts(zone_dsn, VALIS_EDGE_CERT="on-demand")
    resident = resident_harness.start(state_dir, facts, edge=True)
    resident.wait_ready()
    assert addresses(resident.ask("www.example.test.")) == {"192.0.2.80"}
    assert "DNS over HTTPS starts when one arrives" in resident.stderr()
    install(ca.issue(("example.test",)), state_dir, run_account())
    deadline = time.monotonic() + 30
    while "edge: serving the certificate valid until" not in resident.stderr():
        assert time.monotonic() < deadline, resident.stderr()
        time.sleep(0.2)
    assert addresses(doh_ask(resident, ca, cafile, "www.example.test.")) == {"192.0.2.80"}

"""The operator's story of a running node: it adds a served zone with ``valis site-facts
set`` and a reload (SIGHUP), a zone that cannot be served is refused with the node as it
was, the logs can be JSON for a collector, and the metrics say what is served."""

from __future__ import annotations

import json
import signal

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsig
import dns.update

from tests.scenario.bounded_wait import until
from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import RUN_USER, PgCluster, run_as
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts
from valis_cli.commands.status import not_ready_reasons
from valis_core.config_store import HOW_TO_CHANGE
from valis_core.identity.custody import load_keyfile
from valis_core.operator_state.zones import delete_zone
from valis_core.owner.key import derive_owner_tsig
from valis_core.resident.status_document import STATUS
from valis_core.state_layout import config_store_path, signing_keys_dir

ZONE = "example.test."
NEW = "example.org."


def set_served_zones(resident: Resident, dsn: str, zones: str) -> None:
    done = run_as(RUN_USER, [
        "valis", "site-facts", "set", "node-a", f"VALIS_SERVED_ZONES={zones}",
        "--state-dir", str(resident.state_dir), "--dsn", dsn,
    ])
    assert done.returncode == 0, done.stderr
    assert "systemctl reload fulcrum-valis" in done.stdout


def with_new_zone_signed(harness: Harness, pg_cluster: PgCluster, zone_dsn: str) -> Resident:
    """A running node serving ``ZONE``, and ``NEW`` in operator state, signed with a key
    in the node's state directory but not served yet."""
    resident = harness.start(make_state_dir(harness.workdir), site_facts(zone_dsn))
    resident.wait_ready()
    import_zone(pg_cluster, zone_dsn, NEW)
    signed = run_as(RUN_USER, ["valis", "zone", "sign", NEW, "--state-dir",
                               str(resident.state_dir), "--dsn", zone_dsn])
    assert signed.returncode == 0, signed.stderr
    return resident


def test_a_zone_added_with_site_facts_set_is_served_after_a_reload(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    store = config_store_path(resident.state_dir)
    assert HOW_TO_CHANGE in store.read_text()
    assert resident.ask(NEW, "SOA").rcode() == dns.rcode.REFUSED
    import_zone(pg_cluster, zone_dsn, NEW)

    set_served_zones(resident, zone_dsn, f"{ZONE},{NEW}")
    assert HOW_TO_CHANGE in store.read_text()
    assert f"{ZONE},{NEW}" in store.read_text()
    shown = run_as(RUN_USER, ["valis", "site-facts", "show", "node-a", "--dsn", zone_dsn])
    assert f"VALIS_SERVED_ZONES={ZONE},{NEW}" in shown.stdout
    resident.reload("reload: now serving")

    log = resident.stderr()
    assert "reload on SIGHUP: re-reading" in log
    assert f"added {NEW}; removed none" in log
    for zone in (ZONE, NEW):
        reply = resident.ask(zone, "SOA")
        assert reply.rcode() == dns.rcode.NOERROR
        assert reply.flags & dns.flags.AA
    assert set(resident.status()["zones"]) == {ZONE, NEW}
    # The follow task is the new source's: a change to the new zone is served live.
    import_zone(pg_cluster, zone_dsn, NEW, serial=2)
    until(lambda: resident.status()["zones"][NEW]["serial"] == 2, "the new serial served")
    assert resident.proc.poll() is None


def test_the_owner_terminus_takes_updates_for_the_zones_a_reload_serves(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """A zone a reload adds takes signed updates as soon as it is answered; a zone a
    reload removes takes none (NOTAUTH), like any zone the node does not serve."""
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn), owner=True)
    resident.wait_ready()
    key = derive_owner_tsig(load_keyfile(resident.state_dir))
    signer = dns.tsig.Key(key.name, key.secret, key.algorithm)
    assert resident.owner_port is not None

    def update(zone: str, name: str) -> int:
        message = dns.update.UpdateMessage(zone, keyring=signer)
        message.add(name, 300, "A", "192.0.2.90")
        assert resident.owner_port is not None
        return dns.query.tcp(message, "127.0.0.1", port=resident.owner_port,
                             timeout=10).rcode()

    assert update(NEW, f"before.{NEW}") == dns.rcode.NOTAUTH  # not served yet
    import_zone(pg_cluster, zone_dsn, NEW)
    set_served_zones(resident, zone_dsn, NEW)
    resident.reload("reload: now serving")
    assert f"added {NEW}; removed {ZONE}" in resident.stderr()

    assert update(NEW, f"after.{NEW}") == dns.rcode.NOERROR
    until(lambda: bool(resident.ask(f"after.{NEW}", "A").answer), "the update answered")
    assert update(ZONE, f"after.{ZONE}") == dns.rcode.NOTAUTH
    assert f"update of {ZONE} from 127.0.0.1:" in resident.stderr()
    assert "not served by this node" in resident.stderr()
    assert resident.ask(f"after.{ZONE}", "A").rcode() == dns.rcode.REFUSED


def test_a_signed_zone_added_by_a_reload_is_answered_signed_from_its_first_query(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    resident = with_new_zone_signed(resident_harness, pg_cluster, zone_dsn)

    set_served_zones(resident, zone_dsn, f"{ZONE},{NEW}")
    resident.reload("reload: now serving")

    assert resident.port is not None
    for rtype in ("SOA", "DNSKEY"):
        query = dns.message.make_query(NEW, rtype, want_dnssec=True)
        reply = dns.query.udp(query, "127.0.0.1", port=resident.port, timeout=5)
        assert reply.rcode() == dns.rcode.NOERROR
        assert {rrset.rdtype for rrset in reply.answer} == {
            dns.rdatatype.from_text(rtype), dns.rdatatype.RRSIG}
    assert f"dnssec: zone {NEW} signed online" in resident.stderr()


def test_a_signed_zone_whose_key_is_not_here_is_refused_by_the_reload_as_at_boot(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    resident = with_new_zone_signed(resident_harness, pg_cluster, zone_dsn)
    keys = list(signing_keys_dir(resident.state_dir).glob(f"K{NEW.rstrip('.')}+*.pem"))
    assert keys
    for key in keys:  # signed in operator state, its key lost on this node
        key.unlink()

    set_served_zones(resident, zone_dsn, f"{ZONE},{NEW}")
    resident.reload("refused")

    log = resident.stderr()
    assert f"does not answer the apex SOA of {NEW}" in log
    assert f"still serving {ZONE}" in log
    assert resident.proc.poll() is None
    assert set(resident.status()["zones"]) == {ZONE}
    assert resident.ask(ZONE, "SOA").rcode() == dns.rcode.NOERROR
    assert resident.ask(NEW, "SOA").rcode() == dns.rcode.REFUSED


def test_a_zone_that_cannot_be_served_is_refused_and_the_node_stays_as_it_was(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """A reload whose new zone went from the database before the SIGHUP is refused: the
    node serves what it served, and its status says it is not ready (its store asks for
    what it does not serve) until a reload applies."""
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    import_zone(pg_cluster, zone_dsn, "missing.test.")
    set_served_zones(resident, zone_dsn, f"{ZONE},missing.test.")
    with pg_cluster.connect(zone_dsn) as conn:
        assert delete_zone(conn, "missing.test.")
    resident.reload("refused")

    assert f"still serving {ZONE}" in resident.stderr()
    assert resident.proc.poll() is None
    assert set(resident.status()["zones"]) == {ZONE}
    assert resident.ask(ZONE, "SOA").rcode() == dns.rcode.NOERROR
    assert resident.ask("missing.test.", "SOA").rcode() == dns.rcode.REFUSED
    reasons = not_ready_reasons(STATUS.structure(resident.status()))
    assert [r for r in reasons if "the last reload was refused" in r], reasons
    assert "missing.test." in resident.status()["reload_refused"]

    set_served_zones(resident, zone_dsn, ZONE)  # the store asks for what is served again
    resident.reload("the store is unchanged")
    assert resident.status()["reload_refused"] is None
    assert not_ready_reasons(STATUS.structure(resident.status())) == []


def test_a_served_zone_deleted_from_the_database_makes_the_node_not_ready_until_imported(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """The node keeps answering a served zone's last good version when the zone goes from
    the database, and its status says so (not ready, naming the zone) until it is
    imported again."""
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    assert not_ready_reasons(STATUS.structure(resident.status())) == []
    with pg_cluster.connect(zone_dsn) as conn:
        assert delete_zone(conn, ZONE)
    until(lambda: resident.status()["zones_gone_from_database"] == [ZONE],
          "the deleted zone reported gone")
    assert resident.ask(ZONE, "SOA").rcode() == dns.rcode.NOERROR
    reasons = not_ready_reasons(STATUS.structure(resident.status()))
    assert [r for r in reasons if f"zone {ZONE} is no longer in the operator-state" in r]
    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(resident.state_dir)])
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "NOT READY" in shown.stdout

    import_zone(pg_cluster, zone_dsn, ZONE, serial=3)
    until(lambda: resident.status()["zones"][ZONE]["serial"] == 3, "the zone imported again")
    assert resident.status()["zones_gone_from_database"] == []
    assert not_ready_reasons(STATUS.structure(resident.status())) == []


def test_site_facts_set_refuses_served_zones_the_database_lacks(
    resident_harness: Harness, zone_dsn: str
) -> None:
    state_dir = make_state_dir(resident_harness.workdir)
    store = config_store_path(state_dir)
    resident_harness.start(state_dir, site_facts(zone_dsn)).wait_ready()
    before = store.read_text()
    done = run_as(RUN_USER, [
        "valis", "site-facts", "set", "node-a", f"VALIS_SERVED_ZONES={ZONE},Absent.Test",
        "--state-dir", str(state_dir), "--dsn", zone_dsn,
    ])
    assert done.returncode != 0
    assert "absent.test." in done.stderr
    assert "valis zone import" in done.stderr
    assert store.read_text() == before
    shown = run_as(RUN_USER, ["valis", "site-facts", "show", "node-a", "--dsn", zone_dsn])
    assert "VALIS_SERVED_ZONES" not in shown.stdout


def test_a_refused_site_facts_change_leaves_rows_and_store_as_they_were(
    resident_harness: Harness, zone_dsn: str
) -> None:
    state_dir = make_state_dir(resident_harness.workdir)
    resident = resident_harness.start(state_dir, site_facts(zone_dsn))
    resident.wait_ready()
    store = config_store_path(state_dir)
    before = store.read_text()
    done = run_as(RUN_USER, [
        "valis", "site-facts", "set", "node-a", "VALIS_LOG_LEVEL=loud",
        f"VALIS_SERVED_ZONES={ZONE},{NEW}", "--state-dir", str(state_dir), "--dsn", zone_dsn,
    ])
    assert done.returncode != 0
    assert "VALIS_LOG_LEVEL 'loud' is not one of" in done.stderr
    assert store.read_text() == before
    shown = run_as(RUN_USER, ["valis", "site-facts", "show", "node-a", "--dsn", zone_dsn])
    assert "VALIS_SERVED_ZONES" not in shown.stdout


def test_an_unchanged_store_reloads_as_a_logged_no_op(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    resident.reload("the store is unchanged")
    assert resident.proc.poll() is None
    assert resident.ask(ZONE, "SOA").rcode() == dns.rcode.NOERROR


def test_with_log_format_json_every_line_is_one_object_with_a_level(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn), extra_argv=["--log-format", "json"])
    resident.wait_ready()
    resident.reload("the store is unchanged")
    resident.proc.send_signal(signal.SIGTERM)
    assert resident.wait_exit() == 0
    lines = resident.stderr().splitlines()
    documents = [json.loads(line) for line in lines]
    assert all(isinstance(d, dict) and d["level"] in {"debug", "info", "warning", "error"}
               for d in documents)
    assert all("time" in d for d in documents)  # not under journald: stamped
    messages = [d["message"] for d in documents]
    assert any(m.startswith("ready: serving") for m in messages)
    assert "stopped" in messages


def test_the_log_format_site_fact_makes_the_running_nodes_lines_json(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn, VALIS_LOG_FORMAT="json"))
    resident.wait_ready()
    until(lambda: "ready: serving" in resident.stderr(), "the ready line logged")
    for line in resident.stderr().splitlines():
        assert json.loads(line)["level"] in {"debug", "info", "warning", "error"}


def test_metrics_say_the_database_is_up_and_each_zones_serial(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    code, body = resident.fabric_get("/metrics")
    assert code == 200
    text = body.decode()
    assert "valis_database_up 1" in text.splitlines()
    assert f'valis_zone_serial{{zone="{ZONE}"}} 1' in text.splitlines()
    assert "# TYPE valis_fence_heartbeats_failed_total counter" in text


def test_a_changed_served_domain_or_ca_url_is_said_to_need_a_restart_reload_after_reload(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    assert resident.status().get("restart_pending", []) == []
    done = run_as(RUN_USER, [
        "valis", "site-facts", "set", "node-a", "VALIS_SERVED_DOMAIN=doh.example.test",
        "VALIS_ACME_DIRECTORY_URL=https://acme.example.test/directory",
        "--state-dir", str(resident.state_dir), "--dsn", zone_dsn,
    ])
    assert done.returncode == 0, done.stderr
    keys = ["VALIS_ACME_DIRECTORY_URL", "VALIS_SERVED_DOMAIN"]
    for _ in range(2):  # said again at every reload, not only the first after the change
        resident.reload("takes effect at the next restart")
        until(lambda: resident.stderr().count("VALIS_SERVED_DOMAIN changed in the store") > 0
              and resident.status().get("restart_pending") == keys, "the restart named")
    log = resident.stderr()
    assert log.count("VALIS_SERVED_DOMAIN changed in the store") == 2
    assert log.count("VALIS_ACME_DIRECTORY_URL changed in the store") == 2
    assert "still obtained and renewed for the domain it started with" in log
    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(resident.state_dir)])
    assert f"warning: restart needed: {', '.join(keys)} changed" in shown.stdout
    assert shown.returncode == 0, shown.stdout + shown.stderr  # it serves: still ready
    assert resident.proc.poll() is None

"""Every stage of the resident's bring-up fails closed: a non-zero exit, one line naming
the stage and the cause, no READY, and nothing left behind — no listener on the handed
descriptors, no fabric, no process in the resident's session. And a running resident
that is superseded at the fence stops serving and exits non-zero. A fenced-out instance,
at boot or while serving, exits with the status its unit never restarts, and
``valis status`` then says who fenced it out at which generation."""

from __future__ import annotations

from tests.scenario.pg import RUN_USER, PgCluster, run_as
from tests.scenario.resident_harness import (
    Harness,
    Resident,
    assert_failed_closed,
    make_state_dir,
    port_is_free,
    session_processes,
    site_facts,
)
from valis_core.fence import FENCED_OUT_EXIT_STATUS
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence

ZONE = "example.test."


def test_a_bad_dsn_stops_the_boot_at_operator_state(resident_harness: Harness) -> None:
    facts = site_facts("postgresql://valis@/valis_state?host=/nonexistent/socket-dir")
    resident = resident_harness.start(make_state_dir(resident_harness.workdir), facts)
    assert_failed_closed(resident, "operator state", "cannot connect")


def test_a_served_zone_missing_from_the_database_stops_the_boot(
    resident_harness: Harness, zone_dsn: str
) -> None:
    facts = site_facts(zone_dsn, zones=f"{ZONE},absent.test.")
    resident = resident_harness.start(make_state_dir(resident_harness.workdir), facts)
    assert_failed_closed(resident, "zone index", "absent.test.")


def test_an_unservable_zone_stops_the_boot(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    # A zone with an SOA but no apex NS: the database takes it, the index refuses it.
    with pg_cluster.connect(zone_dsn) as conn:
        conn.execute("INSERT INTO zones (name) VALUES ('broken.test.')")
        conn.execute(
            "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES ('broken.test.', "
            "'broken.test.', 'SOA', 300, 'ns.broken.test. h.broken.test. 1 2 3 4 5')"
        )
        conn.commit()
    facts = site_facts(zone_dsn, zones="broken.test.")
    resident = resident_harness.start(make_state_dir(resident_harness.workdir), facts)
    assert_failed_closed(resident, "zone index", "broken.test.")


def test_a_served_privileged_port_without_a_descriptor_is_never_bound_by_the_resident(
    resident_harness: Harness, zone_dsn: str
) -> None:
    resident = resident_harness.start(
        make_state_dir(resident_harness.workdir), site_facts(zone_dsn),
        ports="53", pass_pair=False,
    )
    assert_failed_closed(resident, "adopt", "never binds a privileged port itself")
    assert "port 53" in resident.last_line()


def test_a_descriptor_that_is_not_what_its_flag_says_stops_the_boot(
    resident_harness: Harness, zone_dsn: str
) -> None:
    # The TCP listener handed down as the UDP descriptor, and the UDP socket as the TCP one.
    resident = resident_harness.start(
        make_state_dir(resident_harness.workdir), site_facts(zone_dsn), swap_pair=True
    )
    assert_failed_closed(resident, "adopt", "is a listening TCP socket bound to 127.0.0.1:")
    assert "--dns-udp-fd" in resident.last_line()
    assert "not a UDP socket" in resident.last_line()


def test_a_failing_codec_self_test_stops_the_boot(
    resident_harness: Harness, zone_dsn: str
) -> None:
    # A build without the answer module: the import itself fails, as in a plain core.
    shim = resident_harness.workdir / "no-codec"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\nsys.modules['valis_core.dns.answer._answer'] = None\n"
    )
    shim.chmod(0o755)
    (shim / "sitecustomize.py").chmod(0o644)
    resident = resident_harness.start(
        make_state_dir(resident_harness.workdir), site_facts(zone_dsn),
        extra_env={"PYTHONPATH": str(shim)},
    )
    assert_failed_closed(resident, "codec", "serving codec not available")
    assert not (resident.state_dir / "owner.key").exists()


def test_a_fenced_out_generation_refuses_to_start(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        seed_instance_fence(conn, "node-a@old-location")
        claim_instance_fence(conn, 3, "node-a@new-location")
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    assert_failed_closed(resident, "operator state", "fenced out",
                         status=FENCED_OUT_EXIT_STATUS)
    assert "superseded" in resident.last_line()
    assert_status_says_fenced_out(resident, "node-a@new-location", 3)


def assert_status_says_fenced_out(resident: Resident, holder: str, generation: int) -> None:
    """``valis status`` on the stopped node names who fenced it out, at which generation."""
    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(resident.state_dir)])
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert shown.stderr.startswith(
        f"valis: fenced out by {holder} at generation {generation}: "), shown.stderr
    assert "systemctl disable --now fulcrum-valis.service" in shown.stderr


def test_a_signed_zone_whose_key_the_state_directory_lacks_stops_the_boot_saying_why(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    # Signed by a node whose backup set this state directory was not condensed from.
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO zone_signing (zone, algorithm, key_tag, set_by) "
                     "VALUES (%s, 13, 1, 'elsewhere')", (ZONE,))
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    assert_failed_closed(resident, "fabric", f"apex SOA of {ZONE}")
    assert "with a key this node's state directory does not hold" in resident.last_line()
    assert "backup set of the node that signed it" in resident.last_line()


def test_running_as_root_is_refused(resident_harness: Harness, zone_dsn: str) -> None:
    resident = resident_harness.start(
        make_state_dir(resident_harness.workdir), site_facts(zone_dsn), as_root=True
    )
    assert_failed_closed(resident, "privilege", "refuses to run as root")


def test_a_running_resident_superseded_at_the_fence_stops_serving_and_exits_non_zero(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                      site_facts(zone_dsn))
    resident.wait_ready()
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        claim_instance_fence(conn, 1, "node-a@successor")
    status = resident.wait_exit()
    assert status == FENCED_OUT_EXIT_STATUS, resident.stderr()
    line = resident.last_line()
    assert line.startswith("valis: fence: "), resident.stderr()
    assert "fenced out" in line
    assert resident.notify.seen("STOPPING")
    assert resident.port is not None
    assert port_is_free(resident.port)
    assert session_processes(resident.pid) == []
    assert_status_says_fenced_out(resident, "node-a@successor", 1)

"""The operator's everyday questions answered by the command line: which version is
this, is the node ready (``valis status``), and which database do the verbs mean when
``--dsn`` is not given; and the failures the issue reproduced, each one line."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import RUN_USER, PgCluster, run_as
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from valis_cli.commands.status import not_ready_reasons, not_serving_reasons, render_status
from valis_cli.operator_dsn import find_dsn, node_run_account
from valis_core import __version__
from valis_core.dns.zone.build import parse_zone_text
from valis_core.launcher_config import launcher_config_from_mapping, render_launcher_config
from valis_core.operator_state.site_facts import DSN_KEY, render_site_facts
from valis_core.operator_state.site_facts_rows import set_site_facts
from valis_core.operator_state.zones import replace_zone
from valis_core.resident.status_document import STATUS
from valis_core.state_layout import config_store_path

BIN = Path(sys.executable).parent
ZONE = "example.test."


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=60,
        check=False, env=env, stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("program", ["valis", "fulcrum"])
def test_both_programs_say_their_version(program: str) -> None:
    done = run(program, "--version")
    assert done.returncode == 0
    assert done.stdout == f"{program} {__version__}\n"


def test_a_node_that_is_serving_reports_ready_with_its_zones_and_fence(
    resident_harness: Harness, pg_cluster: PgCluster, state_dsn: str
) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone(ZONE, serial=7), ZONE))
    state_dir = make_state_dir(resident_harness.workdir)
    resident = resident_harness.start(state_dir, site_facts(state_dsn))
    resident.wait_ready()

    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(state_dir)])
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith("node node-a@loopback: ready\n")
    assert f"zone {ZONE}: serial 7 (NOERROR)" in shown.stdout
    assert "fence: generation 0" in shown.stdout

    as_json = run_as(RUN_USER, ["valis", "status", "--json", "--state-dir", str(state_dir)])
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["ready"] is True
    assert document["zones"][ZONE]["serial"] == 7
    assert document["fence_generation"] == 0
    assert document["uptime_seconds"] >= 0
    assert document["modules"] == []


def test_a_node_not_ready_says_each_reason_and_a_dropped_port_only_warns() -> None:
    document = {
        "node": "node-a", "location": "lab", "ready": False, "fence_generation": 3,
        "fence_holder": "node-a@lab#00", "generation": 3,
        "zones": {ZONE: {"serial": None, "rcode": "SERVFAIL"}},
        "database": {"connected": False, "since": 100.0},
        "dns": {"udp": "192.0.2.1:53", "tcp": "192.0.2.1:53", "problem": "port 5353 dropped"},
        "modules": [], "started_at": 0.0,
    }
    assert not_ready_reasons(STATUS.structure(document)) == [
        "bring-up has not finished (the resident's log says which stage)",
        f"zone {ZONE} answers SERVFAIL, not its SOA",
        "the operator-state database is not connected",
    ]
    shown = render_status(STATUS.structure(document), now=3700.0).splitlines()
    assert shown[0].startswith("node node-a@lab: NOT READY: bring-up has not finished")
    assert "fence: generation 3 held by node-a@lab#00; store generation 3" in shown
    assert "database: NOT connected for 1h00m00s" in shown
    assert shown[-1] == "warning: port 5353 dropped"
    serving = {**document, "ready": True, "zones": {ZONE: {"serial": 7, "rcode": "NOERROR"}},
               "database": {"connected": True, "since": 100.0}}
    assert not_ready_reasons(STATUS.structure(serving)) == []
    # A database outage under a node that answers every zone: not ready, but serving.
    outage = {**serving, "database": {"connected": False, "since": 100.0}}
    assert not_ready_reasons(STATUS.structure(outage)) == [
        "the operator-state database is not connected"
    ]
    assert not_serving_reasons(STATUS.structure(outage)) == []
    assert render_status(STATUS.structure(outage), now=3700.0).startswith(
        "node node-a@lab: serving every zone, but NOT READY: the operator-state database")
    status = STATUS.structure(document)
    assert not_serving_reasons(status) == not_ready_reasons(status)[:2]


def test_a_node_whose_heartbeat_reconnected_before_its_zone_source_is_not_ready() -> None:
    """Issue 25 item 7: after an outage the heartbeat reconnects first; until the zone
    source has re-read the served zones, changes are not served, so the node is not
    ready (yet it serves every zone from its last good index)."""
    document = {
        "node": "node-a", "location": "lab", "ready": True, "fence_generation": 3,
        "fence_holder": "node-a@lab#00", "generation": 3,
        "zones": {ZONE: {"serial": 7, "rcode": "NOERROR"}},
        "database": {"connected": True, "since": 100.0, "following": False},
        "dns": {"udp": "192.0.2.1:53", "tcp": "192.0.2.1:53"},
        "modules": [], "started_at": 0.0,
    }
    reasons = not_ready_reasons(STATUS.structure(document))
    assert len(reasons) == 1
    assert reasons[0].startswith("the zone source is not following operator state yet")
    assert not_serving_reasons(STATUS.structure(document)) == []
    caught_up = {**document, "database": {"connected": True, "since": 100.0, "following": True}}
    assert not_ready_reasons(STATUS.structure(caught_up)) == []


def test_status_of_a_node_that_is_not_running_is_one_line_and_not_ready(
    run_account_dir: Path,
) -> None:
    shown = run_as(RUN_USER, ["valis", "status", "--state-dir", str(run_account_dir)])
    assert shown.returncode == 1
    assert shown.stderr.startswith("valis: no node is serving from ")
    assert len(shown.stderr.splitlines()) == 1


def test_the_dsn_comes_from_the_flag_the_environment_then_the_site_facts(
    tmp_path: Path,
) -> None:
    facts = tmp_path / "site-facts.env"
    facts.write_text(render_site_facts(site_facts("postgresql://valis@/from_facts")))
    missing = tmp_path / "absent.env"
    env = {DSN_KEY: "postgresql://valis@/from_env"}
    assert find_dsn("postgresql://valis@/given", env, [facts]) == "postgresql://valis@/given"
    assert find_dsn(None, env, [facts]) == "postgresql://valis@/from_env"
    assert find_dsn(None, {}, [missing, facts]) == "postgresql://valis@/from_facts"
    assert find_dsn(None, {}, [missing]) is None


def test_zone_list_finds_the_database_in_the_nodes_state_directory(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path
) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone(ZONE, serial=3), ZONE))
    store = config_store_path(run_account_dir)
    store.parent.mkdir(mode=0o755)
    store.write_text(render_site_facts(site_facts(state_dsn)))
    os.chmod(store, 0o644)
    listed = run_as(RUN_USER, ["valis", "zone", "list", "--json", "--state-dir",
                               str(run_account_dir)])
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"zone": ZONE, "records": 3, "serial": 3, "served_by": [], "serial_policy": None}
    ]


def test_verbs_run_as_root_reach_the_database_as_the_run_account(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path, tmp_path: Path
) -> None:
    """``valis site-facts show`` as root was refused (peer authentication failed for
    user "valis"): as root, a verb that reaches the database connects as the node's run
    account (the state directory's owner, else ``valis``), and keeps root's own rights
    for the rest, so it imports a zone file only root may read."""
    require_root()
    with pg_cluster.connect(state_dsn) as conn:
        set_site_facts(conn, "node-a", site_facts(state_dsn))
    shown = run("valis", "site-facts", "show", "node-a", "--dsn", state_dsn)
    assert shown.returncode == 0, shown.stderr
    assert f"VALIS_OPERATOR_STATE_DSN={state_dsn}" in shown.stdout.splitlines()

    private = tmp_path / "private" / "example.test.zone"
    private.parent.mkdir(mode=0o700)
    private.write_text(soa_zone(ZONE, serial=5))
    private.chmod(0o600)
    imported = run("valis", "zone", "import", str(private), "--dsn", state_dsn)
    assert imported.returncode == 0, imported.stderr

    store = config_store_path(run_account_dir)
    store.parent.mkdir(mode=0o700)
    store.write_text(render_site_facts(site_facts(state_dsn)))
    listed = run("valis", "zone", "list", "--json", "--state-dir", str(run_account_dir))
    assert listed.returncode == 0, listed.stderr
    assert [(z["zone"], z["serial"]) for z in json.loads(listed.stdout)] == [(ZONE, 5)]


def test_as_root_the_account_a_verb_connects_as_is_named_when_refused(
    state_dsn: str, tmp_path: Path
) -> None:
    """A state directory whose owner is not the DSN's role's account: the refusal says
    which account root connected as and where that account came from."""
    require_root()
    owned = tmp_path / "state"
    owned.mkdir()
    os.chown(owned, 65534, 65534)
    refused = run("valis", "zone", "list", "--dsn", state_dsn, "--state-dir", str(owned))
    assert refused.returncode == 1
    assert "Peer authentication failed" in refused.stderr
    assert "connected as the run account nobody (uid 65534)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_the_run_account_root_acts_as_is_the_pinned_one_the_state_owner_then_valis(
    tmp_path: Path,
) -> None:
    config = tmp_path / "launcher.toml"
    state = tmp_path / "state"
    state.mkdir()
    owner = state.stat()

    def valis_account(name: str) -> pwd.struct_passwd:
        assert name == "valis"
        return pwd.struct_passwd(("valis", "x", 999, 995, "", "/", "/usr/sbin/nologin"))

    def none(name: str) -> pwd.struct_passwd:
        raise KeyError(name)

    found = node_run_account(config, state, valis_account)
    if owner.st_uid != 0:  # a state directory owned by an account names it
        assert found == (owner.st_uid, owner.st_gid)
    else:  # root's own is passed over
        assert found == (999, 995)
        assert node_run_account(config, state, none) is None
    assert node_run_account(config, tmp_path / "absent", valis_account) == (999, 995)
    pinned = launcher_config_from_mapping({
        "netns-name": "valis", "unit-ip": "203.0.113.10", "unit-cidr": 24,
        "public-interface": "ens7", "public-gateway": "203.0.113.1", "mode": "dedicated",
        "designated-port": 53, "catchall-object-path": "/opt/valis/current/lib/x.bpf.o",
        "valis-command": ["/opt/valis/current/bin/valis"], "valis-uid": 1234,
        "valis-gid": 4321,
    })
    config.write_text(render_launcher_config(pinned))
    assert node_run_account(config, state, none) == (1234, 4321)


def test_on_a_terminal_a_verb_with_no_dsn_asks_for_one(tmp_path: Path) -> None:
    nowhere = tmp_path / "no-server"
    nowhere.mkdir()
    asked = f"postgresql://valis@/valis_state?host={nowhere}"
    controller, terminal = os.openpty()
    try:
        os.write(controller, f"{asked}\n".encode())
        done = subprocess.run(
            [str(BIN / "valis"), "zone", "list", "--state-dir", str(tmp_path)],
            stdin=terminal, capture_output=True, text=True, timeout=60, check=False,
            env={k: v for k, v in os.environ.items() if k != DSN_KEY},
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert "operator-state DSN" in done.stdout
    assert done.returncode == 1
    assert done.stderr.startswith(f"valis: operator state: cannot connect with {asked}: ")
    assert len(done.stderr.splitlines()) == 1


def test_without_any_dsn_the_verb_says_where_it_looked(run_account_dir: Path) -> None:
    done = run_as(RUN_USER, ["valis", "zone", "list", "--state-dir", str(run_account_dir)])
    assert done.returncode == 1
    assert done.stderr.startswith("valis: no operator-state DSN: give --dsn, set "
                                  f"${DSN_KEY}")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["zone", "list"],
        ["zone", "import", "{zone}"],
        ["site-facts", "render", "--node", "node-a", "--out", "{dir}/facts.env"],
    ],
)
def test_an_unmigrated_database_is_named_with_its_remedy(
    pg_cluster: PgCluster, run_account_dir: Path, argv: list[str]
) -> None:
    zone = run_account_dir / "example.test.zone"
    zone.write_text(soa_zone(ZONE))
    os.chmod(zone, 0o644)
    dsn = pg_cluster.new_database("unmigrated")
    filled = [word.format(zone=zone, dir=run_account_dir) for word in argv]
    done = run_as(RUN_USER, ["valis", *filled, "--dsn", dsn])
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("valis: operator state is at schema 0, this valis needs ")
    assert done.stderr.rstrip().endswith(": run valis db migrate")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["condense", "--genesis", "--site-facts", "{missing}", "--unit-command", "/bin/false",
          "--dns-address", "127.0.0.1:5399", "--run-account", RUN_USER],
         "cannot read the site-facts file"),
        (["condense", "--from-backup", "{missing}", "--unit-command", "/bin/false",
          "--dns-address", "127.0.0.1:5399", "--run-account", RUN_USER],
         "the backup set"),
        (["dist", "index", "{missing}"], "is not a directory"),
        (["demo", "--zone", "{zone}", "--cache-dir", "{readonly}/demo"],
         "cannot make the demo directory"),
    ],
)
def test_missing_inputs_and_unwritable_directories_are_one_line(
    run_account_dir: Path, argv: list[str], says: str
) -> None:
    zone = run_account_dir / "example.test.zone"
    zone.write_text(soa_zone(ZONE))
    os.chmod(zone, 0o644)
    readonly = run_account_dir / "ro"
    readonly.mkdir(mode=0o755)
    filled = [
        word.format(missing=run_account_dir / "missing", zone=zone, readonly=readonly)
        for word in argv
    ]
    done = run_as(RUN_USER, ["valis", *filled])
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert says in done.stderr
    assert len(done.stderr.splitlines()) == 1

"""The proving ground's ``evacuate``: two coincident instances of one node at different
network locations (unit addresses 198.51.100.10 and 198.51.100.20, each on its own
ground) sharing ONE operator-state database.

Node A is deployed by ``condense --genesis`` (the library); its backup set is condensed
onto B by ``valis condense --from-backup --evacuate`` (the operator's command, which then
supervises B's unit). B answers authoritatively from its client; A's next heartbeat is fenced
out, so A stops and exits non-zero with the fenced-out reason; restarting A does not take
the fence back; and B's owner public key is A's. Both units are ``fulcrum launch``
supervised by ``ProcessUnitController``, as on a host without systemd.
"""

from __future__ import annotations

import pwd
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, PgCluster, connect_as, ensure_system_user
from tests.scenario.proving_ground import (
    FULCRUM,
    Ground,
    dig,
    sweep_stale,
    unit_config_text,
)
from tests.scenario.resident_harness import make_state_dir, resident_runtime, site_facts
from valis_core.apply.unit_control import ProcessUnitController
from valis_core.identity.custody import load_or_create_keyfile, public_key_hex
from valis_core.identity.instance import holder_name, read_instance
from valis_core.operator_state.fence import read_instance_fence
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.ops.backup import create_backup, verify_backup_set
from valis_core.ops.condense import CondenseRequest, RequestKind, condense_onto_host
from valis_core.ops.condense_host import (
    LocalCondenseHost,
    ask_soa_in_netns,
    let_unit_notify,
)
from valis_core.ops.host_readiness import AssessConfig, assess_host
from valis_core.ops.local_probe import LocalHostProbe

ZONE = "example.test."
ADDRESS_A = "198.51.100.10"
ADDRESS_B = "198.51.100.20"
EXIT_TIMEOUT = 60.0

# Asks from a client namespace; prints the response's wire form in hex.
@pytest.fixture
def grounds() -> Iterator[tuple[Ground, Ground]]:
    require_root()
    sweep_stale()
    first = Ground().build()
    try:
        second = Ground().build()
        try:
            yield first, second
        finally:
            second.cleanup()
    finally:
        first.cleanup()


def assess_supervised(state_dir: Path, config: Path, cluster: PgCluster) -> None:
    """Every clause of ``valis assess`` for a host run by fulcrum must pass."""
    assessment = assess_host(LocalHostProbe(), AssessConfig(
        state_dir=str(state_dir),
        run_account=RUN_USER,
        launcher_config=str(config),
        pg_socket_dir=str(cluster.cluster.socket_dir),
        pg_port=cluster.cluster.port,
    ))
    assert assessment.ok, assessment.failed


class Node:
    """One location of the node: a ground, a state directory, fulcrum as its unit."""

    def __init__(self, workdir: Path, ground: Ground, address: str, cluster: PgCluster, *,
                 dsn: str, location: str) -> None:
        account = ensure_system_user(RUN_USER)
        owner = (account.pw_uid, account.pw_gid)
        self.ground = ground
        self.state_dir = make_state_dir(workdir)
        self.log = workdir / f"unit-{location}.log"
        self.config = config = workdir / f"launcher-{location}.toml"
        config.write_text(unit_config_text(ground, [resident_runtime()], unit_ip=address))
        config.chmod(0o644)
        self.facts = facts = site_facts(dsn, VALIS_LOCATION=location)
        self.command = command = ["/bin/sh", "-c", 'exec "$@" >>"$UNIT_LOG" 2>&1', "sh",
                                  FULCRUM, "launch", "--config", str(config)]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "UNIT_LOG": str(self.log),
               "STATE_DIRECTORY": str(self.state_dir), **facts}
        self.unit = ProcessUnitController(command, env=env, cwd="/", stop_timeout=20.0)
        let_unit_notify(self.unit, owner)
        self.host = LocalCondenseHost(
            state_dir=self.state_dir,
            run_account=owner,
            connect=lambda: connect_as(RUN_USER, dsn, autocommit=True),
            unit=self.unit,
            holder=f"{facts['VALIS_NODE_NAME']}@{location}",
            dns_address=(address, 53),
            assess=lambda: assess_supervised(self.state_dir, config, cluster),
            facts=facts,
            ready_timeout=120.0,
            ask_soa=ask_soa_in_netns(ground.client),
        )

    def owner_key(self) -> str:
        return public_key_hex(load_or_create_keyfile(self.state_dir))


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    made: list[Node] = []
    yield made
    for node in made:
        node.unit.close()


def test_evacuate_moves_the_node_to_b_and_fences_a_out_for_good(
    grounds: tuple[Ground, Ground], pg_cluster: PgCluster, zone_dsn: str,
    run_account_dir: Path, nodes: list[Node],
) -> None:
    ground_a, ground_b = grounds
    a = Node(run_account_dir, ground_a, ADDRESS_A, pg_cluster, dsn=zone_dsn,
             location="ground-a")
    nodes.append(a)
    condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE]), a.host)
    assert dig(ground_a.client, ADDRESS_A, ZONE).authoritative

    archive = run_account_dir / "a.backup"
    create_backup(a.state_dir, archive)
    generation = verify_backup_set(archive).generation

    # B is condensed by the operator's command, which then supervises B's unit.
    b = Node(run_account_dir, ground_b, ADDRESS_B, pg_cluster, dsn=zone_dsn,
             location="ground-b")
    nodes.append(b)
    facts_file = run_account_dir / "site-facts-b.env"
    write_site_facts(facts_file, b.facts)
    argv = [
        str(Path(sys.executable).parent / "valis"), "condense",
        "--from-backup", str(archive), "--evacuate", "--site-facts", str(facts_file),
        "--state-dir", str(b.state_dir), "--unit-command", shlex.join(b.command),
        "--dns-address", f"{ADDRESS_B}:53", "--ask-in-netns", ground_b.client,
        "--launcher-config", str(b.config), "--binary", resident_runtime(),
        "--pg-socket-dir", str(pg_cluster.cluster.socket_dir),
        "--pg-port", str(pg_cluster.cluster.port),
    ]  # fmt: skip
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "UNIT_LOG": str(b.log)}
    stderr_path = run_account_dir / "condense-b.stderr"
    with stderr_path.open("w") as stderr, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
    ) as cli:
        try:
            assert cli.stdout is not None
            line = cli.stdout.readline()
            assert line.startswith("valis: condensed (evacuate)"), (
                line, stderr_path.read_text(), b.log.read_text() if b.log.exists() else ""
            )

            answer = dig(ground_b.client, ADDRESS_B, ZONE)
            assert (answer.status, answer.authoritative) == ("NOERROR", True), answer.raw

            status = a.unit.wait_exit(EXIT_TIMEOUT)
            assert status not in (0, None), a.log.read_text()
            assert "fenced out" in a.log.read_text()

            a.unit.restart()
            assert not a.unit.wait_up(EXIT_TIMEOUT), a.log.read_text()
            with pg_cluster.connect(zone_dsn) as conn:
                fence = read_instance_fence(conn)
            assert fence is not None
            b_holder = holder_name("node-a@ground-b", read_instance(b.state_dir) or "")
            assert (fence.generation, fence.holder) == (generation + 1, b_holder)
            assert cli.poll() is None, "B's unit stopped"
            assert dig(ground_b.client, ADDRESS_B, ZONE).authoritative
            assert b.owner_key() == a.owner_key()
            assert pwd.getpwuid(b.state_dir.stat().st_uid).pw_name == RUN_USER

            cli.send_signal(signal.SIGTERM)
            assert cli.wait(60) == 0, stderr_path.read_text()
        finally:
            if cli.poll() is None:
                cli.kill()

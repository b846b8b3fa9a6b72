"""Condense onto a real host: deploy from genesis, then restore a killed node from its
backup set into a fresh state directory.

The unit is supervised by ``ProcessUnitController``: a root stand-in for the launcher
binds the DNS pair on a loopback port and execs the resident as the run account (the
inherited-descriptor path it takes under fulcrum), and the resident's READY=1 reaches
the controller's notify socket.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rdatatype
import pytest

from tests.conftest import require_root
from tests.scenario.module_dist import HELLO, hello_wheel, pin_of, publish
from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import RUN_USER, PgCluster, connect_as
from tests.scenario.proving_ground import wait_for
from tests.scenario.resident_harness import make_state_dir, resident_runtime, site_facts
from valis_core.apply.unit_control import ProcessUnitController
from valis_core.dns.zone import parse_zone_text
from valis_core.identity.custody import keyfile_path
from valis_core.operator_state.fence import read_instance_fence
from valis_core.operator_state.site_facts import write_site_facts
from valis_core.operator_state.zones import replace_zone
from valis_core.ops.backup import VerifiedBackup, create_backup, verify_backup_set
from valis_core.ops.condense import (
    CondenseFailed,
    CondenseRequest,
    RequestKind,
    StepKind,
    condense_onto_host,
)
from valis_core.ops.condense_host import LocalCondenseHost, let_unit_notify
from valis_core.ops.host_readiness import AssessConfig, assess_host
from valis_core.ops.local_probe import LocalHostProbe
from valis_core.plugin.dist_home import register_dist
from valis_core.plugin.installed import modules_dir
from valis_core.store.head import read_store_head

ZONE = "example.test."
HOLDER = "node-a@loopback"

LAUNCHER = """
import os, socket, sys
from pathlib import Path
from valis_core.resident.dev_launcher import bind_dns_pair, resident_argv
port, state_dir, uid, gid, runtime = sys.argv[1:6]
udp, tcp = bind_dns_pair(socket.AF_INET, "127.0.0.1", int(port))
for sock in (udp, tcp):
    os.set_inheritable(sock.fileno(), True)
argv = resident_argv([runtime], udp.fileno(), tcp.fileno(), int(port), Path(state_dir))
os.execvp("setpriv", ["setpriv", "--reuid=" + uid, "--regid=" + gid, "--init-groups", "--",
                      *argv])
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_account() -> tuple[int, int]:
    account = pwd.getpwnam(RUN_USER)
    return account.pw_uid, account.pw_gid


@pytest.fixture
def zone_dsn(pg_cluster: PgCluster, state_dsn: str) -> str:
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone(ZONE), ZONE))
    return state_dsn


@pytest.fixture
def workdir(run_account_dir: Path) -> Path:
    require_root()
    return run_account_dir


def assess_unsupervised(state_dir: Path, cluster: PgCluster) -> None:
    """Every clause of ``valis assess`` for a host without fulcrum must pass."""
    config = AssessConfig(
        state_dir=str(state_dir),
        run_account=RUN_USER,
        binary=(resident_runtime(),),
        supervised=False,
        pg_socket_dir=str(cluster.cluster.socket_dir),
        pg_port=cluster.cluster.port,
    )
    assessment = assess_host(LocalHostProbe(), config)
    assert assessment.ok, [clause for clause in assessment.clauses if not clause.ok]


class Node:
    """One node: its state directory, its unit, the host condense runs against."""

    def __init__(self, workdir: Path, cluster: PgCluster, dsn: str, *, facts: bool,
                 dist_home: Path | None = None) -> None:
        self.state_dir = make_state_dir(workdir)
        self.port = free_port()
        uid, gid = run_account()
        command = [
            sys.executable, "-c", LAUNCHER, str(self.port), str(self.state_dir), str(uid),
            str(gid), resident_runtime(),
        ]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        self.unit = ProcessUnitController(command, env=env, cwd="/", stop_timeout=10.0)
        let_unit_notify(self.unit, (uid, gid))
        self.host = LocalCondenseHost(
            state_dir=self.state_dir,
            run_account=(uid, gid),
            connect=lambda: connect_as(RUN_USER, dsn, autocommit=True),
            unit=self.unit,
            holder=HOLDER,
            dns_address=("127.0.0.1", self.port),
            assess=lambda: assess_unsupervised(self.state_dir, cluster),
            facts=site_facts(dsn) if facts else None,
        )
        if dist_home is not None:
            self.host.dist_home = dist_home

    def ask_soa(self) -> dns.message.Message:
        return ask_soa(self.port)


@pytest.fixture
def nodes(workdir: Path) -> Iterator[list[Node]]:
    made: list[Node] = []
    yield made
    for node in made:
        node.unit.close()


def deploy(workdir: Path, cluster: PgCluster, dsn: str, nodes: list[Node], *,
           modules: tuple[str, ...] = (), dist_home: Path | None = None) -> Node:
    node = Node(workdir, cluster, dsn, facts=True, dist_home=dist_home)
    nodes.append(node)
    condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE], modules=modules),
                       node.host)
    return node


def back_up_and_kill(node: Node, workdir: Path) -> tuple[VerifiedBackup, int | None]:
    """The node's backup set, verified; then the node killed without warning (its exit
    status returned)."""
    archive = workdir / "origin.backup"
    create_backup(node.state_dir, archive)
    backed_up = verify_backup_set(archive)
    node.unit.signal(signal.SIGKILL)
    return backed_up, node.unit.wait_exit(30)


def restore_request(backed_up: VerifiedBackup) -> CondenseRequest:
    return CondenseRequest(
        RequestKind.RESTORE, [ZONE], backup=str(backed_up.archive),
        backup_generation=backed_up.generation,
    )


def ask_soa(port: int, timeout: float = 5) -> dns.message.Message:
    query = dns.message.make_query(ZONE, dns.rdatatype.SOA)
    return dns.query.udp(query, "127.0.0.1", port=port, timeout=timeout)


@contextlib.contextmanager
def condensing(argv: list[str], stderr_path: Path, kind: str) -> Iterator[subprocess.Popen[str]]:
    """``valis condense`` running, past its first line (which must say it condensed);
    killed on the way out if still running."""
    with stderr_path.open("w") as stderr, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=stderr, text=True
    ) as cli:
        try:
            assert cli.stdout is not None
            line = cli.stdout.readline()
            assert line.startswith(f"valis: condensed ({kind})"), (line, stderr_path.read_text())
            yield cli
        finally:
            if cli.poll() is None:
                cli.kill()


def fence_generation(pg_cluster: PgCluster, dsn: str) -> int:
    with pg_cluster.connect(dsn) as conn:
        fence = read_instance_fence(conn)
    assert fence is not None
    return fence.generation


def test_condense_genesis_deploys_a_node_that_answers_its_apex_authoritatively(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    node = deploy(workdir, pg_cluster, zone_dsn, nodes)
    assert node.unit.is_up()
    response = node.ask_soa()
    assert response.flags & dns.flags.AA
    assert fence_generation(pg_cluster, zone_dsn) == 0
    head = read_store_head(node.state_dir)
    assert head is not None
    assert head.generation == 0


def test_condense_restore_reproduces_the_owner_seed_serves_and_advances_the_fence(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    origin = deploy(workdir, pg_cluster, zone_dsn, nodes)
    backed_up, status = back_up_and_kill(origin, workdir)
    assert status != 0

    restored = Node(workdir, pg_cluster, zone_dsn, facts=False)
    nodes.append(restored)
    condense_onto_host(restore_request(backed_up), restored.host)

    seed = keyfile_path(restored.state_dir).read_bytes()
    assert seed == keyfile_path(origin.state_dir).read_bytes()
    assert restored.ask_soa().flags & dns.flags.AA
    assert fence_generation(pg_cluster, zone_dsn) == backed_up.generation + 1
    head = read_store_head(restored.state_dir)
    assert head is not None
    assert head.generation == backed_up.generation + 1


def test_condense_a_zone_missing_from_operator_state_never_starts_the_unit(
    pg_cluster: PgCluster, state_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    node = Node(workdir, pg_cluster, state_dsn, facts=True)
    nodes.append(node)
    with pytest.raises(CondenseFailed) as failed:
        condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE]), node.host)
    assert failed.value.step.kind is StepKind.PROVE_ZONE_SERVABLE
    assert node.unit.pid is None
    with pg_cluster.connect(state_dsn) as conn:
        assert read_instance_fence(conn) is None
    assert os.listdir(node.state_dir)  # durable state came before the refusal


def condense_argv(
    pg_cluster: PgCluster, state_dir: Path, port: int, start: list[str]
) -> list[str]:
    """``valis condense`` for a loopback unit on ``port`` (the launcher stand-in)."""
    uid, gid = run_account()
    unit_command = shlex.join([
        sys.executable, "-c", LAUNCHER, str(port), str(state_dir), str(uid), str(gid),
        resident_runtime(),
    ])
    return [
        str(Path(sys.executable).parent / "valis"), "condense", *start,
        "--state-dir", str(state_dir),
        "--unit-command", unit_command, "--dns-address", f"127.0.0.1:{port}",
        "--unsupervised", "--binary", resident_runtime(),
        "--pg-socket-dir", str(pg_cluster.cluster.socket_dir),
        "--pg-port", str(pg_cluster.cluster.port),
    ]


def test_valis_condense_genesis_deploys_with_a_module_serves_and_stops_the_unit_with_it(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path
) -> None:
    state_dir = make_state_dir(workdir)
    facts_file = workdir / "site-facts.env"
    write_site_facts(facts_file, site_facts(zone_dsn))
    port = free_port()
    home = workdir / "dist-home"
    register_dist(home, publish(workdir / "wheelhouse", hello_wheel()))
    argv = condense_argv(
        pg_cluster, state_dir, port, ["--genesis", "--site-facts", str(facts_file),
                                      "--module", "valis-hello==1.0", "--dist-home", str(home)]
    )
    with condensing(argv, workdir / "condense.stderr", "genesis") as cli:
        assert ask_soa(port).flags & dns.flags.AA
        wait_for((state_dir / "hello.started").exists, 30.0, "the module to start")
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(30) == 0
        assert (state_dir / "hello.drained").exists()
        with pytest.raises(dns.exception.Timeout):
            ask_soa(port, timeout=1)


def test_valis_condense_from_backup_restores_with_the_backups_site_facts(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    origin = deploy(workdir, pg_cluster, zone_dsn, nodes)
    backed_up, _ = back_up_and_kill(origin, workdir)

    state_dir = make_state_dir(workdir)
    port = free_port()
    argv = condense_argv(pg_cluster, state_dir, port, ["--from-backup", str(backed_up.archive)])
    with condensing(argv, workdir / "restore.stderr", "restore") as cli:
        assert ask_soa(port).flags & dns.flags.AA
        assert keyfile_path(state_dir).read_bytes() == keyfile_path(
            origin.state_dir
        ).read_bytes()
        assert fence_generation(pg_cluster, zone_dsn) == 1
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(30) == 0


def test_a_node_deployed_with_a_module_runs_it_and_a_restore_reinstalls_it(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    wheel = hello_wheel()
    home = workdir / "dist-home"
    register_dist(home, publish(workdir / "wheelhouse", wheel))
    origin = deploy(workdir, pg_cluster, zone_dsn, nodes, modules=("valis-hello==1.0",),
                    dist_home=home)

    head = read_store_head(origin.state_dir)
    assert head is not None
    assert head.modules == (pin_of(HELLO, "1.0", wheel),)
    wait_for((origin.state_dir / "hello.started").exists, 30.0, "the module to start")
    assert (origin.state_dir / "hello.started").read_text() == "node-a 0\n"
    installed = modules_dir(origin.state_dir)
    assert (installed.stat().st_uid, installed.stat().st_gid) == run_account()

    backed_up, _ = back_up_and_kill(origin, workdir)

    restored = Node(workdir, pg_cluster, zone_dsn, facts=False, dist_home=home)
    nodes.append(restored)
    condense_onto_host(restore_request(backed_up), restored.host)
    assert restored.ask_soa().flags & dns.flags.AA
    wait_for((restored.state_dir / "hello.started").exists, 30.0, "the module to start")
    assert (restored.state_dir / "hello.started").read_text() == "node-a 1\n"
    restored.unit.signal(signal.SIGTERM)
    assert restored.unit.wait_exit(30) == 0
    assert (restored.state_dir / "hello.drained").exists()


def test_a_restore_whose_pinned_module_the_dist_no_longer_serves_never_starts(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    home = workdir / "dist-home"
    register_dist(home, publish(workdir / "wheelhouse", hello_wheel()))
    origin = deploy(workdir, pg_cluster, zone_dsn, nodes, modules=("valis-hello==1.0",),
                    dist_home=home)
    backed_up, _ = back_up_and_kill(origin, workdir)
    # the dist republishes 1.0 with other bytes: the pin no longer names what it serves
    publish(workdir / "wheelhouse", hello_wheel(greeting=b"# rebuilt\n"))

    restored = Node(workdir, pg_cluster, zone_dsn, facts=False, dist_home=home)
    nodes.append(restored)
    with pytest.raises(CondenseFailed, match="changed under the pin") as failed:
        condense_onto_host(restore_request(backed_up), restored.host)
    assert failed.value.step.kind is StepKind.CONDENSE_MODULES
    assert restored.unit.pid is None
    assert not modules_dir(restored.state_dir).exists()
    assert fence_generation(pg_cluster, zone_dsn) == 0


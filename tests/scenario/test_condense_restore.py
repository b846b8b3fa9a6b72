"""Condense onto a real host: deploy from genesis, then restore a killed node from its
backup set into a fresh state directory; one writer in every case, and a condense that
stopped part-way finished by running it again.

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
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rdatatype
import pytest

from tests.conftest import require_root
from tests.dns_ask import over_udp
from tests.scenario.loopback_serve import free_port
from tests.scenario.module_dist import HELLO, hello_wheel, pin_of, publish
from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import RUN_USER, PgCluster, connect_as
from tests.scenario.proving_ground import wait_for
from tests.scenario.resident_harness import (
    make_state_dir,
    resident_runtime,
    session_processes,
    site_facts,
)
from tests.scenario.setpriv_launcher import LAUNCHER
from valis_core.acting_as import acting_as
from valis_core.apply.unit_control import ProcessUnitController
from valis_core.config_store import store_path
from valis_core.dns.zone.build import parse_zone_text
from valis_core.fence import FenceState, SeedRefused
from valis_core.identity.custody import keyfile_path, load_or_create_keyfile
from valis_core.identity.instance import holder_name, read_instance
from valis_core.operator_state.fence import read_instance_fence, seed_instance_fence
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.operator_state.zones import replace_zone, served_zones
from valis_core.ops.assessment import AssessConfig
from valis_core.ops.backup import (
    BackupError,
    VerifiedBackup,
    create_backup,
    restore_backup,
    verify_backup_set,
)
from valis_core.ops.condense import (
    CondenseFailed,
    CondenseHost,
    CondenseRequest,
    RequestKind,
    Step,
    StepKind,
    condense_onto_host,
    plan_condense,
)
from valis_core.ops.condense_host import LocalCondenseHost, let_unit_notify
from valis_core.ops.host_readiness import assess_host
from valis_core.ops.local_probe import LocalHostProbe
from valis_core.plugin.dist_home import register_dist
from valis_core.plugin.installed import modules_dir
from valis_core.store.head import materialise_genesis, read_store_head

ZONE = "example.test."
HOLDER = "node-a@loopback"


def run_account() -> tuple[int, int]:
    account = pwd.getpwnam(RUN_USER)
    return account.pw_uid, account.pw_gid


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
    return over_udp(port, ZONE, "SOA", timeout=timeout)


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
    # The node's served zones recorded in operator state (issue 25 item 6): `valis zone
    # delete` refuses them without --force and `valis zone list` names the node.
    with pg_cluster.connect(zone_dsn) as conn:
        assert served_zones(conn) == {ZONE: ("node-a",)}


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


def unit_session(cli: subprocess.Popen[str]) -> int:
    """The session of the unit ``valis condense`` started (its only child leads one)."""
    children = Path(f"/proc/{cli.pid}/task/{cli.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@contextlib.contextmanager
def no_session_left(sessions: list[int]) -> Iterator[None]:
    """Every process of the sessions listed is SIGKILLed on the way out, so a failing
    test leaves no unit running."""
    try:
        yield
    finally:
        for sid in sessions:
            for pid in session_processes(sid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_valis_condense_genesis_deploys_with_a_module_serves_and_stops_the_unit_with_it(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, stop: signal.Signals
) -> None:
    # SIGHUP is the operator's terminal gone: the unit runs in a session of its own and
    # would outlive a condense that died of it, unsupervised.
    state_dir = make_state_dir(workdir)
    facts_file = workdir / "site-facts.env"
    write_site_facts(facts_file, site_facts(zone_dsn))
    port = free_port()
    home = workdir / "dist-home"
    wheel = hello_wheel()
    register_dist(home, publish(workdir / "wheelhouse", wheel))
    argv = condense_argv(
        pg_cluster, state_dir, port, ["--genesis", "--site-facts", str(facts_file),
                                      "--module", "valis-hello==1.0", "--dist-home", str(home)]
    )
    sessions: list[int] = []
    with no_session_left(sessions), condensing(argv, workdir / "condense.stderr",
                                               "genesis") as cli:
        sessions.append(unit_session(cli))
        # The pin made is told, to compare with the wheel the operator published.
        pinned = f"pinned valis-hello==1.0 to sha256 {pin_of(HELLO, '1.0', wheel).sha256}"
        assert pinned in (workdir / "condense.stderr").read_text()
        assert ask_soa(port).flags & dns.flags.AA
        wait_for((state_dir / "hello.started").exists, 30.0, "the module to start")
        cli.send_signal(stop)
        assert cli.wait(30) == 0
        assert (state_dir / "hello.drained").exists()
        with pytest.raises(dns.exception.Timeout):
            ask_soa(port, timeout=1)
        assert session_processes(sessions[0]) == []


def test_a_rerun_of_a_lost_condense_stops_the_unit_it_left_then_serves_its_own(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path
) -> None:
    state_dir = make_state_dir(workdir)
    facts_file = workdir / "site-facts.env"
    write_site_facts(facts_file, site_facts(zone_dsn))
    port = free_port()
    argv = condense_argv(pg_cluster, state_dir, port,
                         ["--genesis", "--site-facts", str(facts_file)])
    lost_log = workdir / "lost.stderr"
    sessions: list[int] = []
    with no_session_left(sessions):
        with condensing(argv, lost_log, "genesis") as lost:
            sessions.append(unit_session(lost))
            assert ask_soa(port).flags & dns.flags.AA
            lost.kill()  # the supervisor lost; its unit, in its own session, serves on
            lost.wait(30)
        assert ask_soa(port).flags & dns.flags.AA
        with condensing(argv, workdir / "rerun.stderr", "genesis") as rerun:
            sessions.append(unit_session(rerun))
            assert session_processes(sessions[0]) == [], "the lost condense's unit runs on"
            # It was stopped, not killed: the resident's own stop, logged where it wrote.
            left = lost_log.read_text()
            assert "stopping on SIGTERM" in left, left
            assert left.rstrip().endswith("stopped"), left
            assert ask_soa(port).flags & dns.flags.AA
            rerun.send_signal(signal.SIGTERM)
            assert rerun.wait(30) == 0
        assert session_processes(sessions[1]) == []


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

# -- one writer in every case, and recovery is re-run (contract §6, §7) --------------------
#
# Two genesis condenses against one database: the second is refused at the fence and never
# starts its unit, while the first keeps serving and writing. A restore that stops at any
# step (before its claim, between the claim and the head, after its unit started) is
# finished by running the same condense again against the same state directory.


def beats(pg_cluster: PgCluster, dsn: str) -> int:
    with pg_cluster.connect(dsn) as conn:
        row = conn.execute("SELECT coalesce(sum(beats), 0) FROM node_liveness").fetchone()
    assert row is not None
    return int(row[0])


def test_a_second_genesis_on_one_database_never_starts_and_the_first_keeps_writing(
    pg_cluster: PgCluster, zone_dsn: str, workdir: Path, nodes: list[Node]
) -> None:
    first = deploy(workdir, pg_cluster, zone_dsn, nodes)
    with pg_cluster.connect(zone_dsn) as conn:
        held = read_instance_fence(conn)
    assert held is not None
    assert held.generation == 0

    # Configured exactly alike (same node, same location): a second host, or this node's
    # state directory made anew.
    second = Node(workdir, pg_cluster, zone_dsn, facts=True)
    nodes.append(second)
    with pytest.raises(CondenseFailed) as failed:
        condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE]), second.host)
    assert failed.value.step.kind is StepKind.SEED_FENCE
    assert isinstance(failed.value.cause, SeedRefused)
    assert second.unit.pid is None
    with pg_cluster.connect(zone_dsn) as conn:
        assert read_instance_fence(conn) == held

    # The first instance still serves, and still writes (its fenced heartbeat lands).
    assert first.ask_soa().flags & dns.flags.AA
    before = beats(pg_cluster, zone_dsn)
    wait_for(lambda: beats(pg_cluster, zone_dsn) > before, 30.0, "the first node to write")
    assert first.unit.is_up()


# -- recovery is re-run --------------------------------------------------------------------


@attrs.define
class FailingAt:
    """The real host, failing once at step ``number`` (1-based): before running it, or
    after it ran (a crash right after the step's effect)."""

    host: Node
    number: int
    after: bool
    seen: int = 0

    def __getattr__(self, name: str) -> object:
        real = getattr(self.host.host, name)
        if not callable(real) or name not in {kind.value for kind in StepKind}:
            return real

        def step(step: Step) -> None:
            self.seen += 1
            if self.seen == self.number and not self.after:
                raise RuntimeError(f"injected failure before {step.describe()}")
            real(step)
            if self.seen == self.number:
                raise RuntimeError(f"injected failure after {step.describe()}")

        return step


@pytest.fixture(scope="module")
def origin_backup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backup set of a node that ran at generation 0 (its seed minted, its head and
    configuration store written), made once for every trial."""
    home = tmp_path_factory.mktemp("origin")
    state_dir = home / "state"
    state_dir.mkdir(mode=0o700)
    materialise_genesis(state_dir)
    load_or_create_keyfile(state_dir)
    store = store_path(state_dir)
    store.parent.mkdir(mode=0o700)
    write_site_facts(store, site_facts("postgresql://valis@/elsewhere?host=/nowhere"))
    archive = home / "origin.backup"
    create_backup(state_dir, archive)
    return archive


@pytest.fixture
def seeded_dsn(pg_cluster: PgCluster, state_dsn: str) -> str:
    """Operator state with the zone, and the fence as the origin left it at genesis."""
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone(ZONE), ZONE))
        conn.commit()
        seed_instance_fence(conn, "node-a@origin#0123456789abcdef")
    return state_dsn


EVACUATE_STEPS = len(
    plan_condense(CondenseRequest(RequestKind.EVACUATE, [ZONE], backup="b", backup_generation=0))
)
TRIALS = [(number, True) for number in range(1, EVACUATE_STEPS + 1)] + [(1, False)]


@pytest.mark.parametrize(("number", "after"), TRIALS)
def test_an_evacuation_that_failed_at_any_step_finishes_when_run_again(
    pg_cluster: PgCluster, seeded_dsn: str, workdir: Path, nodes: list[Node],
    origin_backup: Path, *, number: int, after: bool,
) -> None:
    request = CondenseRequest(
        RequestKind.EVACUATE, [ZONE], backup=str(origin_backup), backup_generation=0
    )
    node = Node(workdir, pg_cluster, seeded_dsn, facts=True)
    nodes.append(node)
    with pytest.raises(CondenseFailed, match="injected failure") as failed:
        condense_onto_host(request, cast(CondenseHost, FailingAt(node, number, after)))
    assert len(failed.value.completed) == number - 1

    report = condense_onto_host(request, node.host)  # the same condense, run again

    assert len(report.completed) == EVACUATE_STEPS
    token = read_instance(node.state_dir)
    assert token is not None
    with pg_cluster.connect(seeded_dsn) as conn:
        assert read_instance_fence(conn) == FenceState(1, holder_name(HOLDER, token))
    head = read_store_head(node.state_dir)
    assert head is not None
    assert head.generation == 1
    assert node.ask_soa().flags & dns.flags.AA
    before = beats(pg_cluster, seeded_dsn)
    wait_for(lambda: beats(pg_cluster, seeded_dsn) > before, 30.0, "the node to write")


def test_a_second_restore_of_one_backup_is_refused_at_the_fence(
    pg_cluster: PgCluster, seeded_dsn: str, workdir: Path, nodes: list[Node],
    origin_backup: Path,
) -> None:
    request = CondenseRequest(
        RequestKind.RESTORE, [ZONE], backup=str(origin_backup), backup_generation=0
    )
    # The first restore stops after its claim and never starts a unit.
    first = Node(workdir, pg_cluster, seeded_dsn, facts=True)
    nodes.append(first)
    claim = 1 + [step.kind for step in plan_condense(request)].index(StepKind.CLAIM_FENCE)
    with pytest.raises(CondenseFailed):
        condense_onto_host(request, cast(CondenseHost, FailingAt(first, claim, after=True)))
    # Another state directory restored from the same backup set is another instance: it
    # may not re-claim the first one's generation as if it were its own.
    second = Node(workdir, pg_cluster, seeded_dsn, facts=True)
    nodes.append(second)
    with pytest.raises(CondenseFailed) as failed:
        condense_onto_host(request, second.host)
    assert failed.value.step.kind is StepKind.CLAIM_FENCE
    # Running it again could never finish it: the message says the set is older than the
    # fence, which backup to use instead, and how to clear the directory it restored into.
    message = str(failed.value)
    holder = holder_name(HOLDER, read_instance(first.state_dir) or "")
    assert ("the backup set is older than the fence: it was taken at generation 0, and the "
            f"fence has since moved to generation 1, held by {holder}") in message
    assert f"restore from a backup set taken at generation 1 on the holder ({holder}" in message
    assert f"mv {second.state_dir} {second.state_dir}.older-" in message
    assert f"install -d -o {RUN_USER} -g {RUN_USER} -m 0700 {second.state_dir}" in message
    assert "run the same condense again" not in message
    assert "running it again cannot finish it" in message
    assert second.unit.pid is None
    with pg_cluster.connect(seeded_dsn) as conn:
        fence = read_instance_fence(conn)
    assert fence is not None
    assert fence.holder == holder_name(HOLDER, read_instance(first.state_dir) or "")
    assert fence_generation(pg_cluster, seeded_dsn) == 1


@pytest.fixture
def foreign_state(workdir: Path) -> Path:
    """A state directory holding another node's owner seed, written as the run account."""
    state_dir = make_state_dir(workdir)
    with acting_as(run_account()):
        load_or_create_keyfile(state_dir)
    return state_dir


def test_a_restore_never_resumes_over_another_nodes_state(
    foreign_state: Path, origin_backup: Path
) -> None:
    seed = keyfile_path(foreign_state).read_bytes()
    listing = sorted(p.name for p in foreign_state.iterdir())
    with pytest.raises(BackupError, match="other than this backup set's"):
        restore_backup(origin_backup, foreign_state, owner=run_account(), resume=True)
    assert keyfile_path(foreign_state).read_bytes() == seed
    assert sorted(p.name for p in foreign_state.iterdir()) == listing

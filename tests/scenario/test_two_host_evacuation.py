"""Evacuation between two hosts whose operator state is on a database host: the two-host
topology end to end, on the proving ground.

Host A and host B are namespaces on one internet, each holding its node's dedicated NIC;
the database host is a third (``two_hosts.DatabaseHost``), reached by both over TLS with
a client certificate only. The operator deploys A with ``valis condense --genesis`` run
on A, takes A's backup set (which carries A's client certificate), and evacuates onto B
with ``valis condense --from-backup --evacuate`` run on B: B reaches the database with
the certificate the backup brought, claims the fence and answers; A is fenced out and
stops, and whatever A does after the claim is refused — a restart, an operator verb, a
write with A's standing. A claim lost with the database (the database host restored
from a dump older than the claim) fences the successor out instead: the loser is refused
and stops, and two writers never both write.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.conftest import require_root
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, import_zone
from tests.scenario.pg import RUN_USER, connect_as, run_as, runtime_bin
from tests.scenario.proving_ground import dig, wait_for
from tests.scenario.resident_harness import inside_netns
from tests.scenario.two_hosts import (
    DatabaseHost,
    HostNode,
    certificate_dsn,
    ground_with_database,
)
from valis_core.fence import FencedOut, FenceState
from valis_core.identity.instance import holder_name, read_instance
from valis_core.operator_state.fence import fenced_transaction, read_instance_fence
from valis_core.ops.backup import create_backup, verify_backup_set
from valis_core.state_layout import OPERATOR_STATE_TLS, keyfile_path

ADDRESS_A = "198.51.100.10"
ADDRESS_B = "198.51.100.20"
EXIT_TIMEOUT = 60.0


@attrs.frozen
class Site:
    """The database host, and hosts A and B with their nodes' files written."""

    db: DatabaseHost
    a: HostNode
    b: HostNode
    database: str
    socket_dsn: str


@pytest.fixture
def site(open_base: Path) -> Iterator[Site]:
    require_root()
    with ground_with_database() as db:
        socket_dsn, database = db.pg.dsn, db.pg.database
        import_zone(db.pg, socket_dsn, EXAMPLE_ZONE, extra=EXAMPLE_WWW)
        a = HostNode.on(db.ground, "a", "198.51.100.31", ADDRESS_A, open_base)
        b = HostNode.on(db.ground, "b", "198.51.100.32", ADDRESS_B, open_base)
        # A is issued its client certificate; B gets none: the backup set brings A's.
        db.client_bundle(a.state_dir, node="origin-1")
        for node in (a, b):
            node.write_files(certificate_dsn(node.state_dir, database=database), EXAMPLE_ZONE)
        yield Site(db, a, b, database, socket_dsn)


@contextlib.contextmanager
def condensing(node: HostNode, kind: str, *how: str) -> Iterator[subprocess.Popen[str]]:
    """The operator's ``valis condense`` on ``node``'s host, past the line saying it
    condensed; stopped (SIGTERM, then killed) on the way out if still running."""
    stderr_path = node.workdir / f"condense-{node.label}-{kind}.stderr"
    with stderr_path.open("w") as stderr, subprocess.Popen(
        node.condense_argv(*how), stdout=subprocess.PIPE, stderr=stderr, text=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    ) as cli:
        try:
            assert cli.stdout is not None
            line = cli.stdout.readline()
            log = node.log.read_text() if node.log.exists() else ""
            assert line.startswith(f"valis: condensed ({kind})"), (
                line, stderr_path.read_text(), log)
            yield cli
        finally:
            if cli.poll() is None:
                cli.send_signal(signal.SIGTERM)
                try:
                    cli.wait(EXIT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    cli.kill()
                    cli.wait(EXIT_TIMEOUT)


def fence(site: Site) -> FenceState:
    with site.db.pg.connect(site.socket_dsn) as conn:
        found = read_instance_fence(conn)
    assert found is not None
    return found


def holder(node: HostNode) -> str:
    return holder_name(f"node-a@{node.location}", read_instance(node.state_dir) or "")


def test_a_node_evacuates_to_another_host_through_the_database_host_and_a_is_fenced_out(
    site: Site, open_base: Path
) -> None:
    a, b = site.a, site.b
    with condensing(a, "genesis", "--genesis") as cli_a:
        answer = dig(site.db.ground.client, ADDRESS_A, EXAMPLE_ZONE)
        assert (answer.status, answer.authoritative) == ("NOERROR", True), answer.raw
        assert fence(site) == FenceState(0, holder(a))

        archive = open_base / "a.backup"
        create_backup(a.state_dir, archive)
        assert verify_backup_set(archive).generation == 0

        with condensing(b, "evacuate", "--from-backup", str(archive), "--evacuate") as cli_b:
            # B reached the database with A's client certificate, restored from the set.
            for name in ("ca.crt", "client.crt", "client.key"):
                assert (b.state_dir / OPERATOR_STATE_TLS / name).read_bytes() == \
                    (a.state_dir / OPERATOR_STATE_TLS / name).read_bytes()
            assert keyfile_path(b.state_dir).read_bytes() == keyfile_path(a.state_dir).read_bytes()
            answer = dig(site.db.ground.client, ADDRESS_B, EXAMPLE_ZONE)
            assert (answer.status, answer.authoritative) == ("NOERROR", True), answer.raw
            assert fence(site) == FenceState(1, holder(b))

            # A's next heartbeat is fenced out: its unit stops, so its condense ends.
            assert cli_a.wait(EXIT_TIMEOUT) != 0
            assert "fenced out" in a.log.read_text()
            with pytest.raises(RuntimeError, match="no DNS response"):
                dig(site.db.ground.client, ADDRESS_A, EXAMPLE_ZONE, timeout=1.0)

            # Whatever A does after the claim is refused: a write with A's standing ...
            a_dsn = certificate_dsn(a.state_dir, database=site.database)
            with inside_netns(a.host):
                conn = connect_as(RUN_USER, a_dsn)
            with pytest.raises(FencedOut, match="was superseded"), conn, \
                    fenced_transaction(conn, FenceState(0, holder(a))) as cur:
                cur.execute("SELECT 1")
            # ... an operator verb on A's host ...
            done = run_as(RUN_USER, [str(runtime_bin() / "valis"), "zone", "sign",
                                     EXAMPLE_ZONE, "--state-dir", str(a.state_dir)],
                          netns=a.host, timeout=EXIT_TIMEOUT)
            assert done.returncode != 0
            assert "superseded" in done.stderr
            # ... and condensing A again from the old backup set: the fence moved on.
            again = subprocess.run(
                a.condense_argv("--from-backup", str(archive), "--evacuate"),
                capture_output=True, text=True, timeout=3 * EXIT_TIMEOUT, check=False,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
            assert again.returncode != 0
            assert fence(site) == FenceState(1, holder(b))
            assert dig(site.db.ground.client, ADDRESS_B, EXAMPLE_ZONE).authoritative
            assert cli_b.poll() is None, "B's unit stopped"


def test_a_successor_whose_claim_the_database_lost_is_refused_and_stops(
    site: Site, open_base: Path
) -> None:
    a, b = site.a, site.b
    with condensing(a, "genesis", "--genesis") as cli_a:
        archive = open_base / "a.backup"
        create_backup(a.state_dir, archive)
        cli_a.send_signal(signal.SIGTERM)
        assert cli_a.wait(EXIT_TIMEOUT) == 0
    with condensing(b, "evacuate", "--from-backup", str(archive), "--evacuate") as cli_b:
        assert dig(site.db.ground.client, ADDRESS_B, EXAMPLE_ZONE).authoritative
        # The database host is restored from a dump taken before B's claim: the fence is
        # A's again. B's standing is no longer the fence's, so B is fenced out and stops.
        with site.db.pg.connect(site.socket_dsn, autocommit=True) as conn:
            conn.execute("UPDATE instance_fence SET generation = 0, holder = %s",
                         (holder(a),))
        assert cli_b.wait(EXIT_TIMEOUT) != 0
        assert "fenced out" in b.log.read_text()
        wait_for(lambda: _silent(site, ADDRESS_B), EXIT_TIMEOUT, "B to stop answering")


def _silent(site: Site, address: str) -> bool:
    try:
        dig(site.db.ground.client, address, EXAMPLE_ZONE, timeout=1.0)
    except RuntimeError:
        return True
    return False

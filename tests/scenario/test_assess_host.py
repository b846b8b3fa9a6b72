"""`valis assess` on this very machine: the local probe against real files, accounts, a
real PostgreSQL socket, a real binary's self-test, and real network namespaces."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from valis_core.launcher_config import LauncherConfig, render_launcher_config
from valis_core.ops.assessment import AssessConfig
from valis_core.ops.host_readiness import assess_host
from valis_core.ops.local_probe import LocalHostProbe

VALIS = Path(sys.executable).parent / "valis"


@attrs.frozen
class Host:
    """Paths of one provisioned host, all under a scratch root."""

    root: Path
    state_dir: Path
    binary: Path
    launcher_config: Path
    site_facts: Path


def _launcher_text(binary: Path) -> str:
    import ipaddress

    return render_launcher_config(
        LauncherConfig(
            netns_name="valis",
            unit_ip=ipaddress.ip_address("198.51.100.10"),
            unit_cidr=24,
            public_interface="ens7",
            public_gateway=ipaddress.ip_address("198.51.100.1"),
            mode="dedicated",
            designated_port=53,
            catchall_object_path="/opt/valis/lib/sk-lookup-catchall.bpf.o",
            valis_command=(str(binary),),
        )
    )


@pytest.fixture
def host() -> Iterator[Host]:
    """A well-provisioned host: state directory owned by ``valis``, the binary (a wrapper
    of this checkout's ``valis``) at a world-traversable path, a root-owned launcher
    config naming it, and site facts with no development listener."""
    require_root()
    account = ensure_system_user(RUN_USER)
    root = Path(tempfile.mkdtemp(prefix="valis-assess-", dir="/tmp"))
    try:
        root.chmod(0o755)
        state = root / "var-lib-valis-dns"
        state.mkdir(mode=0o700)
        os.chown(state, account.pw_uid, account.pw_gid)
        binary = root / "opt-valis" / "bin" / "valis"
        binary.parent.mkdir(parents=True, mode=0o755)
        binary.write_text(f'#!/bin/sh\nexec {VALIS} "$@"\n')
        binary.chmod(0o755)
        config = root / "launcher.toml"
        config.write_text(_launcher_text(binary))
        config.chmod(0o644)
        facts = root / "site-facts.env"
        facts.write_text('VALIS_NODE_NAME="origin-a"\n')
        yield Host(root, state, binary, config, facts)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _config(host: Host, pg: PgCluster) -> AssessConfig:
    return AssessConfig(
        state_dir=str(host.state_dir),
        run_account=RUN_USER,
        launcher_config=str(host.launcher_config),
        pg_socket_dir=str(pg.cluster.socket_dir),
        pg_port=pg.cluster.port,
        environment_files=(str(host.site_facts),),
    )


def test_a_provisioned_host_passes_every_clause(host: Host, pg_cluster: PgCluster) -> None:
    assessment = assess_host(LocalHostProbe(), _config(host, pg_cluster))
    assert [c.name for c in assessment.failed] == []
    assert "serving codec answered" in assessment.clause("binary-serving-capable").detail


def test_a_deliberately_broken_host_reports_each_broken_clause_and_nothing_else(
    host: Host, pg_cluster: PgCluster
) -> None:
    os.chown(host.state_dir, 0, 0)  # state directory owned by root
    private = host.root / "home-operator"
    private.mkdir(mode=0o700)  # the binary under a 0700 directory
    binary = private / "valis"
    shutil.copy2(host.binary, binary)
    host.launcher_config.unlink()  # launcher config missing
    config = attrs.evolve(_config(host, pg_cluster), binary=(str(binary),))

    failed = assess_host(LocalHostProbe(), config).failed
    assert [c.name for c in failed] == ["state-directory", "binary-traversable", "launcher-config"]
    assert f"owned by uid 0, not by the run account {RUN_USER}" in failed[0].detail
    assert f"cannot traverse {private} " in failed[1].detail
    assert f"{host.launcher_config} is missing" in failed[2].detail


def test_the_cli_reports_json_and_fails_on_a_broken_clause(
    host: Host, pg_cluster: PgCluster
) -> None:
    facts = host.site_facts
    facts.write_text('VALIS_NODE_NAME="origin-a"\nVALIS_REPL_PORT="4005"\n')
    argv: list[str | Path] = [
        VALIS, "assess", "--json",
        "--state-dir", host.state_dir,
        "--run-account", RUN_USER,
        "--launcher-config", host.launcher_config,
        "--pg-socket-dir", pg_cluster.cluster.socket_dir,
        "--pg-port", str(pg_cluster.cluster.port),
        "--site-facts", facts,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    failed = [c for c in report["clauses"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["no-development-listener"]
    assert f"{facts}:2" in failed[0]["detail"]
    assert failed[0]["remedy"]

    facts.write_text('VALIS_NODE_NAME="origin-a"\n')
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["ok"] is True

    # The configuration store is what the node reads after its first boot.
    store = host.state_dir / "config" / "site-facts.env"
    store.parent.mkdir()
    store.write_text('VALIS_NODE_NAME="origin-a"\nVALIS_REPL_PORT="4005"\n')
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    failed = [c for c in json.loads(done.stdout)["clauses"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["no-development-listener"]
    assert f"{store}:2" in failed[0]["detail"]


def test_a_binary_that_cannot_answer_fails_the_serving_clause(
    host: Host, pg_cluster: PgCluster
) -> None:
    host.binary.write_text('#!/bin/sh\necho "serving codec not available" >&2\nexit 1\n')
    clause = assess_host(LocalHostProbe(), _config(host, pg_cluster)).clause(
        "binary-serving-capable"
    )
    assert not clause.ok
    assert "exited 1: serving codec not available" in clause.detail


def test_a_socket_nobody_listens_on_fails_the_postgresql_clause(host: Host) -> None:
    socket_dir = host.root / "pg"
    socket_dir.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(socket_dir / ".s.PGSQL.5432"))  # bound, never listening
        config = AssessConfig(pg_socket_dir=str(socket_dir))
        clause = assess_host(LocalHostProbe(), config).clause("postgresql-socket")
    assert not clause.ok
    assert "refuses connections" in clause.detail


# -- public network, derived inside a real network namespace ---------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def _network() -> Iterator[tuple[str, str]]:
    """A node namespace whose ``pub0`` (198.51.100.10/24) reaches a gateway namespace
    (198.51.100.1) over a veth pair, with a default route via the gateway."""
    tag = f"{os.getpid() % 100000}"
    node, gateway = f"vat-node-{tag}", f"vat-gw-{tag}"
    _ip("netns", "add", node)
    try:
        _ip("netns", "add", gateway)
        try:
            _ip("link", "add", f"vat{tag}a", "type", "veth", "peer", "name", f"vat{tag}b")
            _ip("link", "set", f"vat{tag}a", "netns", node, "name", "pub0")
            _ip("link", "set", f"vat{tag}b", "netns", gateway, "name", "gw0")
            _ip("-n", node, "addr", "add", "198.51.100.10/24", "dev", "pub0")
            _ip("-n", gateway, "addr", "add", "198.51.100.1/24", "dev", "gw0")
            for ns, dev in ((node, "pub0"), (gateway, "gw0")):
                _ip("-n", ns, "link", "set", dev, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", node, "route", "add", "default", "via", "198.51.100.1")
            yield node, gateway
        finally:
            _ip("netns", "del", gateway)
    finally:
        _ip("netns", "del", node)


def _assess_interface(node: str) -> dict[str, object]:
    done = subprocess.run(
        ["ip", "netns", "exec", node, VALIS, "assess", "--json", "--interface", "pub0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_the_public_network_counts_a_gateway_only_once_the_host_has_heard_from_it() -> None:
    require_root()
    with _network() as (node, _):
        before = _assess_interface(node)
        assert before["public_network"] is None
        clauses = before["clauses"]
        assert isinstance(clauses, list)
        refused = next(c for c in clauses if c["name"] == "public-network")
        assert "never heard from" in refused["detail"]

        # Any traffic to the gateway makes the host resolve it and hear its answer.
        probe = (
            "import socket; s = socket.socket(); s.settimeout(5); "
            "s.connect_ex(('198.51.100.1', 9))"
        )
        subprocess.run(
            ["ip", "netns", "exec", node, sys.executable, "-c", probe], check=True, timeout=30
        )
        after = _assess_interface(node)
        assert after["public_network"] == {
            "interface": "pub0",
            "address": "198.51.100.10",
            "prefix": 24,
            "gateway": "198.51.100.1",
        }

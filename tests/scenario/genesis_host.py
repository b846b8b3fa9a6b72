"""A host provisioned from genesis as an operator would, step by step, for the scenarios
that stand one up: a working directory the run account can traverse (``workdir``), the
unit's state directory (``provision_state_dir``), the launcher config ``fulcrum config
produce`` writes and ``verify`` accepts (``produce_launcher_config``), an operator-state
database with ``ZONE`` imported (``provision_operator_state``); and, once fulcrum runs,
its resident found through /proc (``resident_pid``)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user, run_as
from tests.scenario.proving_ground import (
    FULCRUM,
    GATEWAY,
    PREFIX,
    UNIT_IP,
    Fulcrum,
    Ground,
    run,
)
from tests.scenario.resident_harness import REPO

ZONE = "example.test."
ZONE_FILE = REPO / "docs" / "examples" / "example.test.zone"
READY_TIMEOUT = 120.0
SERIAL = "2024010101"
OWNER_PORT = 8053


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Where this host's files live: traversable by the run account, removed after."""
    require_root()
    path = Path(tempfile.mkdtemp(prefix="vl-genesis-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def provision_state_dir(root: Path) -> Path:
    """The unit's state directory under ``root``, handed to the run account (0700)."""
    account = ensure_system_user(RUN_USER)
    state_dir = root / "var" / "lib" / "valis-dns"
    state_dir.mkdir(parents=True, mode=0o755)
    state_dir.chmod(0o700)
    os.chown(state_dir, account.pw_uid, account.pw_gid)
    return state_dir


def produce_launcher_config(
    ground: Ground, root: Path, valis: str, *, designated_port: int = 53
) -> Path:
    """``fulcrum config produce`` for this host, then ``fulcrum config verify`` of it."""
    out = root / "etc" / "fulcrum" / "launcher.toml"
    out.parent.parent.mkdir(mode=0o755)
    run([
        FULCRUM, "config", "produce", "--out", str(out),
        "--netns-name", ground.unit_netns,
        "--unit-ip", UNIT_IP,
        "--unit-cidr", str(PREFIX),
        "--public-interface", ground.nic,
        "--public-gateway", GATEWAY,
        "--mode", "dedicated",
        "--designated-port", str(designated_port),
        "--owner-port", str(OWNER_PORT),
        "--catchall-object-path", "/opt/valis/lib/sk-lookup-catchall.bpf.o",
        "--valis-command", valis,
    ])  # fmt: skip
    info = out.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
    assert "ok" in run([FULCRUM, "config", "verify", str(out)]).stdout
    return out


def provision_operator_state(pg_cluster: PgCluster, root: Path, valis: str) -> str:
    """A fresh operator-state database, migrated, ``example.test.`` imported; its DSN."""
    dsn = pg_cluster.new_database("genesis")
    zone_file = root / "example.test.zone"
    shutil.copy(ZONE_FILE, zone_file)
    zone_file.chmod(0o644)
    for argv in (["db", "migrate", "--dsn", dsn], ["zone", "import", "--dsn", dsn, str(zone_file)]):
        result = run_as(RUN_USER, [valis, *argv])
        assert result.returncode == 0, result.stderr
    return dsn


def resident_pid(fulcrum: Fulcrum) -> int:
    """The resident: fulcrum's one child, found through /proc rather than fulcrum's word."""
    parent = fulcrum.process.pid
    children: list[int] = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        children += [int(pid) for pid in (task / "children").read_text().split()]
    assert len(children) == 1, f"fulcrum has children {children}"
    return children[0]

"""Fixtures for the real-IO tier: a private PostgreSQL cluster reached by peer auth."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import Ground, sweep_stale
from tests.scenario.resident_harness import Harness, harness
from valis_core.operator_state.local_cluster import LocalCluster
from valis_core.operator_state.schema import migrate

SERVER_USER = "postgres"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A private cluster for the session: initdb under /tmp as ``postgres``, socket only,
    peer auth where OS ``valis`` (a real system user, created if absent) is role
    ``valis``, owner of database ``valis_state``. Stopped and removed afterwards."""
    require_root()
    ensure_system_user(RUN_USER)
    root = Path(tempfile.mkdtemp(prefix="valis-pg-", dir="/tmp"))
    cluster = LocalCluster(root=root, server_user=SERVER_USER)
    try:
        cluster.initialize({RUN_USER: [RUN_USER]}, durable=False)
        cluster.start()
        cluster.ensure_role(RUN_USER)
        cluster.ensure_database("valis_state", owner=RUN_USER)
        yield PgCluster(cluster=cluster)
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def state_dsn(pg_cluster: PgCluster) -> str:
    """A fresh operator-state database owned by ``valis``, migrated; its DSN."""
    dsn = pg_cluster.new_database("state")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
    return dsn


@pytest.fixture
def run_account_dir() -> Iterator[Path]:
    """A directory under /tmp owned by the run account (every parent traversable)."""
    require_root()
    account = ensure_system_user(RUN_USER)
    directory = Path(tempfile.mkdtemp(prefix="valis-run-", dir="/tmp"))
    try:
        os.chown(directory, account.pw_uid, account.pw_gid)
        os.chmod(directory, 0o755)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def ground() -> Iterator[Ground]:
    """A proving ground (internet bridge, the node's NIC, a client), removed after."""
    require_root()
    sweep_stale()
    built = Ground().build()
    try:
        yield built
    finally:
        built.cleanup()


@pytest.fixture
def resident_harness() -> Iterator[Harness]:
    """Runs residents as the run account; every one started is stopped after."""
    require_root()
    with harness() as running:
        yield running

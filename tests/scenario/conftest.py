"""Fixtures for the real-IO tier: a private PostgreSQL cluster reached by peer auth."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.frozen_build import (  # noqa: F401 (session fixtures, built once)
    build_binds,
    build_root,
    bundle,
    control_bundle,
    delivery,
    fresh_deliveries,
    frozen_builds,
    plain_build,
)
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, EXAMPLE_ZONE, import_zone
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user, private_cluster
from tests.scenario.proving_ground import Ground, sweep_stale
from tests.scenario.resident_harness import Harness, harness
from tests.scenario.transfer_wire import Wire
from tests.scenario.work_queue import pytest_runtestloop  # noqa: F401 (the shared queue)
from valis_core.operator_state.schema import migrate

SERVER_USER = "postgres"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """The session's private cluster (``pg.private_cluster``)."""
    require_root()
    with private_cluster(SERVER_USER) as cluster:
        yield cluster


@pytest.fixture
def state_dsn(pg_cluster: PgCluster) -> str:
    """A fresh operator-state database owned by ``valis``, migrated; its DSN."""
    dsn = pg_cluster.new_database("state")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
    return dsn


@pytest.fixture
def zone_dsn(pg_cluster: PgCluster, state_dsn: str) -> str:
    """A migrated operator-state database holding ``example.test.`` (SOA, NS, its name
    server's address and ``www``)."""
    import_zone(pg_cluster, state_dsn, EXAMPLE_ZONE, extra=EXAMPLE_WWW)
    return state_dsn


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
def open_base() -> Iterator[Path]:
    """A directory under /tmp every account may traverse, for what the run account must
    reach (tmp_path's parents are root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="valis-open-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


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


@pytest.fixture
def wire() -> Iterator[Wire]:
    """A node's and a secondary's namespaces joined by a veth pair, for one test."""
    require_root()
    built = Wire()
    try:
        built.build()
        yield built
    finally:
        built.cleanup()

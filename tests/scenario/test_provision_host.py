"""Provision's IO pieces against real things in throwaway roots: a PostgreSQL server whose
pg_hba.conf is edited to let exactly the run account in by peer (and a second edit
changes nothing), and the FHS layout staged from a delivery under umask 077."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, connect_as, ensure_system_user
from valis_core import __version__
from valis_core.apply.delivery import build_delivery, current_version
from valis_core.operator_state import host_cluster
from valis_core.operator_state.host_cluster import ServerAccess, parse_lsclusters
from valis_core.operator_state.local_cluster import LocalCluster
from valis_core.operator_state.peer_access import PeerAccess, with_hba_line, with_ident_line
from valis_core.ops.local_probe import LocalHostProbe
from valis_core.ops.provision import ProvisionRequest, Status, Step, StepName
from valis_core.ops.provision_host import (
    ProvisionError,
    ProvisionHost,
    carry_out,
    make_directory,
)

SERVER = "postgres"
DEBIAN_LIKE_HBA = """\
# Database administrative login by Unix domain socket
local   all             postgres                                peer
# everyone else is refused on the socket; no TCP at all
local   all             all                                     reject
"""
ACCESS = PeerAccess(RUN_USER)


@pytest.fixture
def server() -> Iterator[tuple[LocalCluster, ServerAccess]]:
    """A private server as a host's own would be before provision: its superuser by peer,
    every other account refused."""
    require_root()
    ensure_system_user(RUN_USER)
    root = Path(tempfile.mkdtemp(prefix="valis-prov-", dir="/tmp"))
    cluster = LocalCluster(root=root, server_user=SERVER, port=5441)
    try:
        cluster.initialize({}, durable=False)
        hba = cluster.data_dir / "pg_hba.conf"
        hba.write_text(DEBIAN_LIKE_HBA)
        (cluster.data_dir / "pg_ident.conf").write_text("# MAPNAME SYSTEM PG\n")
        cluster.start()
        yield cluster, ServerAccess(str(cluster.socket_dir), cluster.port, SERVER)
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _provision_access(access: ServerAccess) -> None:
    """What provision's role, database, ident and hba steps do, in their order
    (``provision_host._role`` … ``_hba``, without the Debian cluster listing)."""
    with host_cluster.superuser(access) as conn:
        state = host_cluster.read_state(conn, ACCESS)
        if not state.role_exists:
            host_cluster.create_role(conn, ACCESS)
        if not state.database_exists:
            host_cluster.create_database(conn, ACCESS)
        ident = with_ident_line(state.ident_text, ACCESS)
        if ident != state.ident_text:
            host_cluster.rewrite_conf(state.ident_file, ident)
            host_cluster.reload(conn)
        hba = with_hba_line(state.hba_text, ACCESS)
        if hba != state.hba_text:
            host_cluster.install_hba(conn, state.hba_file, hba)


def _dsn(cluster: LocalCluster) -> str:
    return cluster.dsn(ACCESS.role, ACCESS.database)


def test_the_run_account_gets_in_by_peer_and_nobody_else(
    server: tuple[LocalCluster, ServerAccess],
) -> None:
    cluster, access = server
    with pytest.raises(psycopg.OperationalError):
        connect_as(RUN_USER, cluster.dsn("postgres", "postgres")).close()
    hba = cluster.data_dir / "pg_hba.conf"
    os.chmod(hba, 0o640)
    before = os.stat(hba)

    _provision_access(access)

    with connect_as(RUN_USER, _dsn(cluster)) as conn:
        row = conn.execute("SELECT current_user, current_database()").fetchone()
        assert row == (ACCESS.role, ACCESS.database)
    # Only that account: another one, and root, are refused the role.
    with pytest.raises(psycopg.OperationalError, match="Peer authentication failed"):
        connect_as("nobody", _dsn(cluster)).close()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(_dsn(cluster)).close()
    after = os.stat(hba)
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_uid, before.st_gid, 0o640)
    assert after.st_ino != before.st_ino  # replaced by rename, not written in place
    lines = hba.read_text().splitlines()
    assert lines.index(ACCESS.hba_line) < lines.index(DEBIAN_LIKE_HBA.splitlines()[3])
    assert not any(name.endswith(".tmp") for name in os.listdir(cluster.data_dir))


def test_a_second_pass_changes_nothing(server: tuple[LocalCluster, ServerAccess]) -> None:
    cluster, access = server
    _provision_access(access)
    files = [cluster.data_dir / name for name in ("pg_hba.conf", "pg_ident.conf")]
    before = [(os.stat(path).st_ino, path.read_bytes()) for path in files]
    _provision_access(access)
    assert [(os.stat(path).st_ino, path.read_bytes()) for path in files] == before
    with host_cluster.superuser(access) as conn:
        count = conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s",
                             (ACCESS.role,)).fetchone()
    assert count == (1,)


def test_the_server_reports_the_files_it_uses(server: tuple[LocalCluster, ServerAccess]) -> None:
    cluster, access = server
    with host_cluster.superuser(access) as conn:
        state = host_cluster.read_state(conn, ACCESS)
    assert state.hba_file == cluster.data_dir / "pg_hba.conf"
    assert state.hba_text == DEBIAN_LIKE_HBA
    assert (state.role_exists, state.database_exists) == (False, False)


def test_pg_lsclusters_rows_are_read_and_anything_else_passed_over() -> None:
    text = ("15  main    5432 down   postgres /var/lib/postgresql/15/main /var/log/x.log\n"
            "16  other   5433 online,recovery postgres /srv/pg /var/log/y.log\n"
            "Warning: something\n")
    rows = parse_lsclusters(text)
    assert [(r.version, r.name, r.port, r.running, r.owner) for r in rows] == [
        ("15", "main", 5432, False, "postgres"), ("16", "other", 5433, True, "postgres")]


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _request(root: Path, delivery: Path | None) -> ProvisionRequest:
    from tests.provision_example import CONFIG, FACTS

    return ProvisionRequest(
        account=RUN_USER, version=__version__, root=str(root), state_dir=str(root / "state"),
        socket_dir="/var/run/postgresql", launcher_config_path=str(root / "launcher.toml"),
        launcher_config=CONFIG, site_facts_path=str(root / "site-facts.env"),
        site_facts=FACTS, unit_name="fulcrum-valis.service",
        delivery=None if delivery is None else str(delivery),
    )


def _host() -> ProvisionHost:
    def no_launcher_config(*_: object) -> None:
        raise AssertionError("not this step")

    return ProvisionHost(LocalHostProbe(), no_launcher_config, Path("/nonexistent"))


def test_the_layout_is_world_traversable_under_umask_077_and_current_switched(
    as_root: None,
) -> None:
    ensure_system_user(RUN_USER)
    scratch = Path(tempfile.mkdtemp(prefix="valis-prov-", dir="/tmp"))
    try:
        os.chmod(scratch, 0o755)
        tarball = scratch / "delivery.tar.gz"
        build_delivery({"bin/valis": (b"#!/bin/sh\necho valis\n", 0o755),
                        "lib/systemd/system/fulcrum-valis.service": b"[Unit]\n"},
                       __version__, tarball)
        root = scratch / "opt" / "valis"
        request = _request(root, tarball)
        with _umask(0o077):
            for name in (StepName.FHS_LAYOUT, StepName.DELIVERY, StepName.STATE_DIRECTORY):
                carry_out(Step(name, Status.TO_DO, ""), request, _host())
        for directory in (scratch / "opt", root, root / "versions",
                          root / "versions" / __version__ / "bin"):
            assert stat.S_IMODE(os.stat(directory).st_mode) == 0o755, directory
        assert current_version(root) == __version__
        state = os.stat(root / "state")
        assert stat.S_IMODE(state.st_mode) == 0o700
        assert state.st_uid == LocalHostProbe().account(RUN_USER).uid  # type: ignore[union-attr]
        # The run account reaches and runs the staged program through `current`.
        assert os.access(root / "current" / "bin" / "valis", os.X_OK)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_directory_is_given_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    with _umask(0o077):
        make_directory(tmp_path / "made", 0o755)
    assert stat.S_IMODE(os.stat(tmp_path / "made").st_mode) == 0o755
    (tmp_path / "file").write_text("")
    with pytest.raises(ProvisionError, match="is not a directory; move it aside"):
        make_directory(tmp_path / "file", 0o755)


def test_a_pg_hba_the_server_cannot_load_is_named_by_its_line(
    server: tuple[LocalCluster, ServerAccess],
) -> None:
    cluster, access = server
    hba = cluster.data_dir / "pg_hba.conf"
    host_cluster.rewrite_conf(hba, DEBIAN_LIKE_HBA + "local  all  all  nosuchmethod\n")
    with host_cluster.superuser(access) as conn, pytest.raises(
        host_cluster.HostClusterError, match=r"pg_hba.conf line 5: .*nosuchmethod"
    ):
        host_cluster.check_hba(conn, hba)


BROKEN = "local  all  all  nosuchmethod\n"


def test_a_provision_over_a_pg_hba_the_server_could_not_load_leaves_it_as_it_was(
    server: tuple[LocalCluster, ServerAccess],
) -> None:
    """A line edited into pg_hba.conf and never reloaded (the server runs on its old
    rules): provision names it and refuses before touching the file, rather than writing
    its own line into a file the server would not start with."""
    cluster, access = server
    hba = cluster.data_dir / "pg_hba.conf"
    host_cluster.rewrite_conf(hba, DEBIAN_LIKE_HBA + BROKEN)
    before = (os.stat(hba).st_ino, hba.read_bytes())
    with pytest.raises(host_cluster.HostClusterError, match=r"pg_hba.conf line 5: .*nosuch"):
        _provision_access(access)
    assert (os.stat(hba).st_ino, hba.read_bytes()) == before
    assert ACCESS.hba_line not in hba.read_text()
    hba.write_text(DEBIAN_LIKE_HBA)  # the operator fixes the line; provision goes on
    _provision_access(access)
    with connect_as(RUN_USER, _dsn(cluster)) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (ACCESS.role,)


def test_new_pg_hba_text_the_server_cannot_load_is_put_back_and_the_server_restarts(
    server: tuple[LocalCluster, ServerAccess],
) -> None:
    cluster, access = server
    hba = cluster.data_dir / "pg_hba.conf"
    os.chmod(hba, 0o640)
    held = hba.read_bytes()
    with host_cluster.superuser(access) as conn, pytest.raises(
        host_cluster.HostClusterError, match=r"line 5: .*nosuchmethod.*left as it was"
    ):
        host_cluster.install_hba(conn, hba, DEBIAN_LIKE_HBA + BROKEN)
    assert hba.read_bytes() == held
    assert stat.S_IMODE(os.stat(hba).st_mode) == 0o640
    cluster.stop()
    cluster.start()  # would fail on a pg_hba.conf it cannot load
    with host_cluster.superuser(access) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

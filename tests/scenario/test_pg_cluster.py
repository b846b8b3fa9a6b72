"""The operator-state seam: the run account reaches its role by being itself, over a
UNIX socket, with no password; nobody else gets that role; nothing listens on TCP."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tests.scenario.pg import PgCluster, connect_as, run_as, runtime_bin

_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _tcp_listen_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN:
                inodes.add(fields[9])
    return inodes


def _unix_listen_paths(inodes: set[str]) -> set[str]:
    paths = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes:
            paths.add(fields[7])
    return paths


def test_run_account_connects_as_valis_without_a_password(pg_cluster: PgCluster) -> None:
    snippet = (
        "import psycopg, sys; "
        "c = psycopg.connect(sys.argv[1]); "
        "print(c.execute('SELECT current_user, session_user').fetchone()[0])"
    )
    result = run_as("valis", [str(runtime_bin() / "python"), "-c", snippet, pg_cluster.dsn])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "valis"
    assert "password" not in pg_cluster.dsn


def test_the_valis_role_is_refused_to_root(pg_cluster: PgCluster) -> None:
    with pytest.raises(psycopg.OperationalError, match="Peer authentication failed"):
        psycopg.connect(pg_cluster.dsn)


def test_the_valis_role_is_refused_to_nobody(pg_cluster: PgCluster) -> None:
    with pytest.raises(psycopg.OperationalError, match="Peer authentication failed"):
        connect_as("nobody", pg_cluster.dsn)


def test_the_server_account_keeps_its_superuser_role(pg_cluster: PgCluster) -> None:
    out = pg_cluster.cluster.admin_sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'postgres'")
    assert out.strip() == "t"


def test_the_server_listens_on_its_socket_and_on_no_tcp_port(pg_cluster: PgCluster) -> None:
    postmaster = pg_cluster.cluster.postmaster_pid()
    inodes = _socket_inodes(postmaster)
    socket_path = str(pg_cluster.cluster.socket_dir / f".s.PGSQL.{pg_cluster.cluster.port}")
    assert socket_path in _unix_listen_paths(inodes)
    assert not inodes & _tcp_listen_inodes()

"""The host's own PostgreSQL server, administered as its superuser over the local socket.

Provisioning reaches the server the way the node will: over the UNIX socket by peer
authentication, as the server's own account (the cluster owner, ``postgres`` on Debian),
by taking that account's effective ids for the connection (``acting_as``). Nothing here
knows or sets a password.

``pg_hba.conf`` and ``pg_ident.conf`` are the files the running server names
(``SHOW hba_file``); they are rewritten atomically (temporary file, fsync, rename) with
their owner and mode kept, and the server is reloaded for them to apply. On Debian the
clusters are listed by ``pg_lsclusters`` and started by ``pg_ctlcluster``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg

from valis_core.acting_as import acting_as
from valis_core.atomic import write_atomic
from valis_core.errors import ValisError
from valis_core.operator_state.peer_access import PeerAccess

_COMMAND_TIMEOUT = 120.0
_MAX_CONF_BYTES = 4 << 20


class HostClusterError(ValisError):
    """The host's PostgreSQL server could not be found, started or administered."""


@attrs.frozen
class ListedCluster:
    """One row of ``pg_lsclusters``."""

    version: str
    name: str
    port: int
    running: bool
    owner: str


@attrs.frozen
class ServerAccess:
    """How to reach a running server as its superuser: the socket and the owner account
    (whose same-named role is the superuser)."""

    socket_dir: str
    port: int
    owner: str


def parse_lsclusters(text: str) -> tuple[ListedCluster, ...]:
    """The rows of ``pg_lsclusters --no-header`` (version, cluster, port, status, owner,
    data directory, log); a line that is not a row is passed over."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or not fields[2].isdigit():
            continue
        rows.append(ListedCluster(fields[0], fields[1], int(fields[2]),
                                  fields[3].startswith("online"), fields[4]))
    return tuple(rows)


def list_clusters() -> tuple[ListedCluster, ...]:
    """The host's clusters; none when Debian's cluster tools are not installed."""
    program = shutil.which("pg_lsclusters")
    if program is None:
        return ()
    done = _run([program, "--no-header"], "list the clusters")
    return parse_lsclusters(done.stdout)


def start_cluster(cluster: ListedCluster) -> None:
    """Start a Debian cluster (through systemd where it runs)."""
    _run(["pg_ctlcluster", cluster.version, cluster.name, "start"],
         f"start cluster {cluster.version}/{cluster.name}")


def restart_cluster(cluster: ListedCluster) -> None:
    """Restart a Debian cluster (a new ``listen_addresses`` takes a restart)."""
    _run(["pg_ctlcluster", cluster.version, cluster.name, "restart"],
         f"restart cluster {cluster.version}/{cluster.name}")


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostClusterError(f"postgresql: cannot {what}: {exc}") from None
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")
        raise HostClusterError(
            f"postgresql: cannot {what}: {detail.splitlines()[-1]}"
        )
    return done


@contextlib.contextmanager
def superuser(server: ServerAccess) -> Iterator[psycopg.Connection[Any]]:
    """A connection to database ``postgres`` as the server's superuser, by peer."""
    try:
        owner = pwd.getpwnam(server.owner)
    except KeyError:
        raise HostClusterError(
            f"postgresql: the server's account {server.owner!r} does not exist"
        ) from None
    try:
        with acting_as((owner.pw_uid, owner.pw_gid)):
            conn = psycopg.connect(host=server.socket_dir, port=server.port, user=server.owner,
                                   dbname="postgres", autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise HostClusterError(
            f"postgresql: cannot connect as the superuser {server.owner} over "
            f"{server.socket_dir} (port {server.port}): {str(exc).strip().splitlines()[-1]}; "
            "is the server running, with its socket there?"
        ) from None
    with conn:
        yield conn


@attrs.frozen
class ServerState:
    """What the server holds of the node's access, as read by its superuser."""

    role_exists: bool
    database_exists: bool
    hba_file: Path
    ident_file: Path
    hba_text: str
    ident_text: str


def read_state(conn: psycopg.Connection[Any], access: PeerAccess) -> ServerState:
    """Read the role, the database and both access files the running server uses."""
    role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (access.role,)).fetchone()
    database = conn.execute(
        "SELECT 1 FROM pg_database WHERE datname = %s", (access.database,)
    ).fetchone()
    hba_file = Path(_show(conn, "hba_file"))
    ident_file = Path(_show(conn, "ident_file"))
    return ServerState(role is not None, database is not None, hba_file, ident_file,
                       read_conf(hba_file), read_conf(ident_file))


def _show(conn: psycopg.Connection[Any], setting: str) -> str:
    row = conn.execute(f"SHOW {setting}").fetchone()
    assert row is not None
    return str(row[0])


def read_conf(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_CONF_BYTES)
    except OSError as exc:
        raise HostClusterError(
            f"postgresql: cannot read {path}: {exc.strerror or exc}; run as root"
        ) from None
    return data.decode("utf-8", errors="replace")


def create_role(conn: psycopg.Connection[Any], access: PeerAccess) -> None:
    """The node's login role, without a password (it authenticates by peer)."""
    conn.execute(access.create_role_sql)


def create_database(conn: psycopg.Connection[Any], access: PeerAccess) -> None:
    conn.execute(access.create_database_sql)


def rewrite_conf(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, keeping its owner and mode."""
    try:
        held = os.stat(path)
        write_atomic(path, text.encode("utf-8"), mode=held.st_mode & 0o7777,
                     owner=(held.st_uid, held.st_gid))
    except OSError as exc:
        raise HostClusterError(
            f"postgresql: cannot rewrite {path}: {exc.strerror or exc}; run as root"
        ) from None


def check_hba(conn: psycopg.Connection[Any], path: Path) -> None:
    """Refuse a pg_hba.conf the server could not load (it would keep its old rules)."""
    row = conn.execute(
        "SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL "
        "ORDER BY line_number LIMIT 1"
    ).fetchone()
    if row is not None:
        raise HostClusterError(
            f"postgresql: {path} line {row[0]}: {row[1]}; the server keeps its old rules "
            "until that line is fixed (and would not start with it)"
        )


def install_hba(conn: psycopg.Connection[Any], path: Path, text: str) -> None:
    """Put ``text`` in place as ``path`` (the server's pg_hba.conf) and reload, only ever
    leaving on disk a file the server can load.

    The file as it stands is checked first: one the server could not load already (a
    line edited in and never reloaded) is refused untouched, its line named. Then the
    new text is written (atomically, owner and mode kept) and checked; refused, the old
    bytes are put back before the error is raised, so a refused provision leaves the
    server able to restart with the rules it had.
    """
    check_hba(conn, path)
    try:
        with path.open("rb") as handle:
            held = handle.read(_MAX_CONF_BYTES + 1)
    except OSError as exc:
        raise HostClusterError(
            f"postgresql: cannot read {path}: {exc.strerror or exc}; run as root"
        ) from None
    if len(held) > _MAX_CONF_BYTES:
        raise HostClusterError(
            f"postgresql: {path} is larger than {_MAX_CONF_BYTES} bytes, more than provision "
            "edits; add the node's peer line to it by hand"
        )
    rewrite_conf(path, text)
    try:
        check_hba(conn, path)
    except HostClusterError as refused:
        _put_back(path, held)
        raise HostClusterError(f"{refused}; {path} is left as it was") from None
    reload(conn)


def _put_back(path: Path, held: bytes) -> None:
    try:
        now = os.stat(path)
        write_atomic(path, held, mode=now.st_mode & 0o7777, owner=(now.st_uid, now.st_gid))
    except OSError as exc:
        raise HostClusterError(
            f"postgresql: {path} holds rules the server cannot load and putting the old "
            f"file back failed ({exc.strerror or exc}); fix it before the server restarts"
        ) from None


def reload(conn: psycopg.Connection[Any]) -> None:
    """Have the server read its access files again (``pg_reload_conf``)."""
    row = conn.execute("SELECT pg_reload_conf()").fetchone()
    if row is None or row[0] is not True:
        raise HostClusterError("postgresql: the server refused to reload its configuration")

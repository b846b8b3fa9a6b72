"""A private PostgreSQL cluster on this machine: UNIX socket only, peer authentication.

It is the operator-state seam (contract §2) in miniature, for the scenario tests and for
``make demo``: ``initdb`` in a directory of our choosing, run as a non-root OS account
(PostgreSQL refuses root; as root we drop to the account with ``setpriv``), with

- ``listen_addresses = ''``: no TCP listener at all;
- ``unix_socket_directories`` inside the cluster directory, world-traversable, so the run
  account (``valis``) can reach the socket although it owns nothing here;
- ``pg_hba.conf`` with a single ``local ... peer map=valis`` line and an ident map that
  names exactly which OS account may log in as which role. The server's own account
  always maps to its superuser role (initdb names that role after the account), so
  administration keeps working; every other account gets only the roles it is given.

The kernel proves the connecting uid, so a role is reached by *being* its account and
there is no password anywhere.

With ``tls`` it is also a database host in miniature (the two-host topology,
``operator_state.tls_access``): a TLS listener on the given address that admits the
role by client certificate only, started inside ``netns`` when one is named, so nodes in
other namespaces reach it as they would another host.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

import attrs

from valis_core.errors import ValisError
from valis_core.operator_state.peer_access import identifier_problem
from valis_core.operator_state.tls_access import HBA_COMMENT as TLS_HBA_COMMENT
from valis_core.operator_state.tls_access import TlsAccess, tls_settings
from valis_core.operator_state.tls_material import Issued

DEFAULT_PORT = 5432
DEFAULT_ROLE = "valis"
DEFAULT_DATABASE = "valis_state"
IDENT_MAP = "valis"
_CONF_NAME = "valis-cluster.conf"
_START_TIMEOUT_S = 60
_SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres", "psql")
_SOCKET_PATH_MAX = 107  # sun_path, less its terminating NUL


class ClusterError(ValisError):
    """The private cluster could not be found, created, started or administered."""


def socket_dsn(
    socket_dir: Path | str,
    *,
    role: str = DEFAULT_ROLE,
    database: str = DEFAULT_DATABASE,
    port: int = DEFAULT_PORT,
) -> str:
    """The libpq URI for ``role`` on ``database`` over the socket in ``socket_dir``.

    ``postgresql://valis@/valis_state?host=/run/postgresql``; the port is named only when
    it is not the default (it selects the socket file ``.s.PGSQL.<port>``).
    """
    query = f"host={quote(str(socket_dir), safe='/')}"
    if port != DEFAULT_PORT:
        query += f"&port={port}"
    return f"postgresql://{quote(role, safe='')}@/{quote(database, safe='')}?{query}"


def find_server_bindir(candidates: Iterable[str] | None = None) -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that holds the server programs."""
    found = candidates if candidates is not None else glob.glob("/usr/lib/postgresql/*/bin")
    usable = [
        Path(d) for d in found if all((Path(d) / prog).is_file() for prog in _SERVER_PROGRAMS)
    ]
    if not usable:
        raise ClusterError(
            "local cluster: no PostgreSQL server programs under /usr/lib/postgresql/*/bin; "
            "install the Debian 'postgresql' package"
        )

    def major(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)

    return max(usable, key=major)


def default_cache_root() -> Path:
    """Where a non-root user's demo cluster lives: ``$XDG_CACHE_HOME/valis/postgres``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "valis" / "postgres"


def _check_identifier(kind: str, name: str) -> str:
    problem = identifier_problem(name)
    if problem is not None:
        raise ClusterError(f"local cluster: {kind} {problem}")
    return name


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@attrs.frozen
class ClusterTls:
    """A TLS listener on ``listen`` presenting ``server`` (issued by the CA ``ca_pem``)
    and admitting ``access`` by client certificates of that CA."""

    listen: str
    server: Issued
    ca_pem: bytes
    access: TlsAccess


_TLS_FILES = ("server.crt", "server.key", "root.crt")


@attrs.frozen
class LocalCluster:
    """A cluster under ``root``: ``data/`` (PGDATA), ``socket/`` and ``server.log``.

    ``server_user`` is the OS account the server runs as; its same-named role is the
    cluster's superuser. When this process is root the server programs run under that
    account; otherwise ``server_user`` must be the current user. ``tls`` adds a TLS
    listener admitting client certificates; ``netns`` runs the server in that network
    namespace (root only).
    """

    root: Path
    server_user: str
    port: int = DEFAULT_PORT
    bindir: Path = attrs.field(factory=find_server_bindir)
    tls: ClusterTls | None = None
    netns: str | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    @property
    def log_file(self) -> Path:
        return self.root / "log" / "server.log"

    def dsn(self, role: str = DEFAULT_ROLE, database: str = DEFAULT_DATABASE) -> str:
        return socket_dsn(self.socket_dir, role=role, database=database, port=self.port)

    # -- lifecycle ---------------------------------------------------------------------

    def initialize(self, peer_map: Mapping[str, Sequence[str]], *, durable: bool = True) -> None:
        """Create the cluster if absent, then (re)write its access and socket settings.

        ``peer_map`` maps an OS account to the roles it may log in as; the server's own
        account always maps to its superuser role. ``durable=False`` turns off fsync and
        friends, for throwaway test clusters. Re-running on an existing cluster only
        rewrites the configuration (a restart applies it).
        """
        account = self._account()
        socket_path = self.socket_dir / f".s.PGSQL.{self.port}"
        if len(os.fsencode(socket_path)) > _SOCKET_PATH_MAX:
            raise ClusterError(
                f"local cluster: the socket path {socket_path} is longer than a UNIX socket "
                f"path may be ({_SOCKET_PATH_MAX} bytes); choose a shorter directory"
            )
        for directory, mode in ((self.root, 0o755), (self.socket_dir, 0o755)):
            directory.mkdir(parents=True, exist_ok=True)
            os.chmod(directory, mode)
            self._give(directory, account)
        self.log_file.parent.mkdir(exist_ok=True)
        os.chmod(self.log_file.parent, 0o750)
        self._give(self.log_file.parent, account)
        if not (self.data_dir / "PG_VERSION").is_file():
            if self.data_dir.exists() and any(self.data_dir.iterdir()):
                raise ClusterError(
                    f"local cluster: {self.data_dir} is not empty and holds no cluster; "
                    "remove it or choose another directory"
                )
            self._run_as_server(
                [
                    str(self.bindir / "initdb"),
                    "--pgdata",
                    str(self.data_dir),
                    "--username",
                    account.pw_name,
                    "--encoding",
                    "UTF8",
                    "--no-locale",
                    "--auth",
                    "peer",
                ],
                stage="initdb",
            )
        self._write_config(account.pw_name, peer_map, durable=durable)

    def start(self) -> None:
        """Start the server and wait until it accepts connections; no-op when running."""
        if self.is_running():
            return
        self._run_as_server(
            [
                str(self.bindir / "pg_ctl"),
                "start",
                "--wait",
                f"--timeout={_START_TIMEOUT_S}",
                "--pgdata",
                str(self.data_dir),
                "--log",
                str(self.log_file),
            ],
            stage="start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown: sessions are ended, not waited for)."""
        if not self.is_running():
            return
        self._run_as_server(
            [
                str(self.bindir / "pg_ctl"),
                "stop",
                "--wait",
                "--mode",
                "fast",
                "--pgdata",
                str(self.data_dir),
            ],
            stage="stop",
        )

    def is_running(self) -> bool:
        if not (self.data_dir / "PG_VERSION").is_file():
            return False
        status = self._run_as_server(
            [str(self.bindir / "pg_ctl"), "status", "--pgdata", str(self.data_dir)],
            stage="status",
            check=False,
        )
        return status.returncode == 0

    def postmaster_pid(self) -> int:
        """The running server's process id, from ``postmaster.pid``."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first)
        except (OSError, ValueError) as exc:
            raise ClusterError(
                f"local cluster: no running server in {self.data_dir}; start it first"
            ) from exc

    # -- administration ----------------------------------------------------------------

    def admin_sql(self, sql: str, *, database: str = "postgres") -> str:
        """Run ``sql`` as the superuser through ``psql``; return its unaligned output."""
        account = self._account()
        result = self._run_as_server(
            [
                str(self.bindir / "psql"),
                "--no-psqlrc",
                "--quiet",
                "--tuples-only",
                "--no-align",
                "--set",
                "ON_ERROR_STOP=1",
                "--host",
                str(self.socket_dir),
                "--port",
                str(self.port),
                "--username",
                account.pw_name,
                "--dbname",
                database,
                "--command",
                sql,
            ],
            stage="admin",
        )
        return result.stdout

    def ensure_role(self, role: str) -> None:
        """Create a login role without password (it authenticates by peer) if absent."""
        _check_identifier("role", role)
        exists = self.admin_sql(f"SELECT 1 FROM pg_roles WHERE rolname = {_sql_literal(role)}")
        if not exists.strip():
            self.admin_sql(f"CREATE ROLE {role} LOGIN")

    def ensure_database(self, database: str, *, owner: str) -> None:
        """Create ``database`` owned by ``owner`` if absent."""
        _check_identifier("database", database)
        _check_identifier("role", owner)
        exists = self.admin_sql(
            f"SELECT 1 FROM pg_database WHERE datname = {_sql_literal(database)}"
        )
        if not exists.strip():
            self.admin_sql(f"CREATE DATABASE {database} OWNER {owner}")

    def drop_database(self, database: str) -> None:
        _check_identifier("database", database)
        self.admin_sql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")

    # -- internals ---------------------------------------------------------------------

    def _account(self) -> pwd.struct_passwd:
        try:
            account = pwd.getpwnam(self.server_user)
        except KeyError as exc:
            raise ClusterError(
                f"local cluster: server account {self.server_user!r} does not exist; "
                "create it or name an existing non-root account"
            ) from exc
        if account.pw_uid == 0:
            raise ClusterError(
                "local cluster: PostgreSQL will not run as root; name a non-root server "
                "account (for example 'postgres')"
            )
        if os.geteuid() != 0 and account.pw_uid != os.geteuid():
            raise ClusterError(
                f"local cluster: cannot run the server as {self.server_user!r} without root; "
                "run as that account or name the current user"
            )
        return account

    def _give(self, path: Path, account: pwd.struct_passwd) -> None:
        if os.geteuid() == 0:
            os.chown(path, account.pw_uid, account.pw_gid)

    def _run_as_server(
        self, argv: list[str], *, stage: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        account = self._account()
        prefix: list[str] = []
        env = dict(os.environ)
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
            prefix = [
                setpriv,
                f"--reuid={account.pw_uid}",
                f"--regid={account.pw_gid}",
                "--init-groups",
                "--",
            ]
            env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
        env.pop("PGDATA", None)
        env["LC_ALL"] = "C"
        if self.netns is not None:
            prefix = ["ip", "netns", "exec", self.netns, *prefix]
        result = subprocess.run(
            prefix + argv,
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and result.returncode != 0:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
            last = detail[-1] if detail else f"exit status {result.returncode}"
            raise ClusterError(
                f"local cluster {stage} in {self.root} failed: {last} "
                f"(see {self.log_file} for the server's log)"
            )
        return result

    def _write_config(
        self, server_account: str, peer_map: Mapping[str, Sequence[str]], *, durable: bool
    ) -> None:
        account = self._account()
        mapping: dict[str, list[str]] = {server_account: [server_account]}
        for os_user, roles in peer_map.items():
            for role in roles:
                _check_identifier("role", role)
                if role not in mapping.setdefault(os_user, []):
                    mapping[os_user].append(role)
        ident_lines = ["# MAPNAME  SYSTEM-USERNAME  PG-USERNAME  (written by valis)"]
        ident_lines += [
            f"{IDENT_MAP}  {os_user}  {role}"
            for os_user, roles in sorted(mapping.items())
            for role in roles
        ]
        hba = (
            "# Peer authentication over the UNIX socket"
            + ("" if self.tls else " only; no TCP") + " (written by valis).\n"
            f"local  all  all  peer  map={IDENT_MAP}\n"
        )
        settings = {
            "listen_addresses": "''",
            "port": str(self.port),
            "unix_socket_directories": _sql_literal(str(self.socket_dir)),
            "unix_socket_permissions": "0777",
            "max_connections": "64",
            "shared_buffers": "32MB",
            "log_line_prefix": "'%m [%p] %u@%d '",
        }
        if not durable:
            settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
        tls_files: dict[str, bytes] = {}
        if self.tls is not None:
            cert, key, ca = (str(self.data_dir / name) for name in _TLS_FILES)
            settings.update(tls_settings(listen=self.tls.listen, cert_file=cert,
                                         key_file=key, ca_file=ca))
            hba += f"{TLS_HBA_COMMENT}\n{self.tls.access.hba_line}\n"
            tls_files = dict(zip(_TLS_FILES, (self.tls.server.cert_pem,
                                              self.tls.server.key_pem, self.tls.ca_pem),
                                 strict=True))
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        files = {
            "pg_hba.conf": hba.encode(),
            "pg_ident.conf": ("\n".join(ident_lines) + "\n").encode(),
            _CONF_NAME: ("# Written by valis for a private local cluster.\n" + conf).encode(),
            **tls_files,
        }
        for name, data in files.items():
            path = self.data_dir / name
            path.write_bytes(data)
            os.chmod(path, 0o600)
            self._give(path, account)
        main_conf = self.data_dir / "postgresql.conf"
        include = f"include '{_CONF_NAME}'"
        with contextlib.suppress(FileNotFoundError):
            if include not in main_conf.read_text().splitlines():
                with main_conf.open("a") as handle:
                    handle.write(f"\n{include}\n")

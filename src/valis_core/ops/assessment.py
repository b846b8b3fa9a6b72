"""What host assessment reports: one verdict per prerequisite (``Clause``), all of them
(``Assessment``), what the host is assessed for (``AssessConfig``), and the table an
operator reads. The clauses themselves are judged in ``ops.host_readiness`` (and the
PostgreSQL ones in ``ops.database_readiness``)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import attrs

from valis_core.launcher_config import (
    DEFAULT_PATH,
    LauncherConfig,
)
from valis_core.node_defaults import (
    DEFAULT_PG_PORT,
    DEFAULT_PG_SOCKET_DIR,
    DEFAULT_RUN_ACCOUNT,
    DEFAULT_STATE_DIR,
)
from valis_core.operator_state.dsn import DatabaseHost
from valis_core.ops.host_probe import Account

CLAUSE_NAMES: tuple[str, ...] = (
    "network-namespaces",
    "sk-lookup",
    "nftables",
    "privilege-drop",
    "run-account",
    "state-directory",
    "binary-traversable",
    "binary-serving-capable",
    "postgresql-socket",
    "postgresql-tls",
    "launcher-config",
    "no-development-listener",
)


# -- what assessment reports -----------------------------------------------------------


@attrs.frozen
class Clause:
    """One prerequisite's verdict: ``remedy`` is what to do when it fails (None on a pass)."""

    name: str
    ok: bool
    detail: str
    remedy: str | None = None
    warning: str | None = None
    """What a passing clause allows but an operator would not want, with its remedy."""


@attrs.frozen
class Assessment:
    """Every clause, in the order of ``CLAUSE_NAMES``."""

    clauses: tuple[Clause, ...]

    @property
    def ok(self) -> bool:
        return all(clause.ok for clause in self.clauses)

    @property
    def failed(self) -> tuple[Clause, ...]:
        return tuple(clause for clause in self.clauses if not clause.ok)

    @property
    def warnings(self) -> tuple[Clause, ...]:
        return tuple(clause for clause in self.clauses if clause.warning is not None)

    def clause(self, name: str) -> Clause:
        for clause in self.clauses:
            if clause.name == name:
                return clause
        raise KeyError(name)


@attrs.frozen
class AssessConfig:
    """What the host is being assessed for: where the node's pieces are meant to be.

    ``binary`` is the resident command (program and fixed arguments); when None and the
    host is supervised, the launcher config's ``valis-command`` is assessed.
    ``environment_files`` are the files whose settings reach the node (site facts, unit
    files and their drop-ins); the launcher config is searched too when supervised.
    """

    state_dir: str = DEFAULT_STATE_DIR
    run_account: str = DEFAULT_RUN_ACCOUNT
    binary: tuple[str, ...] | None = None
    supervised: bool = True
    launcher_config: str = str(DEFAULT_PATH)
    pg_socket_dir: str = DEFAULT_PG_SOCKET_DIR
    pg_port: int = DEFAULT_PG_PORT
    environment_files: tuple[str, ...] = ()
    database_host: DatabaseHost | None = None
    """Where operator state is when the node's DSN is a certificate DSN; None: this host's
    socket."""
    restoring: frozenset[str] = frozenset()
    """Files a condense is about to restore from a backup set: absent, they are not
    missing (the client certificate of a node evacuated onto this host)."""


def pg_socket_path(config: AssessConfig) -> str:
    """The path of PostgreSQL's local socket for ``config`` (libpq's naming)."""
    return posixpath.join(config.pg_socket_dir, f".s.PGSQL.{config.pg_port}")


@attrs.frozen
class RunAccount:
    """The run account resolved (user, and the group when one is named)."""

    spec: str
    account: Account | None
    problem: str | None

    @property
    def name(self) -> str:
        return self.spec.partition(":")[0]


@attrs.frozen
class LauncherRead:
    """The launcher config as read: parsed, or why not."""

    config: LauncherConfig | None
    text: str | None
    problem: str | None
    remedy: str | None


FIX_ACCOUNT_FIRST = "fix the run-account clause first"


def passed(name: str, detail: str) -> Clause:
    return Clause(name, True, detail, None)


def failed(name: str, detail: str, remedy: str) -> Clause:
    return Clause(name, False, detail, remedy)


# -- presenting an assessment ------------------------------------------------------------


def render_table(clauses: Iterable[Clause]) -> str:
    """The assessment for people: one row per clause, each failure's remedy beneath it."""
    rows = list(clauses)
    width = max((len(clause.name) for clause in rows), default=0)
    lines = []
    for clause in rows:
        verdict = "FAIL" if not clause.ok else "warn" if clause.warning else "pass"
        lines.append(f"{verdict}  {clause.name:<{width}}  {clause.detail}")
        if clause.remedy is not None:
            lines.append(f"      {'':<{width}}  remedy: {clause.remedy}")
        if clause.warning is not None:
            lines.append(f"      {'':<{width}}  warning: {clause.warning}")
    return "\n".join(lines) + "\n"

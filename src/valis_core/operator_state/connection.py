"""Connecting to the operator-state database, with a failure an operator can act on.

The DSN names a UNIX socket and a role, or a database host and a client certificate
(``valis_core.operator_state.dsn``). Under peer authentication the role is reached only
by running as the OS account mapped to it, so the remedy for a refusal is about *who*
runs the command; under certificate authentication it is about the host, its name and
the certificate files. Never about a password.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import psycopg

from valis_core.errors import ValisError
from valis_core.operator_state.dsn import EXAMPLE_DSN, dsn_certificate_files


class OperatorStateError(ValisError):
    """The operator-state database is unreachable, or refused what was asked of it."""


def connect(dsn: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection to ``dsn``; an unreachable or refusing server is an operator error.

    ``schema.connect_current`` also checks the schema version (the layer above this one).
    """
    if not dsn.strip():
        # libpq would take an empty DSN as "every default": a server nobody named.
        raise OperatorStateError(
            f"operator state: the DSN is empty; give a libpq URI such as {EXAMPLE_DSN}"
        )
    files = dsn_certificate_files(dsn, source="operator state")
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        detail = " ".join(str(exc).split())
        hint = (
            "is PostgreSQL running with its socket there, and is this the OS account its "
            "role maps to?" if files is None else
            "is the database host reachable from here, its certificate issued for that "
            f"name by the CA in {files.root}, and {files.cert} a client certificate its "
            f"pg_hba.conf admits, with {files.key} readable by this account only?"
        )
        raise OperatorStateError(
            f"operator state: cannot connect with {redact(dsn)}: {detail} ({hint})"
        ) from exc
    except psycopg.ProgrammingError as exc:
        raise OperatorStateError(
            f"operator state: the DSN {redact(dsn)} is malformed: {exc}; give a libpq URI "
            f"such as {EXAMPLE_DSN}"
        ) from exc
    return conn


def redact(dsn: str) -> str:
    """The DSN with any password replaced, fit for a log line or an error message."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<malformed DSN>"
    if "password" in info:
        info["password"] = "***"
        return psycopg.conninfo.make_conninfo("", **info)
    return dsn


_IDLE_READS = 3


def still_open(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection still stands, asked without waiting: it reads what the
    server sent meanwhile (a backend ended by a restart or ``pg_terminate_backend`` leaves
    its FATAL and end-of-file), so a session lost in an outage is replaced before a
    transaction is tried on it, and the new session's first statement is the fence check."""
    if conn.closed:
        return False
    try:
        # libpq's socket is non-blocking, so this never waits. One read may take only
        # the server's FATAL message; the end-of-file behind it shows on the next.
        for _ in range(_IDLE_READS):
            conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return conn.pgconn.status == psycopg.pq.ConnStatus.OK


def kept_session(
    held: psycopg.Connection[Any] | None,
    open_new: Callable[[], psycopg.Connection[Any]],
    statement_timeout_ms: int,
) -> psycopg.Connection[Any]:
    """``held`` while it still stands, else a new session bounded by
    ``statement_timeout_ms``: a long-lived reader replaces a session lost in an outage
    before trying a statement on it, and no statement waits unbounded."""
    if held is not None:
        if still_open(held):
            return held
        with contextlib.suppress(psycopg.Error):
            held.close()
    conn = open_new()
    try:
        conn.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")
    except psycopg.Error:
        conn.close()
        raise
    return conn

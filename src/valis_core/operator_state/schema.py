"""The operator-state schema: versioned SQL migrations, applied in order and recorded.

Migrations are the files ``migrations/NNNN_name.sql`` shipped in this package. ``migrate``
applies every one not yet recorded in ``schema_migrations``, all in one transaction that
first takes a transaction-scoped advisory lock: a second ``migrate`` running at the same
time waits for the first to commit, then finds nothing left to do. Each applied file's
SHA-256 is recorded, so a shipped migration edited after it was applied, or a database
migrated by a newer valis, is refused rather than silently diverging.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import Any

import attrs
import psycopg

from valis_core.operator_state.connection import OperatorStateError, connect

#: pg_advisory_xact_lock key: "valis" "migr" as a 64-bit number, shared by every valis.
MIGRATION_LOCK_KEY = 0x76616C69_736D6967
_FILE_RE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def shipped_migrations() -> tuple[Migration, ...]:
    """Every migration in this package, in version order."""
    found = []
    for entry in resources.files("valis_core.operator_state").joinpath("migrations").iterdir():
        match = _FILE_RE.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise OperatorStateError("operator state: two shipped migrations share a version")
    return tuple(found)


def migrate(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    """Bring the schema up to date; return the versions applied now (empty if none).

    Runs in its own transaction on ``conn``, which must not be inside one already.
    """
    shipped = shipped_migrations()
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY,"
            " name text NOT NULL,"
            " sha256 text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        recorded = {
            version: (name, sha)
            for version, name, sha in conn.execute(
                "SELECT version, name, sha256 FROM schema_migrations"
            )
        }
        known = {m.version: m for m in shipped}
        newer = sorted(set(recorded) - set(known))
        if newer:
            raise OperatorStateError(
                f"operator state: the database has schema version(s) {newer} this valis does "
                "not know; run a valis at least as new as the one that migrated it"
            )
        for version, (name, sha) in sorted(recorded.items()):
            if known[version].checksum != sha:
                raise OperatorStateError(
                    f"operator state: migration {name} was applied with different contents "
                    "than this valis ships; restore the original file or the database"
                )
        applied = []
        for migration in shipped:
            if migration.version in recorded:
                continue
            try:
                conn.execute(migration.sql.encode("utf-8"))
            except psycopg.Error as exc:
                raise OperatorStateError(
                    f"operator state: migration {migration.name} failed: "
                    f"{' '.join(str(exc).split())}; nothing was applied"
                ) from exc
            conn.execute(
                "INSERT INTO schema_migrations (version, name, sha256) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            applied.append(migration.version)
    return tuple(applied)


def connect_current(dsn: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection to ``dsn`` (``connection.connect``) whose schema version is checked
    once, here, so a database that was never migrated (or was migrated by another valis)
    is one line naming the remedy rather than the first query's missing table."""
    conn = connect(dsn, autocommit=autocommit)
    try:
        require_current_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def require_current_schema(conn: psycopg.Connection[Any]) -> int:
    """The schema version, when it is the one this valis ships; otherwise the remedy.

    Asked once per connection, before any query that needs the tables. Leaves ``conn``
    outside any transaction it did not find it in.
    """
    needed = shipped_migrations()[-1].version
    try:
        found = schema_version(conn)
        if not conn.autocommit:
            conn.rollback()
    except psycopg.Error as exc:
        raise OperatorStateError(
            f"operator state: cannot read the schema version: {' '.join(str(exc).split())}"
        ) from exc
    if found is None or found < needed:
        raise OperatorStateError(
            f"operator state is at schema {found or 0}, this valis needs {needed}: run "
            "valis db migrate"
        )
    if found > needed:
        raise OperatorStateError(
            f"operator state is at schema {found}, newer than this valis knows ({needed}): "
            "run a valis at least as new as the one that migrated it"
        )
    return found


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The highest applied migration version, or None for an unmigrated database."""
    row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return None
    top = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return None if top is None else top[0]

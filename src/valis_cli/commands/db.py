"""``valis db migrate``: bring the operator-state schema up to date (idempotent)."""

from __future__ import annotations

import argparse
from typing import Any

from valis_cli.operator_dsn import add_dsn_arguments, operator_connection


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("db", help="operator-state database schema")
    actions = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    run = actions.add_parser(
        "migrate",
        help="apply pending schema migrations (safe to repeat or run concurrently)",
        description="Apply every pending operator-state migration in one transaction.",
    )
    add_dsn_arguments(run)
    run.set_defaults(handler=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    from valis_core.operator_state.schema import migrate, shipped_migrations

    with operator_connection(args, require_schema=False) as conn:
        applied = migrate(conn)
    latest = shipped_migrations()[-1].version
    if applied:
        print(f"applied migration(s) {', '.join(map(str, applied))}; schema at version {latest}")
    else:
        print(f"schema already at version {latest}; nothing to do")
    return 0

"""``valis assess``: is this host ready for a node? Every prerequisite as its own clause.

Reads the host and changes nothing. A table for people, ``--json`` for tools; the exit
status is 0 only when every clause passes. Run it on the node itself: it assesses the
machine it runs on. ``--interface IFACE`` also derives the unit's public network from
that interface (address, prefix and a gateway the host has actually heard from).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from valis_core.node_defaults import (
    DEFAULT_LAUNCHER_CONFIG,
    DEFAULT_PG_PORT,
    DEFAULT_PG_SOCKET_DIR,
    DEFAULT_RUN_ACCOUNT,
    DEFAULT_SITE_FACTS,
    DEFAULT_STATE_DIR,
)

if TYPE_CHECKING:
    from valis_core.ops.assessment import AssessConfig, Clause
    from valis_core.ops.local_probe import LocalHostProbe
    from valis_core.ops.public_network import PublicNetwork


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "assess",
        help="check every host prerequisite, clause by clause (changes nothing)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="default: %(default)s")
    parser.add_argument(
        "--binary",
        help="the resident command (shell-quoted); default: the launcher config's valis-command",
    )
    parser.add_argument(
        "--run-account", default=DEFAULT_RUN_ACCOUNT, metavar="USER[:GROUP]",
        help="default: %(default)s",
    )
    parser.add_argument(
        "--launcher-config", default=str(DEFAULT_LAUNCHER_CONFIG), help="default: %(default)s"
    )
    parser.add_argument(
        "--unsupervised",
        action="store_true",
        help="the host runs no fulcrum (serves no privileged port): no launcher config needed",
    )
    parser.add_argument("--pg-socket-dir", default=DEFAULT_PG_SOCKET_DIR,
                        help="default: %(default)s")
    parser.add_argument("--pg-port", type=int, default=DEFAULT_PG_PORT, help="default: %(default)s")
    parser.add_argument(
        "--site-facts", action="append", metavar="PATH",
        help=f"site-facts file(s) to search for a development listener "
        f"(default: {DEFAULT_SITE_FACTS}); the node's configuration store and the installed "
        "valis/fulcrum unit files are always searched",
    )
    parser.add_argument("--interface", metavar="IFACE",
                        help="also derive the unit's public network from this interface")
    parser.set_defaults(handler=_assess)


def assess_config(args: argparse.Namespace, site_facts: Sequence[str],
                  dsn: str | None = None) -> AssessConfig:
    """The assessment the host options name (``valis assess``'s own, which ``valis
    condense`` shares), searching ``site_facts`` for a development listener; a
    certificate ``dsn`` is assessed as the node's database host (else the socket is)."""
    from valis_core.operator_state.dsn import database_host, parse_dsn
    from valis_core.ops.assessment import AssessConfig
    from valis_core.ops.local_probe import node_environment_files

    return AssessConfig(
        database_host=None if dsn is None else database_host(parse_dsn(dsn, source="the DSN")),
        state_dir=str(args.state_dir),
        run_account=args.run_account,
        binary=tuple(shlex.split(args.binary)) if args.binary else None,
        supervised=not args.unsupervised,
        launcher_config=args.launcher_config,
        pg_socket_dir=args.pg_socket_dir,
        pg_port=args.pg_port,
        environment_files=node_environment_files(site_facts),
    )


def _public_network_clause(
    probe: LocalHostProbe, iface: str
) -> tuple[Clause, PublicNetwork | None]:
    from valis_core.ops.assessment import Clause
    from valis_core.ops.public_network import PublicNetworkError, derive_public_network

    try:
        derived = derive_public_network(probe, iface)
    except PublicNetworkError as exc:
        return Clause("public-network", False, str(exc), "see the detail"), None
    detail = (
        f"unit-ip {derived.address}, unit-cidr {derived.prefix}, public-gateway "
        f"{derived.gateway} (heard from on {iface})"
    )
    return Clause("public-network", True, detail, None), derived


def _node_dsn(files: Sequence[str]) -> str | None:
    """The DSN the node's site facts (or configuration store) name, if one can be read:
    a certificate DSN makes the database host the one assessed."""
    import os

    from valis_cli.operator_dsn import find_dsn
    from valis_core.errors import ValisError

    try:
        return find_dsn(None, os.environ, [Path(path) for path in files])
    except ValisError:
        return None


def _assess(args: argparse.Namespace) -> int:
    from valis_core.config_store import store_path
    from valis_core.ops.assessment import render_table
    from valis_core.ops.host_readiness import assess_host
    from valis_core.ops.local_probe import LocalHostProbe

    probe = LocalHostProbe()
    files = [*(args.site_facts or [DEFAULT_SITE_FACTS]), str(store_path(Path(args.state_dir)))]
    config = assess_config(args, files, _node_dsn(files))
    clauses = list(assess_host(probe, config).clauses)
    derived = None
    if args.interface:
        clause, derived = _public_network_clause(probe, args.interface)
        clauses.append(clause)
    ok = all(clause.ok for clause in clauses)
    if args.json:
        from valis_core.ops.assess_report import render_report

        sys.stdout.write(render_report(clauses, derived, interface_named=bool(args.interface)))
    else:
        sys.stdout.write(render_table(clauses))
        failed = sum(not clause.ok for clause in clauses)
        warned = sum(clause.warning is not None for clause in clauses)
        caveat = f" ({warned} warning(s): see above)" if warned else ""
        print(f"host is ready{caveat}" if ok else f"host is not ready: {failed} clause(s) fail")
    return 0 if ok else 1

"""``valis db``: the operator-state database.

``migrate`` brings the schema up to date (idempotent). On a database host (the two-host
topology, docs/operator-state.md): ``host`` makes the host's own PostgreSQL admit nodes
on other hosts by client certificate over TLS, and ``client-bundle`` issues a node the
bundle it reaches the database with (``valis provision --database-bundle``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from valis_cli.operator_dsn import add_dsn_arguments, operator_connection
from valis_core.node_defaults import DEFAULT_PG_PORT, DEFAULT_PG_SOCKET_DIR

DEFAULT_CA_DIR = "/etc/valis/operator-state-ca"


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

    host = actions.add_parser(
        "host",
        help="make this host's PostgreSQL the database host of nodes on other hosts",
        description="Make this host's own PostgreSQL admit nodes on other hosts by client "
        "certificate over TLS (no password anywhere): the role and database, a private CA "
        "under --ca-dir (root's), a server certificate for every --name, the TLS settings "
        "and a hostssl ... cert line in pg_hba.conf ahead of other TCP lines for them; the "
        "cluster is restarted when its listen addresses change. Run as root; again, it "
        "says nothing to change. Then issue each node a bundle with valis db client-bundle.",
    )
    host.add_argument("--name", action="append", required=True, metavar="NAME",
                      help="a host name or address nodes dial (repeat for each); their DSN's "
                      "host must be one of these (sslmode=verify-full checks it)")
    host.add_argument("--listen", required=True, metavar="ADDR[,ADDR...]",
                      help="the address(es) PostgreSQL listens on for nodes")
    host.add_argument("--clients", required=True, metavar="CIDR",
                      help="the network nodes connect from (e.g. 198.51.100.0/24)")
    _host_arguments(host)
    host.set_defaults(handler=_host)

    bundle = actions.add_parser(
        "client-bundle",
        help="issue a node its client certificate, as one PEM file",
        description="Issue a client certificate (CN = the role) from the CA valis db host "
        "made, written with its key and the CA certificate to one file (mode 0600): carry "
        "it to the node host and give it to valis provision --database-bundle.",
    )
    bundle.add_argument("--node", required=True, help="the node's name (kept in the "
                        "certificate for the operator's inventory)")
    bundle.add_argument("--out", required=True, type=Path, help="the bundle file to write")
    bundle.add_argument("--role", default="valis", help="default: %(default)s")
    bundle.add_argument("--ca-dir", type=Path, default=Path(DEFAULT_CA_DIR),
                        help="default: %(default)s")
    bundle.set_defaults(handler=_client_bundle)


def _host_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", default="valis", help="default: %(default)s")
    parser.add_argument("--database", default="valis_state", help="default: %(default)s")
    parser.add_argument("--ca-dir", type=Path, default=Path(DEFAULT_CA_DIR),
                        help="default: %(default)s")
    parser.add_argument("--pg-socket-dir", default=DEFAULT_PG_SOCKET_DIR,
                        help="default: %(default)s")
    parser.add_argument("--pg-port", type=int, default=DEFAULT_PG_PORT,
                        help="default: %(default)s")


def _host(args: argparse.Namespace) -> int:
    from valis_core.clock import utc_now
    from valis_core.operator_state.database_host import HostRequest, serve_database_host
    from valis_core.operator_state.host_cluster import (
        HostClusterError,
        ServerAccess,
        list_clusters,
        restart_cluster,
    )
    from valis_core.operator_state.tls_access import TlsAccess

    cluster = next((found for found in list_clusters() if found.port == args.pg_port), None)
    if cluster is None:
        raise HostClusterError(
            f"postgresql: no cluster on this host listens on port {args.pg_port} "
            "(pg_lsclusters); install postgresql here, or name --pg-port"
        )
    request = HostRequest(tuple(args.name), args.listen,
                          TlsAccess(args.clients, args.role, args.database), args.ca_dir)
    outcome = serve_database_host(
        ServerAccess(args.pg_socket_dir, cluster.port, cluster.owner), request,
        utc_now())
    for line in outcome.changed:
        print(f"valis db host: {line}")
    if outcome.restart_needed:
        restart_cluster(cluster)
        print(f"valis db host: restarted cluster {cluster.version}/{cluster.name} "
              "(its listen addresses changed)")
    if not outcome.changed:
        print("valis db host: nothing to change")
    print(f"valis db host: nodes dial {', '.join(args.name)} port {cluster.port}; issue "
          "each one a bundle: valis db client-bundle --node NAME --out NAME.pem",
          file=sys.stderr)
    return 0


def _client_bundle(args: argparse.Namespace) -> int:
    from valis_core.atomic import write_atomic
    from valis_core.clock import utc_now
    from valis_core.operator_state.database_host import client_bundle

    data = client_bundle(args.ca_dir, args.role, args.node, utc_now())
    write_atomic(args.out, data, mode=0o600)
    print(f"valis db client-bundle: wrote {args.out} (client certificate CN={args.role} for "
          f"{args.node}, its key, the CA certificate); give it to valis provision "
          "--database-bundle on the node host, then delete it here")
    return 0


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

"""``valis provision``: make a fresh host ready for ``valis condense``, and nothing more.

Run as root on the node, from the delivery's own ``bin/valis`` once it is unpacked. It
observes the host, prints the plan (every step already done or to do; ``--plan`` stops
there), carries out what is to do, reporting each step, and ends with ``valis assess``,
whose exit status is provision's. Run again, it changes nothing and says so. Nothing is
started: the unit is placed and enabled, and condense starts it.

The steps: the run account (valis:valis, a system account with no login shell, or an
existing ``--run-account`` whose home the account can reach); /opt/valis/versions/<v>
and the ``current`` switch apply uses, staged from ``--delivery`` (the tarball this valis
was unpacked from) when this version is not there yet; the state directory; on the
host's PostgreSQL, the role, the database, the ident map and the pg_hba.conf line that
let exactly the run account in by peer authentication over the socket, then the schema
(no password anywhere; a host without a cluster is told what the DBA must do) — or, with
``--database-host`` and ``--database-bundle``, operator state on a database host (the
two-host topology: ``valis db host`` there, docs/operator-state.md), the bundle's client
certificate placed in the state directory and the schema migrated over TLS; the
launcher config (as ``fulcrum config produce`` writes it, its network derived from
``--interface`` as ``valis assess --interface`` does); the site facts; the private dist
when one is named; the systemd unit and its control socket unit linked and enabled
(``--no-unit``, for a host without systemd as PID 1: none, and the plan says how to
start the node by hand). ``--role`` and ``--database`` name the operator-state role and
database (plain lower-case PostgreSQL identifiers). libpq's PGPASSWORD, PGPASSFILE,
PGSERVICE, PGHOST and PGHOSTADDR in the environment are refused, as a DSN carrying a
password, a service or another host is.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from valis_core import __version__
from valis_core.errors import ValisError
from valis_core.node_defaults import (
    DEFAULT_LAUNCHER_CONFIG,
    DEFAULT_PG_PORT,
    DEFAULT_PG_SOCKET_DIR,
    DEFAULT_RUN_ACCOUNT,
    DEFAULT_SITE_FACTS,
    DEFAULT_STATE_DIR,
)
from valis_core.operator_state.peer_access import DEFAULT_DATABASE, DEFAULT_ROLE
from valis_core.plugin.dist_home import ALLOW_INSECURE, DEFAULT_DIST_HOME

if TYPE_CHECKING:
    from valis_core.launcher_config import LauncherConfig
    from valis_core.ops.provision import ProvisionRequest, RemoteDatabase

DEFAULT_ROOT = "/opt/valis"
DEFAULT_UNIT = "fulcrum-valis.service"


class ProvisionRefused(ValisError):
    """Provision cannot run here as asked, or a step of its plan is blocked."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "provision",
        help="make a fresh host ready for condense: account, layout, database, configs, unit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--plan", action="store_true", help="print the plan and stop")
    parser.add_argument("--node", required=True, help="the node's name (VALIS_NODE_NAME)")
    parser.add_argument("--location", required=True, help="its location (VALIS_LOCATION)")
    parser.add_argument("--served-zone", action="append", required=True, metavar="ZONE",
                        help="a zone the node serves (repeatable; VALIS_SERVED_ZONES)")
    parser.add_argument("--interface", required=True, metavar="IFACE",
                        help="the public interface: unit-ip, unit-cidr and public-gateway "
                        "are derived from it (valis assess --interface)")
    parser.add_argument("--mode", default="dedicated", choices=("dedicated", "macvlan", "ipvlan"),
                        help="how the unit gets the interface (default: %(default)s)")
    parser.add_argument("--netns-name", default="valis", help="default: %(default)s")
    parser.add_argument("--designated-port", default="53", help="default: %(default)s")
    parser.add_argument("--owner-port", help="open the owner terminus on this port")
    parser.add_argument("--edge-port", help="elect the public TLS edge on this port")
    parser.add_argument("--catchall-object-path",
                        help="default: ROOT/current/lib/sk-lookup-catchall.bpf.o, the "
                        "delivery's steer object")
    parser.add_argument("--run-account", default=DEFAULT_RUN_ACCOUNT, metavar="USER",
                        help="default: %(default)s, created when absent; another account "
                        "must exist")
    parser.add_argument("--delivery", type=Path, metavar="TARBALL",
                        help="the delivery this valis was unpacked from, staged under ROOT "
                        "when its version is not there yet")
    parser.add_argument("--root", default=DEFAULT_ROOT, help="default: %(default)s")
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="default: %(default)s")
    parser.add_argument("--launcher-config", default=str(DEFAULT_LAUNCHER_CONFIG),
                        help="default: %(default)s")
    parser.add_argument("--site-facts", default=DEFAULT_SITE_FACTS, help="default: %(default)s")
    parser.add_argument("--pg-socket-dir", default=DEFAULT_PG_SOCKET_DIR,
                        help="default: %(default)s")
    parser.add_argument("--pg-port", type=int, default=DEFAULT_PG_PORT,
                        help="default: %(default)s")
    parser.add_argument("--database-host", metavar="HOST[:PORT]",
                        help="operator state on this database host (a name or address its "
                        "server certificate names; valis db host there), reached over TLS by "
                        "the client certificate of --database-bundle; default: this host's "
                        "PostgreSQL over its socket")
    parser.add_argument("--database-bundle", type=Path, metavar="FILE",
                        help="the client bundle valis db client-bundle issued for this node")
    parser.add_argument("--dist", metavar="URL",
                        help="register this private dist (https or file URL)")
    parser.add_argument(ALLOW_INSECURE, action="store_true",
                        help="with --dist: accept a plain-http URL")
    parser.add_argument("--dist-home", type=Path, default=DEFAULT_DIST_HOME,
                        help="default: %(default)s")
    parser.add_argument("--unit", default=DEFAULT_UNIT, help="default: %(default)s")
    parser.add_argument("--no-unit", action="store_true",
                        help="place no systemd unit (a host without systemd as PID 1); "
                        "the plan says how to start the node by hand")
    parser.add_argument("--role", default=DEFAULT_ROLE,
                        help="the operator-state role (default: %(default)s)")
    parser.add_argument("--database", default=DEFAULT_DATABASE,
                        help="the operator-state database (default: %(default)s)")
    parser.set_defaults(handler=_provision)


def _launcher_config(args: argparse.Namespace) -> LauncherConfig:
    """The config ``fulcrum config produce`` would write from these options, with the
    network derived from ``--interface``. A dedicated interface the unit took (moved into
    its namespace, or handed back bare when it stopped) carries nothing to derive from:
    the config already written for that interface keeps its network."""
    from valis_core.launcher_config import LauncherConfigError, parse_launcher_config
    from valis_core.launcher_config_file import config_from_options
    from valis_core.ops.local_probe import LocalHostProbe
    from valis_core.ops.public_network import PublicNetworkError, derive_public_network

    probe = LocalHostProbe()
    try:
        derived = derive_public_network(probe, args.interface)
        network = (str(derived.address), str(derived.prefix), str(derived.gateway))
    except PublicNetworkError:
        held = None
        if not probe.interface_exists(args.interface) or not probe.interface_addresses(
            args.interface
        ):
            try:
                held = parse_launcher_config(Path(args.launcher_config).read_text("utf-8"))
            except (OSError, UnicodeDecodeError, LauncherConfigError):
                held = None
        if held is None or held.public_interface != args.interface:
            raise
        network = (str(held.unit_ip), str(held.unit_cidr), str(held.public_gateway))
        print(f"valis provision: {args.interface} carries no address (the unit holds it, "
              f"or held it): keeping {args.launcher_config}'s unit-ip {held.unit_ip}/"
              f"{held.unit_cidr} and public-gateway {held.public_gateway}", flush=True)
    root = args.root.rstrip("/") or "/"
    account = _named_account(args)
    return config_from_options({
        "netns-name": args.netns_name,
        "unit-ip": network[0],
        "unit-cidr": network[1],
        "public-interface": args.interface,
        "public-gateway": network[2],
        "mode": args.mode,
        "designated-port": args.designated_port,
        "edge-port": args.edge_port,
        "owner-port": args.owner_port,
        "catchall-object-path": args.catchall_object_path
        or f"{root}/current/lib/sk-lookup-catchall.bpf.o",
        "valis-command": f"{root}/current/bin/valis",
        # fulcrum drops to valis by name; another run account is pinned by its ids.
        "valis-uid": None if account is None else str(account.pw_uid),
        "valis-gid": None if account is None else str(account.pw_gid),
    })


def _named_account(args: argparse.Namespace) -> pwd.struct_passwd | None:
    """The ``--run-account`` other than valis, as this host resolves it (None for valis,
    or for an account that does not exist: the plan says so)."""
    if args.run_account == DEFAULT_RUN_ACCOUNT:
        return None
    try:
        return pwd.getpwnam(args.run_account)
    except KeyError:
        return None


def _run_group(args: argparse.Namespace) -> str:
    account = _named_account(args)
    if account is None:
        return DEFAULT_RUN_ACCOUNT
    try:
        return grp.getgrgid(account.pw_gid).gr_name
    except KeyError:
        return str(account.pw_gid)


def _request(args: argparse.Namespace) -> ProvisionRequest:
    from valis_core.operator_state.local_cluster import socket_dsn
    from valis_core.operator_state.site_facts import check_site_facts
    from valis_core.ops.provision import ProvisionRequest
    from valis_core.plugin.dist_home import check_index_url

    # Checked first: a refused URL is named before anything on the host is looked at.
    dist_url = None if args.dist is None else check_index_url(
        args.dist, allow_insecure=args.allow_insecure_dist)
    remote = _remote_database(args)
    dsn = socket_dsn(
        args.pg_socket_dir, role=args.role, database=args.database, port=args.pg_port
    ) if remote is None else _remote_dsn(args, remote)
    facts = {
        "VALIS_NODE_NAME": args.node,
        "VALIS_LOCATION": args.location,
        "VALIS_SERVED_ZONES": ",".join(args.served_zone),
        "VALIS_OPERATOR_STATE_DSN": dsn,
    }
    check_site_facts(facts)
    return ProvisionRequest(
        account=args.run_account,
        version=__version__,
        root=args.root,
        state_dir=args.state_dir,
        socket_dir=args.pg_socket_dir,
        launcher_config_path=args.launcher_config,
        launcher_config=_launcher_config(args),
        site_facts_path=args.site_facts,
        site_facts=facts,
        unit_name=args.unit,
        delivery=None if args.delivery is None else str(args.delivery.resolve()),
        dist_url=dist_url,
        allow_insecure_dist=args.allow_insecure_dist,
        pg_port=args.pg_port,
        run_group=_run_group(args),
        role=args.role,
        database=args.database,
        database_host=remote,
        place_units=not args.no_unit,
    )


def _check_names(args: argparse.Namespace) -> None:
    """``--role`` and ``--database`` as PostgreSQL takes them unquoted in the SQL,
    ``pg_hba.conf`` and the DSN provision writes."""
    from valis_core.operator_state.peer_access import identifier_problem

    for flag, name in (("--role", args.role), ("--database", args.database)):
        problem = identifier_problem(name)
        if problem is not None:
            raise ProvisionRefused(f"provision: {flag} {problem}")


def _remote_database(args: argparse.Namespace) -> RemoteDatabase | None:
    """``--database-host`` and ``--database-bundle`` read (both or neither)."""
    from valis_core.operator_state.database_host import read_client_bundle
    from valis_core.ops.provision import RemoteDatabase
    from valis_core.state_layout import TLS_CA, TLS_CLIENT_CERT, TLS_CLIENT_KEY

    if args.database_host is None and args.database_bundle is None:
        return None
    if args.database_host is None or args.database_bundle is None:
        raise ProvisionRefused(
            "provision: --database-host and --database-bundle go together: the database "
            "host nodes dial and the client bundle valis db client-bundle issued there"
        )
    host, port = _host_port(args.database_host)
    try:
        data = args.database_bundle.read_bytes()
    except OSError as exc:
        raise ProvisionRefused(
            f"provision: cannot read --database-bundle {args.database_bundle}: "
            f"{exc.strerror or exc}") from None
    bundle = read_client_bundle(data, source=str(args.database_bundle))
    return RemoteDatabase(host, port, {TLS_CA: bundle.ca_pem, TLS_CLIENT_CERT: bundle.cert_pem,
                                       TLS_CLIENT_KEY: bundle.key_pem})


def _host_port(text: str) -> tuple[str, int]:
    """``HOST``, ``HOST:PORT`` or ``[V6]:PORT``; the port defaults to PostgreSQL's."""
    host, port = text, str(DEFAULT_PG_PORT)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or port
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProvisionRefused(f"provision: --database-host {text!r} is not HOST[:PORT]")
    return host, int(port)


def _remote_dsn(args: argparse.Namespace, remote: RemoteDatabase) -> str:
    from valis_core.operator_state.dsn import CertificateFiles, render_certificate_dsn
    from valis_core.state_layout import OPERATOR_STATE_TLS, TLS_CA, TLS_CLIENT_CERT, TLS_CLIENT_KEY

    where = Path(args.state_dir) / OPERATOR_STATE_TLS
    files = CertificateFiles(*(str(where / name)
                               for name in (TLS_CA, TLS_CLIENT_CERT, TLS_CLIENT_KEY)))
    return render_certificate_dsn(remote.host, remote.port, files, role=args.role,
                                  database=args.database)


def _provision(args: argparse.Namespace) -> int:
    from valis_core.launcher_config_file import produce_config
    from valis_core.operator_state.dsn import check_environment
    from valis_core.ops.local_probe import LocalHostProbe
    from valis_core.ops.provision import plan_provision, render_plan
    from valis_core.ops.provision_host import ProvisionHost, carry_out, observe

    # libpq reads these for every connection provision makes: refused as a DSN carrying
    # a password (or a service, or another host) is.
    check_environment(os.environ, source="provision")
    _check_names(args)
    if os.geteuid() != 0:
        raise ProvisionRefused(
            "provision: run as root on the node (it creates the run account, writes under "
            "/etc and /opt and administers the local PostgreSQL)"
        )
    if args.delivery is not None and not args.delivery.is_file():
        raise ProvisionRefused(
            f"provision: --delivery {args.delivery} is not a file; give the delivery tarball"
        )
    request = _request(args)
    host = ProvisionHost(LocalHostProbe(), produce_config, args.dist_home)
    plan = plan_provision(request, observe(request, host))
    print(f"valis provision: version {request.version} under {request.root}, run account "
          f"{request.account}", flush=True)
    sys.stdout.write(render_plan(plan))
    if plan.blocked:
        names = ", ".join(step.name.value for step in plan.blocked)
        raise ProvisionRefused(
            f"provision: blocked at {names}: the plan above says what to do; nothing was "
            "changed"
        )
    if args.plan:
        return 0
    if plan.nothing_to_change:
        print("nothing to change", flush=True)
    else:
        for step in plan.to_do:
            carry_out(step, request, host)
            print(f"  done: {step.name.value}: {step.description}", flush=True)
        again = plan_provision(request, observe(request, host))
        unsettled = [step.name.value for step in again.steps if step.status.value != "done"]
        if unsettled:
            raise ProvisionRefused(
                f"provision: carried out, but the host still lacks {', '.join(unsettled)}; "
                "run valis provision --plan to see why"
            )
        print(f"provisioned: {len(plan.to_do)} step(s) carried out", flush=True)
    if not request.place_units:
        print(f"no unit placed (--no-unit): start the node by hand: {request.hand_start}",
              flush=True)
    return _assess(args)


def _assess(args: argparse.Namespace) -> int:
    """``valis assess`` on the result, exactly as an operator would run it."""
    from valis_cli.main import run

    print("valis assess:", flush=True)
    return run([
        "assess", "--state-dir", args.state_dir, "--run-account", args.run_account,
        "--launcher-config", args.launcher_config, "--pg-socket-dir", args.pg_socket_dir,
        "--pg-port", str(args.pg_port), "--site-facts", args.site_facts,
    ])

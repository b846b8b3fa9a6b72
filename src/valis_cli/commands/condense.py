"""``valis condense``: deploy (``--genesis``), evacuate (``--from-backup FILE --evacuate``)
or restore (``--from-backup FILE``) a node onto this host, as one ordered plan.

The unit is started either through systemd (``--systemd-unit``) or by supervising a
command directly (``--unit-command``, e.g. ``fulcrum launch --config ...``, run with
``STATE_DIRECTORY`` set to ``--state-dir``); in the second case this command keeps
supervising the unit after the read-back, until the unit exits (its exit status is
returned) or this command is stopped (the unit stops too): by SIGTERM, SIGINT or SIGHUP
(its terminal gone), at any step. It is the command's one supervisor: another
``condense`` or ``apply --supervise`` still supervising it is refused, naming its pid,
and a unit that a lost supervisor of the command recorded and left running is stopped
cleanly before this one's starts (``valis_core.apply.unit_record``).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from valis_cli.commands.assess import assess_config
from valis_core.errors import ValisError
from valis_core.node_defaults import (
    DEFAULT_LAUNCHER_CONFIG,
    DEFAULT_PG_PORT,
    DEFAULT_PG_SOCKET_DIR,
    DEFAULT_RUN_ACCOUNT,
    DEFAULT_STATE_DIR,
)
from valis_core.plugin.dist_home import ALLOW_INSECURE, DEFAULT_DIST_HOME

if TYPE_CHECKING:
    from valis_core.apply.unit_control import ProcessUnitController, UnitController
    from valis_core.ops.condense import CondenseRequest


class CondenseInputError(ValisError):
    """A file or account ``valis condense`` was pointed at is not there or not readable."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "condense", help="deploy, evacuate or restore a node onto this host (one ordered plan)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument("--genesis", action="store_true", help="deploy from nothing")
    start.add_argument("--from-backup", type=Path, metavar="FILE",
                       help="restore from this backup set (with --evacuate: a successor at "
                       "a new location)")
    parser.add_argument("--module", action="append", default=[], metavar="NAME==VERSION",
                        help="with --genesis: run this module, pinned to the wheel the "
                        "registered private dist offers (repeatable); evacuate and restore "
                        "run the modules their backup's head pins")
    parser.add_argument("--dist-home", type=Path, default=DEFAULT_DIST_HOME,
                        help="where this host's private dist is registered "
                        "(default: %(default)s)")
    parser.add_argument(ALLOW_INSECURE, action="store_true",
                        help="with --genesis and --module: pin modules from a private dist "
                        "served over plain http (the pins then trust whatever the network "
                        "path served; each pin's sha256 is printed to compare)")
    parser.add_argument("--evacuate", action="store_true",
                        help="with --from-backup: the new location's --site-facts apply")
    parser.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR),
                        help="the node's state directory, existing and empty, owned by the "
                        "run account (default: %(default)s)")
    parser.add_argument("--run-account", default=DEFAULT_RUN_ACCOUNT,
                        help="default: %(default)s")
    parser.add_argument("--site-facts", type=Path, metavar="FILE",
                        help="the node's site-facts file (required for --genesis and "
                        "--evacuate; a restore keeps the backup's)")
    unit = parser.add_mutually_exclusive_group(required=True)
    unit.add_argument("--unit-command", metavar="CMD",
                      help="supervise this command as the unit (e.g. 'fulcrum launch "
                      "--config /etc/fulcrum/launcher.toml')")
    unit.add_argument("--systemd-unit", metavar="NAME", help="start this systemd unit")
    parser.add_argument("--dns-address", required=True, metavar="HOST:PORT",
                        help="where the unit answers DNS, for the apex SOA read-back")
    parser.add_argument("--ask-in-netns", metavar="NAME",
                        help="ask the read-back from inside this network namespace (for a "
                        "unit address the host itself cannot reach, e.g. a dedicated NIC)")
    parser.add_argument("--unsupervised", action="store_true",
                        help="assess a host without fulcrum (no launcher config)")
    parser.add_argument("--binary", help="the resident command to assess")
    parser.add_argument("--launcher-config", default=str(DEFAULT_LAUNCHER_CONFIG))
    parser.add_argument("--pg-socket-dir", default=DEFAULT_PG_SOCKET_DIR)
    parser.add_argument("--pg-port", type=int, default=DEFAULT_PG_PORT)
    parser.set_defaults(handler=_condense)


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise CondenseInputError(f"condense: --dns-address {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _facts(args: argparse.Namespace) -> dict[str, str] | None:
    from valis_core.operator_state.site_facts import SiteFactsError, parse_site_facts

    if args.site_facts is None:
        if args.genesis or args.evacuate:
            raise CondenseInputError(
                "condense: --genesis and --evacuate need --site-facts FILE (the node's site "
                "facts at this location)"
            )
        return None
    try:
        text = args.site_facts.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CondenseInputError(
            f"condense: cannot read the site-facts file {args.site_facts}: "
            f"{getattr(exc, 'strerror', None) or exc}; render it with valis site-facts "
            "render, or give its path with --site-facts"
        ) from None
    try:
        return parse_site_facts(text)
    except SiteFactsError as exc:
        raise CondenseInputError(
            f"condense: {args.site_facts}: {exc}; render it again with valis site-facts render"
        ) from None


def _backup_file(args: argparse.Namespace) -> None:
    """Refuse a backup set that is not a readable file before any step runs."""
    path: Path | None = args.from_backup
    if path is None:
        return
    if not path.is_file():
        raise CondenseInputError(
            f"condense: the backup set {path} is not a file; give the archive valis backup "
            "create wrote (--from-backup FILE)"
        )
    if not os.access(path, os.R_OK):
        raise CondenseInputError(
            f"condense: the backup set {path} is not readable by this account; run as root "
            "or make it readable"
        )


def _run_account(text: str) -> tuple[int, int]:
    name = text.partition(":")[0]
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise CondenseInputError(
            f"condense: there is no account {name!r} (--run-account); create the run "
            "account first (valis assess names it)"
        ) from None
    return account.pw_uid, account.pw_gid


def _edge_elected(args: argparse.Namespace) -> bool:
    """Whether the launcher config elects the edge (``edge-port``). Unsupervised, or with
    a launcher config that cannot be read, no: assessing the host (the plan's first
    step) reports a launcher config it cannot read."""
    from valis_core.launcher_config import LauncherConfigError, parse_launcher_config

    if args.unsupervised:
        return False
    try:
        text = Path(args.launcher_config).read_text("utf-8")
        return parse_launcher_config(text).edge_port is not None
    except (OSError, UnicodeDecodeError, LauncherConfigError):
        return False


def _request(args: argparse.Namespace, zones: tuple[str, ...]) -> CondenseRequest:
    from valis_core.ops.backup import verify_backup_set
    from valis_core.ops.condense import CondenseRequest, RequestKind

    edge = _edge_elected(args)
    if args.genesis:
        if args.evacuate:
            raise CondenseInputError("condense: --evacuate needs --from-backup FILE")
        return CondenseRequest(RequestKind.GENESIS, zones, modules=args.module, edge=edge)
    if args.module:
        raise CondenseInputError(
            "condense: --module is for --genesis; evacuate and restore run the modules "
            "their backup's head pins"
        )
    verified = verify_backup_set(args.from_backup)
    kind = RequestKind.EVACUATE if args.evacuate else RequestKind.RESTORE
    return CondenseRequest(
        kind, zones, backup=str(args.from_backup), backup_generation=verified.generation,
        edge=edge,
    )


#: What stops a supervising condense, and its unit with it: SIGHUP is the terminal gone.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop_on_term(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _condense(args: argparse.Namespace) -> int:
    import attrs

    from valis_core.apply.unit_control import ProcessUnitController, SystemdUnitController
    from valis_core.apply.unit_record import record_dir
    from valis_core.operator_state.dsn import check_operator_dsn
    from valis_core.operator_state.site_facts import DSN_KEY, served_zones
    from valis_core.ops.condense import condense_onto_host
    from valis_core.ops.condense_host import (
        CondenseHostError,
        LocalCondenseHost,
        ask_soa_in_netns,
        ask_soa_udp,
        backup_paths,
        backup_site_facts,
        connect_as_account,
        let_unit_notify,
    )
    from valis_core.ops.host_readiness import assess_host
    from valis_core.ops.local_probe import LocalHostProbe

    _backup_file(args)
    run_account = _run_account(args.run_account)
    facts = _facts(args)
    effective = facts if facts is not None else backup_site_facts(args.from_backup)
    check_operator_dsn(
        effective[DSN_KEY],
        source=f"{DSN_KEY} in {args.site_facts or f'the backup set {args.from_backup}'}",
    )
    request = _request(args, served_zones(effective))
    config = assess_config(args, [str(args.site_facts)] if args.site_facts else [],
                           effective[DSN_KEY])
    if args.from_backup is not None:
        # Files the backup set brings (the client certificate a database host admits)
        # are not missing from a state directory this condense is about to restore.
        config = attrs.evolve(config, restoring=frozenset(
            str(Path(args.state_dir) / path) for path in backup_paths(args.from_backup)))

    def assess() -> None:
        failed = assess_host(LocalHostProbe(), config).failed
        if failed:
            raise CondenseHostError(
                "the host is not ready: "
                + "; ".join(f"{c.name}: {c.detail} (remedy: {c.remedy})" for c in failed)
            )

    process: ProcessUnitController | None = None
    previous: dict[int, Any] = {}
    unit: UnitController
    if args.unit_command:
        # As systemd's StateDirectory= would: the unit is told the state directory
        # this plan materialises.
        env = {**os.environ, "STATE_DIRECTORY": str(args.state_dir)}
        process = ProcessUnitController(
            shlex.split(args.unit_command), env=env, record_dir=record_dir()
        )
        # From here a stop stops the unit too, whichever step it comes at: the unit
        # runs in a session of its own, so it would outlive this command unsupervised.
        previous = {signum: signal.signal(signum, _stop_on_term) for signum in STOP_SIGNALS}
        unit = process
    else:
        unit = SystemdUnitController(args.systemd_unit)
    try:
        if process is not None:
            let_unit_notify(process, run_account)
        host = LocalCondenseHost(
            state_dir=args.state_dir,
            run_account=run_account,
            connect=connect_as_account(effective[DSN_KEY], run_account),
            unit=unit,
            holder=f"{effective['VALIS_NODE_NAME']}@{effective['VALIS_LOCATION']}",
            dns_address=_address(args.dns_address),
            assess=assess,
            facts=facts,
            ask_soa=ask_soa_in_netns(args.ask_in_netns) if args.ask_in_netns else ask_soa_udp,
            dist_home=args.dist_home,
            allow_insecure_dist=args.allow_insecure_dist,
            say=lambda line: print(line, file=sys.stderr, flush=True),
        )
        report = condense_onto_host(request, host)
        try:
            print(
                f"valis: condensed ({request.kind.value}) in {len(report.completed)} steps; "
                f"serving {', '.join(request.zones)} at {args.dns_address}",
                flush=True,
            )
            if process is None:
                return 0
            status = process.wait_exit()
        except KeyboardInterrupt:
            return 0
        print(f"valis: the unit exited with status {status}", file=sys.stderr)
        return 0 if status == 0 else 1
    finally:
        if process is not None:
            for signum in STOP_SIGNALS:  # the stop, once begun, runs to its end
                signal.signal(signum, signal.SIG_IGN)
            try:
                process.close()
            finally:
                for caught, handler in previous.items():
                    signal.signal(caught, handler)

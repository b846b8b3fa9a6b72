"""``fulcrum config produce|verify``: write this host's launcher config, or re-check one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from valis_core.launcher_config import (
    DEFAULT_PATH,
    FIELDS,
    RESTART_TO_APPLY,
    LauncherConfig,
    firewall_accept_set,
    owner_terminus,
    served_dns_reachability,
)
from valis_core.reachability import render_endpoints

_HELP = {
    "netns-name": "the network namespace fulcrum creates (e.g. valis)",
    "unit-ip": "the unit's public address inside the netns",
    "unit-cidr": "prefix length of the unit network",
    "public-interface": "the NIC moved in (dedicated) or the parent of the child link",
    "public-gateway": "the public interface's own gateway, inside the unit network",
    "mode": "dedicated, macvlan or ipvlan",
    "designated-port": "the port the DNS pair is bound on in the netns (53); naming it "
    "opens nothing",
    "edge-port": "elects the public TLS edge on this port (omit: no edge)",
    "owner-port": "opens the owner terminus (DNS UPDATE over TCP) on this port (omit: "
    "closed; the DNS port answers UPDATE with NOTIMP)",
    "catchall-object-path": "absolute path of the sk_lookup object (existence not checked)",
    "valis-command": "the resident's command line as one shell-quoted string, "
    "e.g. '/opt/valis/current/bin/valis'",
    "valis-uid": "numeric run uid (normally omitted: the valis account by name)",
    "valis-gid": "numeric run gid (normally omitted: the valis group by name)",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="produce or verify the launcher config")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    produce = verbs.add_parser("produce", help="write the launcher config and read it back")
    produce.add_argument(
        "--out", type=Path, default=DEFAULT_PATH, help=f"where to write (default {DEFAULT_PATH})"
    )
    # Every field is taken as text and checked by the config itself, so a bad or missing
    # one is reported as one line naming the field.
    for key in FIELDS:
        produce.add_argument(f"--{key}", dest=_dest(key), metavar="VALUE", help=_HELP[key])
    produce.set_defaults(handler=_produce)

    verify = verbs.add_parser("verify", help="re-check a launcher config file")
    verify.add_argument(
        "path", type=Path, nargs="?", default=DEFAULT_PATH, help=f"default {DEFAULT_PATH}"
    )
    verify.set_defaults(handler=_verify)


def _dest(key: str) -> str:
    return "field_" + key.replace("-", "_")


def _produce(args: argparse.Namespace) -> int:
    from valis_core.launcher_config_file import config_from_options, produce_config

    cfg = config_from_options({key: getattr(args, _dest(key)) for key in FIELDS})
    before = _held(args.out)
    produce_config(cfg, args.out)
    print(f"wrote {args.out}; {_summary(cfg)}")
    _warn_unreachable_dns(cfg)
    if before is not None and before != args.out.read_bytes():
        print(f"changed: {RESTART_TO_APPLY}")
    return 0


def _held(path: Path) -> bytes | None:
    """What ``path`` holds before it is rewritten (``None``: nothing readable)."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def _verify(args: argparse.Namespace) -> int:
    from valis_core.launcher_config_file import load_launcher_config

    cfg = load_launcher_config(args.path)
    print(f"{args.path}: ok; {_summary(cfg)}")
    _warn_unreachable_dns(cfg)
    return 0


def _summary(cfg: LauncherConfig) -> str:
    return (
        f"netns {cfg.netns_name}, unit {cfg.unit_ip}/{cfg.unit_cidr} on "
        f"{cfg.public_interface} ({cfg.mode}), DNS bound on port {cfg.designated_port}, "
        f"firewall accepts {render_endpoints(firewall_accept_set(cfg))}, "
        f"{owner_terminus(cfg)}"
    )


def _warn_unreachable_dns(cfg: LauncherConfig) -> None:
    """Say what the node otherwise never says: DNS served behind a port the firewall drops.

    A warning, not a refusal: the contract allows any designated port; it never opens one.
    """
    problem = served_dns_reachability(cfg).problem
    if problem is not None:
        print(f"warning: {problem}")

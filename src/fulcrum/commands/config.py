"""``fulcrum config produce|verify``: write this host's launcher config, or re-check one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fulcrum.provisioning import config_from_options, load_launcher_config, produce_config
from valis_core.launcher_config import (
    DEFAULT_PATH,
    FIELDS,
    LauncherConfig,
    firewall_accept_set,
)

_HELP = {
    "netns-name": "the network namespace fulcrum creates (e.g. valis)",
    "unit-ip": "the unit's public address inside the netns",
    "unit-cidr": "prefix length of the unit network",
    "public-interface": "the NIC moved in (dedicated) or the parent of the child link",
    "public-gateway": "the public interface's own gateway, inside the unit network",
    "mode": "dedicated, macvlan or ipvlan",
    "designated-port": "the port the unit serves; naming it opens nothing",
    "edge-port": "elects the public TLS edge on this port (omit: no edge)",
    "owner-port": "opens the owner terminus on this port (omit: closed)",
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
    cfg = config_from_options({key: getattr(args, _dest(key)) for key in FIELDS})
    produce_config(cfg, args.out)
    print(f"wrote {args.out}; {_summary(cfg)}")
    _warn_unopened_designated_port(cfg)
    return 0


def _verify(args: argparse.Namespace) -> int:
    cfg = load_launcher_config(args.path)
    print(f"{args.path}: ok; {_summary(cfg)}")
    _warn_unopened_designated_port(cfg)
    return 0


def _summary(cfg: LauncherConfig) -> str:
    accepts = ", ".join(f"{proto}/{port}" for proto, port in sorted(firewall_accept_set(cfg)))
    return (
        f"netns {cfg.netns_name}, unit {cfg.unit_ip}/{cfg.unit_cidr} on "
        f"{cfg.public_interface} ({cfg.mode}), firewall accepts {accepts}"
    )


def _warn_unopened_designated_port(cfg: LauncherConfig) -> None:
    """Say what the node otherwise never says: a designated port the firewall drops."""
    ports = {port for _, port in firewall_accept_set(cfg)}
    if cfg.designated_port not in ports:
        print(
            f"note: designated-port {cfg.designated_port} is not in the firewall accept set, "
            "so it is dropped; name it as edge-port to open it"
        )

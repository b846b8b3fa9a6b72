"""``valis zone sign|ds``: turn on a zone's online signing, and print what its parent needs.

``sign`` runs on the node: it makes the zone's key in the state directory (once; run again
it keeps the key) and records in operator state, fenced at this node's standing, that the
zone is signed with it. ``ds`` prints the DS (SHA-256) and DNSKEY records to give the
parent, from the key the state directory holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from valis_cli.operator_dsn import add_dsn_arguments, operator_dsn
from valis_core.errors import ValisError
from valis_core.fence import FenceState
from valis_core.node_defaults import DEFAULT_STATE_DIR


class SigningVerbError(ValisError):
    """A zone that cannot be signed, or has no key to show, as asked."""


def register(actions: argparse._SubParsersAction[Any]) -> None:
    run = actions.add_parser(
        "sign",
        help="sign a zone online with a key this node makes and keeps",
        description=(
            "Make the zone's combined signing key (CSK) in the state directory if it has "
            "none, and turn signing on in operator state. Then give the parent the DS "
            "'valis zone ds' prints. Run it on the node, as root or the run account."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument(
        "--algorithm", type=int, choices=(13, 15), default=13,
        help="13: ECDSA P-256 with SHA-256 (default), 15: Ed25519",
    )
    run.set_defaults(handler=_sign)

    run = actions.add_parser("ds", help="print a signed zone's DS and DNSKEY for its parent")
    run.add_argument("zone", metavar="ZONE")
    run.add_argument("--state-dir", type=Path, help=f"default: {DEFAULT_STATE_DIR}")
    run.set_defaults(handler=_ds)


def node_standing(state_dir: Path) -> FenceState:
    """The fence standing this state directory's node writes at: its store head's
    generation and its holder name."""
    from valis_core.identity.instance import holder_name, instance_token
    from valis_core.resident.config_store import read_config_store
    from valis_core.store.head import read_store_head

    head = read_store_head(state_dir)
    if head is None:
        raise SigningVerbError(
            f"{state_dir} has no store head, so it is not a condensed node's state "
            "directory; run this on the node with its --state-dir"
        )
    store = read_config_store(state_dir)
    token = instance_token(state_dir, head.generation)
    return FenceState(
        generation=head.generation,
        holder=holder_name(f"{store.node_name}@{store.location}", token),
    )


def _sign(args: argparse.Namespace) -> int:
    from valis_core.dns.zone_keys import ensure_zone_key, forget_zone_key
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.zone_signing import ZoneSigning, enable_signing
    from valis_core.operator_state.zones import canonical_zone_name

    zone = canonical_zone_name(args.zone)
    state_dir = args.state_dir or Path(DEFAULT_STATE_DIR)
    standing = node_standing(state_dir)
    dsn = operator_dsn(args)
    with connect(dsn, require_schema=True) as conn:
        key, made = ensure_zone_key(state_dir, zone, args.algorithm)
        try:
            if not enable_signing(conn, standing, ZoneSigning(zone, key.algorithm, key.tag)):
                raise SigningVerbError(
                    f"zone {zone} is not in the operator-state database; import it first"
                )
        except BaseException:
            if made:  # refused: a key no zone signs with is not left behind
                forget_zone_key(state_dir, zone, key)
            raise
    print(
        f"zone {zone}: signed with algorithm {key.algorithm}, key tag {key.tag} "
        f"({'made' if made else 'kept'}); give the parent its DS: valis zone ds {zone}"
    )
    return 0


def _ds(args: argparse.Namespace) -> int:
    from valis_core.dns import wire
    from valis_core.dns.zone_keys import file_zone, load_zone_keys
    from valis_core.operator_state.zones import canonical_zone_name

    zone = canonical_zone_name(args.zone)
    state_dir = args.state_dir or Path(DEFAULT_STATE_DIR)
    key = load_zone_keys(state_dir).get(file_zone(zone))
    if key is None:
        raise SigningVerbError(
            f"{state_dir} holds no signing key for zone {zone}; 'valis zone sign {zone}' "
            "makes one"
        )
    for line in ds_lines(wire.from_text(zone), key.dnskey):
        print(line)
    return 0


def ds_lines(apex: bytes, dnskey: bytes) -> tuple[str, str]:
    """The DS and DNSKEY records of one key, in presentation form."""
    import dns.rdata
    import dns.rdataclass
    import dns.rdatatype

    from valis_core.dns import wire
    from valis_core.dns.dnssec import ds_rdata

    zone = wire.to_text(apex)
    ds = ds_rdata(apex, dnskey)
    ds_text = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.DS, ds, 0, len(ds))
    key_text = dns.rdata.from_wire(
        dns.rdataclass.IN, dns.rdatatype.DNSKEY, dnskey, 0, len(dnskey)
    )
    return f"{zone} IN DS {ds_text}", f"{zone} IN DNSKEY {key_text}"

"""``valis zone sign|ds|rollover``: turn on a zone's online signing, print what its
parent needs, and roll its key.

``sign`` runs on the node: it makes the zone's key in the state directory (once; run again
it keeps the key), or with ``--split`` a KSK and a ZSK, and records in operator state,
fenced at this node's standing, that the zone is signed with it. ``ds`` prints the DS
(SHA-256) and DNSKEY records the parent should hold now (during a roll, the set its step
asks for). ``rollover`` makes the new key and begins the roll (``valis_core.dns.dnssec.rollover``):
the CSK's, a split zone's KSK, or with ``--zsk`` its ZSK; or with ``--ds-published`` it
confirms the parent's DS. The resident moves the timed steps on.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from valis_cli.commands.zone_denial import (
    add_denial_arguments,
    denial_asked,
    set_asked_denial,
)
from valis_cli.operator_dsn import add_dsn_arguments, operator_connection
from valis_core.errors import ValisError
from valis_core.node_defaults import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from valis_core.dns.dnssec.rollover import Timing
    from valis_core.fence import FenceState


class SigningVerbError(ValisError):
    """A zone that cannot be signed, or has no key to show, as asked."""


def register(actions: argparse._SubParsersAction[Any]) -> None:
    run = actions.add_parser(
        "sign",
        help="sign a zone online with a key this node makes and keeps",
        description=(
            "Make the zone's combined signing key (CSK) in the state directory if it has "
            "none (with --split: a key-signing key and a zone-signing key), and turn "
            "signing on in operator state. Then give the parent the DS 'valis zone ds' "
            "prints. Run it on the node, as root or the run account."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument(
        "--algorithm", type=int, choices=(13, 15),
        help="13: ECDSA P-256 with SHA-256, 15: Ed25519; a signed zone keeps its own "
        "unless this names one (another is refused), a zone signed for the first time "
        "gets 13 unless it names 15",
    )
    run.add_argument(
        "--split", action="store_true", default=None,
        help="a KSK (flags 257: signs the DNSKEY RRset, its DS at the parent) and a ZSK "
        "(flags 256: signs the rest, rolled with 'valis zone rollover --zsk') instead of "
        "one CSK; a signed zone keeps the kind it was signed with",
    )
    add_timing_arguments(run)
    add_denial_arguments(run)
    run.set_defaults(handler=_sign)

    run = actions.add_parser(
        "ds",
        help="print the DS set a signed zone's parent should hold now, and the DNSKEYs",
        description=(
            "Print the DS records (SHA-256) the parent should hold at this moment, then "
            "the DNSKEY of each; during a rollover the set changes with its step, which "
            "is said on stderr."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.set_defaults(handler=_ds)

    run = actions.add_parser(
        "rollover",
        help="roll a signed zone's key (RFC 7583 Double-DS, or a ZSK by pre-publication), "
        "or confirm the parent's DS",
        description=(
            "Make a new key and begin rolling the zone to it; the running node moves each "
            "timed step on. A CSK, or a split zone's KSK, rolls by Double-DS: at the steps "
            "ds-submit and ds-retire the roll waits for the parent: give it the DS set "
            "'valis zone ds' prints, then confirm with --ds-published. A split zone's ZSK "
            "(--zsk) rolls by pre-publication, on time alone. Timings are seconds; those "
            "given are kept as the zone's."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("zone", metavar="ZONE")
    run.add_argument(
        "--ds-published", action="store_true",
        help="the parent publishes the DS set 'valis zone ds' prints: move the roll on",
    )
    run.add_argument(
        "--zsk", action="store_true",
        help="roll a split zone's ZSK (pre-publish: nothing for the parent to do)",
    )
    add_timing_arguments(run)
    run.set_defaults(handler=_rollover)


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """The zone's rollover timings, in seconds; those given are kept as the zone's."""
    for name, what in (
        ("dnskey-ttl", "the DNSKEY RRset's TTL, as served (default 3600)"),
        ("ds-ttl", "the DS TTL at the parent (default 86400)"),
        ("max-zone-ttl", "the largest TTL of the zone's records (default 86400)"),
        ("propagation-delay", "how long a change takes to reach every server of the zone "
         "(default 300)"),
        ("parent-propagation-delay", "how long the parent's change takes to reach every "
         "server of the parent (default 3600)"),
    ):
        parser.add_argument(f"--{name}", type=int, metavar="SECONDS", help=what)


def node_standing(state_dir: Path) -> FenceState:
    """The fence standing this state directory's node writes at: its store head's
    generation and its holder name."""
    from valis_core.config_store import read_config_store
    from valis_core.fence import FenceState
    from valis_core.identity.instance import holder_name, instance_token
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
    from valis_core.dns.dnssec.zone_keys import ensure_signing_keys, forget_zone_key
    from valis_core.operator_state.zone_rollover import set_timing, ttl_shortfall
    from valis_core.operator_state.zone_signing import ZoneSigning, enable_signing, signed_zones
    from valis_core.operator_state.zones import canonical_zone_name

    zone = canonical_zone_name(args.zone)
    state_dir = args.state_dir or Path(DEFAULT_STATE_DIR)
    asked = denial_asked(args)
    standing = node_standing(state_dir)
    with operator_connection(args) as conn:
        recorded = signed_zones(conn).get(zone)
        algorithm = args.algorithm
        if algorithm is None and recorded is not None:  # none held here: made as recorded
            algorithm = recorded.algorithm
        keys, made = ensure_signing_keys(state_dir, zone, algorithm, split=args.split)
        key = keys[0]
        zsk_tag = keys[1].tag if len(keys) > 1 else None
        try:
            if not enable_signing(
                conn, standing, ZoneSigning(zone, key.algorithm, key.tag, zsk_tag=zsk_tag)
            ):
                raise SigningVerbError(
                    f"zone {zone} is not in the operator-state database; import it first"
                )
        except BaseException:
            if made:  # refused: keys no zone signs with are not left behind
                for each in keys:
                    forget_zone_key(state_dir, zone, each)
            raise
        timing = _timing(args, signed_zones(conn)[zone].timing)
        if timing is not None:
            set_timing(conn, standing, zone, timing)
            _warn(ttl_shortfall(conn, zone, timing))
        said = set_asked_denial(conn, standing, zone, asked)
    tags = f"key tag {key.tag}" if zsk_tag is None else (
        f"KSK key tag {key.tag} and ZSK key tag {zsk_tag}"
    )
    print(
        f"zone {zone}: signed with algorithm {key.algorithm}, {tags} "
        f"({'made' if made else 'kept'}){said}; give the parent its DS: valis zone ds {zone}"
    )
    return 0


def _ds(args: argparse.Namespace) -> int:
    import sys

    from valis_core.dns import wire
    from valis_core.dns.dnssec import rollover
    from valis_core.dns.dnssec.zone_keys import file_zone, load_key_ring
    from valis_core.operator_state.zone_rollover import zone_key
    from valis_core.operator_state.zones import canonical_zone_name

    zone = canonical_zone_name(args.zone)
    state_dir = args.state_dir or Path(DEFAULT_STATE_DIR)
    with operator_connection(args) as conn:
        _algorithm, tag, zsk_tag, roll = zone_key(conn, zone)
    held = load_key_ring(state_dir).get(file_zone(zone), {})
    parent = rollover.zone_keying(tag, zsk_tag, roll).parent_ds
    missing = [t for t in parent if t not in held]
    if missing:
        raise SigningVerbError(
            f"{state_dir} holds no signing key with tag {missing[0]} for zone {zone}; run "
            "this on the node that signs it (or restore its backup set)"
        )
    if roll is not None:
        print(f"zone {zone}: {roll.kind.upper()} rollover from key tag {roll.old} to "
              f"{roll.new} at step {roll.step}; the parent should hold the DS set below",
              file=sys.stderr)
    apex = wire.from_text(zone)
    records = [ds_lines(apex, held[t].dnskey) for t in parent]
    for ds, _ in records:
        print(ds)
    for _, dnskey in records:
        print(dnskey)
    return 0


def _timing(args: argparse.Namespace, held: Timing) -> Timing | None:
    """The timings the verb was given over those the zone has; ``None``: none given."""
    import attrs  # here: registering the verbs (every `valis zone` command) needs none

    given = {
        name: getattr(args, name) for name in (
            "dnskey_ttl", "ds_ttl", "max_zone_ttl", "propagation_delay",
            "parent_propagation_delay",
        ) if getattr(args, name) is not None
    }
    return attrs.evolve(held, **given) if given else None


def _warn(problem: str | None) -> None:
    """Say on stderr what is wrong with the zone's timings, if anything: they are kept
    (an operator may shorten them on purpose, with resolvers' caches bounded)."""
    if problem is not None:
        import sys

        print(f"warning: {problem}", file=sys.stderr)


def _rollover(args: argparse.Namespace) -> int:

    from valis_core.clock import wall
    from valis_core.dns.dnssec import CSK_FLAGS, ZSK_FLAGS, rollover
    from valis_core.dns.dnssec.zone_keys import (
        file_zone,
        forget_zone_key,
        load_key_ring,
        make_zone_key,
    )
    from valis_core.operator_state.zone_rollover import (
        begin_rollover,
        confirm_ds,
        ttl_shortfall,
        zone_key,
    )
    from valis_core.operator_state.zone_signing import signed_zones
    from valis_core.operator_state.zones import canonical_zone_name

    zone = canonical_zone_name(args.zone)
    state_dir = args.state_dir or Path(DEFAULT_STATE_DIR)
    standing = node_standing(state_dir)
    with operator_connection(args) as conn:
        if args.ds_published:
            before, after = confirm_ds(conn, standing, zone, wall())
            if after is None:
                old = load_key_ring(state_dir).get(file_zone(zone), {}).get(before.old)
                if old is not None:
                    forget_zone_key(state_dir, zone, old)
                print(f"zone {zone}: rollover done; it signs with key tag {before.new} alone "
                      f"and key tag {before.old} is removed")
                return 0
            print(f"zone {zone}: the parent's DS confirmed; rollover at step {after.step}, "
                  "moved on by the node as its time comes")
            return 0
        algorithm, tag, zsk_tag, roll = zone_key(conn, zone)
        kind = rollover.kind_for(split=zsk_tag is not None, zsk=args.zsk)
        old_tag = zsk_tag if kind == rollover.ZSK and zsk_tag is not None else tag
        zone_timing = signed_zones(conn)[zone].timing
        timing = _timing(args, zone_timing)
        _warn(ttl_shortfall(conn, zone, timing or zone_timing))
        held = load_key_ring(state_dir).get(file_zone(zone), {})
        if old_tag not in held:
            raise SigningVerbError(
                f"{state_dir} holds no key with tag {old_tag} for zone {zone}, the key it "
                "is signed with; roll it on the node that signs it"
            )
        flags = ZSK_FLAGS if kind == rollover.ZSK else CSK_FLAGS
        # A roll under way is refused by begin_rollover, naming its step: no key made.
        key = None if roll is not None else make_zone_key(
            state_dir, zone, algorithm, tuple(held), flags
        )
        new_tag = key.tag if key is not None else roll.new if roll is not None else tag
        try:
            started = begin_rollover(
                conn, standing, zone, new_tag, timing=timing, now=wall(), zsk=args.zsk
            )
        except BaseException:
            if key is not None:  # refused: a key no roll uses is not left behind
                forget_zone_key(state_dir, zone, key)
            raise
    if started.kind == rollover.ZSK:
        print(
            f"zone {zone}: rolling its ZSK from key tag {started.old} to {started.new}, "
            f"step {started.step}: the node moves each step on as its time comes and ends "
            "the roll; the parent's DS stays as it is"
        )
        return 0
    print(
        f"zone {zone}: rolling {'its KSK ' if started.kind == rollover.KSK else ''}from "
        f"key tag {started.old} to {started.new}, step {started.step}: give the parent the "
        f"DS set 'valis zone ds {zone}' prints, then confirm with 'valis zone rollover "
        f"{zone} --ds-published'"
    )
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

"""``valis backup create|verify``: the node's backup-critical set, archived and proved."""

from __future__ import annotations

import argparse
from pathlib import Path

from valis_core.node_defaults import DEFAULT_STATE_DIR


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "backup", help="archive the backup-critical set, or prove an archive restorable"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser(
        "create",
        help="archive the owner seed, store head, configuration store and edge keys",
    )
    create.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR),
                        help="the node's state directory (default: %(default)s)")
    create.add_argument(
        "--out", type=Path, required=True, metavar="FILE",
        help="the archive; '{generation}' in its name is replaced by the fence generation "
        "the set is taken at (node-a-g{generation}.tar)",
    )
    create.set_defaults(handler=_create)
    verify = verbs.add_parser(
        "verify", help="restore into a scratch root and prove bytes, hashes and identity"
    )
    verify.add_argument("archive", type=Path, metavar="FILE")
    verify.set_defaults(handler=_verify)


def _create(args: argparse.Namespace) -> int:
    from valis_core.ops.backup import backup_path, create_backup

    manifest = create_backup(args.state_dir, args.out)
    generation = manifest.generation
    print(
        f"valis: backed up {len(manifest.files)} files of {args.state_dir} to "
        f"{backup_path(args.out, generation)} (owner key {manifest.owner_public_key}, "
        f"generation {generation}); taken at fence generation {generation}: it restores "
        f"only while the fence stands at {generation}, so back up again after every "
        "evacuate or restore"
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    from valis_core.ops.backup import verify_backup_set

    verified = verify_backup_set(args.archive)
    manifest = verified.manifest
    print(
        f"valis: {args.archive} restores {len(manifest.files)} files byte for byte; owner key "
        f"{manifest.owner_public_key}, generation {manifest.generation}"
    )
    return 0

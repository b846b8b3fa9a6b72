"""``valis owner key``: the owner terminus's TSIG key, for ``nsupdate -k``.

The key is derived from the owner seed in the state directory (see
``valis_core.owner.key``); nothing is written. It goes to stdout only: redirect it into a
file only you can read (``umask 077``), since whoever holds it can change the served
zones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from valis_core.node_defaults import DEFAULT_STATE_DIR


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("owner", help="the owner terminus (authenticated updates)")
    verbs = parser.add_subparsers(dest="owner_command", metavar="VERB", required=True)
    key = verbs.add_parser(
        "key",
        help="print the TSIG key that signs updates to this node (nsupdate -k FILE)",
        description=(
            "Print the owner terminus's TSIG key as a BIND key statement on stdout. It is "
            "derived from the owner seed, so a node restored from its backup set accepts "
            "the same key. Keep the output private."
        ),
    )
    key.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR),
                     help="the node's state directory (default: %(default)s)")
    key.set_defaults(handler=_key)


def _key(args: argparse.Namespace) -> int:
    from valis_core.identity.custody import load_keyfile
    from valis_core.owner.key import derive_owner_tsig

    sys.stdout.write(derive_owner_tsig(load_keyfile(args.state_dir)).bind_text())
    return 0

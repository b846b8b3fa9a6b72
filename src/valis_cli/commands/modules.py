"""``valis modules check``: can this binary load the modules a state directory pins?

The resident loads the store head's pinned modules at boot; this does the same loading
(the installed record compared with the pins, each entry point imported and its factory
called) without starting anything, so a staged binary can be proved able to take its
modules before the unit is restarted on it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from valis_core.node_defaults import DEFAULT_STATE_DIR


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "modules", help="check that this binary can load the modules a state directory pins"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check", help="load every pinned module as the resident would, starting none"
    )
    check.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR),
                       help="the node's state directory (default: %(default)s)")
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from valis_core.plugin.modules import ModuleContext, load_modules
    from valis_core.store.head import read_store_head
    from valis_core.store.manifest import ManifestError

    head = read_store_head(args.state_dir)
    if head is None:
        raise ManifestError(f"no store head in {args.state_dir}; condense the node first")
    context = ModuleContext(state_dir=args.state_dir, node="check", generation=head.generation)
    loaded = load_modules(context, head.modules)
    names = ", ".join(module.name for module in loaded) or "none"
    print(f"valis: {len(head.modules)} pinned modules load; entry points: {names}")
    return 0

"""``valis selftest``: can this build answer DNS? Exit 0 if so, 1 with the reason if not.

It starts nothing and binds nothing; ``valis assess`` runs it against the staged binary.

With ``--modules`` it also runs the module-load probe (contract §5.1): a probe module is
installed into a scratch state directory by the node's own installer, loaded by the
resident's own loader, started and drained. A binary built without freezing its
subsystems cannot take a module, and fails here rather than at a node's boot. Run it
against the installed delivery: ``/opt/valis/current/bin/valis selftest --modules``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "selftest", help="answer a synthetic query through the serving stack", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--modules", action="store_true",
                        help="also prove this binary can install, load, start and drain a "
                        "module (the module-load probe)")
    parser.add_argument("--scratch", type=Path, metavar="DIR",
                        help="with --modules: make the probe's scratch state directory "
                        "under DIR (default: the system's temporary directory)")
    parser.set_defaults(handler=_selftest)


def _selftest(args: argparse.Namespace) -> int:
    from valis_core.dns.serve.selftest import run_selftest

    print(f"valis: {run_selftest()}", flush=True)
    if args.modules:
        from valis_core.plugin.load_probe import probe_module_loading

        print(f"valis: {probe_module_loading(args.scratch)}")
    return 0

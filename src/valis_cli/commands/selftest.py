"""``valis selftest``: can this build answer DNS? Exit 0 if so, 1 with the reason if not.

It starts nothing and binds nothing; ``valis assess`` runs it against the staged binary.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "selftest", help="answer a synthetic query through the serving stack", description=__doc__
    )
    parser.set_defaults(handler=_selftest)


def _selftest(args: argparse.Namespace) -> int:
    from valis_core.dns.selftest import run_selftest

    print(f"valis: {run_selftest()}")
    return 0

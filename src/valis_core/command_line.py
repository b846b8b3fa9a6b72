"""What the ``valis`` and ``fulcrum`` entry points share: subcommand discovery and the
rule that an operator error becomes one line on stderr and a non-zero exit. It lives in
the library, not in either program, so neither program imports the other.

Each command lives in its own module exposing ``register(subparsers)``; the module sets
``handler`` on its parser (``set_defaults(handler=...)``), a callable taking the parsed
namespace and returning the exit status. A module registers one command, named as the
module is with ``-`` for ``_`` (``site_facts`` registers ``site-facts``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, cast

from valis_core.errors import ValisError

Handler = Callable[[argparse.Namespace], int]


def command_name(module: str) -> str:
    """The command ``module`` registers."""
    return module.rpartition(".")[2].replace("_", "-")


def build_parser(
    prog: str,
    description: str,
    modules: Sequence[str],
    version: str,
    argv: Sequence[str] | None = None,
) -> argparse.ArgumentParser:
    """The program's parser. Command modules import their heavy libraries inside their
    handlers, so building it (and ``--help``, ``--version``) stays fast. Given the
    ``argv`` it will parse, a command line that begins with a command's name imports and
    registers that command's module only (``valis zone check`` does not import every
    other command); any other (``--help``, a misspelt command) registers them all."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"{prog} {version}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    named = [m for m in modules if argv and command_name(m) == argv[0]]
    for name in named or modules:
        importlib.import_module(name).register(subparsers)
    return parser


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    args = parser.parse_args(list(argv))
    return cast(Handler, args.handler)(args)


def run_reported(prog: str, run: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    """``run(argv)``'s exit status; a ``ValisError`` is one stderr line and its
    ``exit_status`` (1 unless the error says otherwise; a message quoting a library's
    multi-line text is folded onto that line)."""
    try:
        return run(argv)
    except ValisError as exc:
        print(f"{prog}: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


def exit_with(prog: str, run: Callable[[Sequence[str]], int]) -> NoReturn:
    """Run ``run(sys.argv[1:])`` as ``run_reported`` does, and exit with its status."""
    sys.exit(run_reported(prog, run, sys.argv[1:]))

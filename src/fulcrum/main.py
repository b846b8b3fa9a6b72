"""``fulcrum``: the privileged launcher's command line."""

from __future__ import annotations

from collections.abc import Sequence

from valis_core import __version__
from valis_core.command_line import build_parser, dispatch, exit_with

# Command modules, in the order `fulcrum --help` lists them. Add one line per command.
COMMAND_MODULES: tuple[str, ...] = (
    "fulcrum.commands.config",
    "fulcrum.commands.launch",
    "fulcrum.commands.handover",
    "fulcrum.commands.fingerprint",
)


def run(argv: Sequence[str]) -> int:
    parser = build_parser(
        "fulcrum",
        "The privileged launcher of a valis unit.",
        COMMAND_MODULES,
        __version__,
        argv,
    )
    return dispatch(parser, argv)


def main() -> None:
    exit_with("fulcrum", run)

"""``valis``: the node's command line."""

from __future__ import annotations

from collections.abc import Sequence

from valis_core import __version__
from valis_core.command_line import build_parser, dispatch, exit_with

# Command modules, in the order `valis --help` lists them. Add one line per command.
COMMAND_MODULES: tuple[str, ...] = (
    "valis_cli.commands.serve",
    "valis_cli.commands.status",
    "valis_cli.commands.stop",
    "valis_cli.commands.demo",
    "valis_cli.commands.apply",
    "valis_cli.commands.backup",
    "valis_cli.commands.assess",
    "valis_cli.commands.provision",
    "valis_cli.commands.selftest",
    "valis_cli.commands.db",
    "valis_cli.commands.zone",
    "valis_cli.commands.site_facts",
    "valis_cli.commands.condense",
    "valis_cli.commands.dist",
    "valis_cli.commands.modules",
    "valis_cli.commands.owner",
)


def run(argv: Sequence[str]) -> int:
    """Run one invocation; return its exit status."""
    # The launch table is read only for an argv that may hold the switch: the other
    # commands start without it (and the attrs it is made with).
    if any(arg.startswith("--resident") for arg in argv):
        from valis_core.launch import is_resident_launch

        if is_resident_launch(argv):
            from valis_cli.commands.resident import run_resident

            return run_resident(list(argv))
    parser = build_parser(
        "valis", "An authoritative DNS origin node.", COMMAND_MODULES, __version__, argv
    )
    return dispatch(parser, argv)


def main() -> None:
    exit_with("valis", run)

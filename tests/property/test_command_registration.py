"""A command line that names a command registers that command's module only
(``valis_core.command_line.build_parser``), and the parser it gets is the one the whole
program builds: every verb below the command has the same help, usage and defaults.
``valis zone check`` therefore imports neither the other commands nor DNSSEC signing."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from fulcrum.main import COMMAND_MODULES as FULCRUM_MODULES
from valis_cli.main import COMMAND_MODULES as VALIS_MODULES
from valis_core import __version__
from valis_core.command_line import build_parser, command_name

PROGRAMS = {"valis": VALIS_MODULES, "fulcrum": FULCRUM_MODULES}


def _verbs(
    words: tuple[str, ...], parser: argparse.ArgumentParser
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _verbs((*words, name), child)


def _described(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], tuple[str, str]]:
    return {
        words: (child.format_help(), repr(sorted(child._defaults.items())))
        for words, child in _verbs((), parser)
    }


@pytest.mark.parametrize(
    ("program", "module"),
    [(program, module) for program, modules in PROGRAMS.items() for module in modules],
)
def test_a_named_command_gets_the_parser_the_whole_program_builds(
    program: str, module: str
) -> None:
    name = command_name(module)
    whole = _described(build_parser(program, "", PROGRAMS[program], __version__))
    alone = _described(
        build_parser(program, "", PROGRAMS[program], __version__, [name, "--help"])
    )
    mine = {words: text for words, text in whole.items() if words[:1] == (name,)}
    assert mine, f"{module} registers no command named {name}"
    assert {words: text for words, text in alone.items() if words} == mine


def test_a_line_naming_no_command_registers_them_all() -> None:
    for program, modules in PROGRAMS.items():
        for argv in ([], ["--help"], ["--version"], ["zone-check"], ["-h", "zone"]):
            parser = build_parser(program, "", modules, __version__, argv)
            assert parser.format_help() == build_parser(
                program, "", modules, __version__
            ).format_help()


def test_zone_check_imports_no_other_command_and_no_signing() -> None:
    probe = (
        "import sys\n"
        "from valis_cli.main import run\n"
        "try:\n"
        "    run(['zone', 'check', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(done.stdout.split())
    others = {m for m in VALIS_MODULES if m != "valis_cli.commands.zone"}
    assert not loaded & others
    assert not {m for m in loaded if m.startswith(("cryptography", "valis_core.dns.dnssec"))}
    assert "trio" not in loaded
    assert "cattrs" not in loaded

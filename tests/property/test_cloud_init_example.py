"""The cloud-init example is first boot as the docs describe it: fetch, unpack, then
``valis provision`` and ``valis condense --genesis``, each a command line valis accepts."""

from __future__ import annotations

from pathlib import Path

from valis_cli.main import COMMAND_MODULES
from valis_core import __version__
from valis_core.command_line import build_parser

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "cloud-init.yaml"


def valis_commands(text: str) -> list[list[str]]:
    """The ``runcmd`` entries written as block lists whose program is a ``valis``."""
    commands: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("  - - "):
            commands.append([line[len("  - - "):].strip()])
        elif line.startswith("    - ") and commands and commands[-1][0].endswith("/valis"):
            commands[-1].append(line[len("    - "):].strip())
    return [command for command in commands if command[0].endswith("/bin/valis")]


def test_first_boot_is_provision_then_condense_from_genesis() -> None:
    commands = valis_commands(EXAMPLE.read_text())
    assert [command[1] for command in commands] == ["provision", "condense"]
    parser = build_parser("valis", "", COMMAND_MODULES, __version__)
    provision = parser.parse_args(commands[0][1:])
    assert provision.delivery is not None
    assert not provision.plan
    # The owner terminus is open: without it nsupdate has nowhere to send (:53 answers
    # an UPDATE NOTIMP).
    assert provision.owner_port == "8053"
    condense = parser.parse_args(commands[1][1:])
    assert condense.genesis
    assert str(condense.site_facts) == provision.site_facts
    # The unpacked delivery provisions; the installed one condenses.
    assert commands[0][0].startswith("/root/")
    assert commands[1][0] == "/opt/valis/current/bin/valis"


def test_the_readme_and_the_verbs_doc_provision_with_the_owner_port() -> None:
    """The first-boot command lines the operator copies open the owner terminus, as the
    cloud-init example does."""
    root = EXAMPLE.parents[2]
    for doc in (root / "README.md", root / "docs" / "operator-verbs.md"):
        text = doc.read_text()
        start = text.index("/root/valis-serving/bin/valis provision")
        command = text[start:text.index("\n#", start)].replace("\\\n", " ")
        parser = build_parser("valis", "", COMMAND_MODULES, __version__)
        provision = parser.parse_args(command.split()[1:])
        assert provision.owner_port == "8053", (doc, command)

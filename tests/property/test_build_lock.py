"""The build's lock covers what pyproject.toml asks for: every requirement of valis, of its
test and build extras and of its build backend is pinned there, at a version the
requirement allows, with hashes (so a dependency added without `make lock` is caught
here, not by a build that freezes something unpinned)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.version import Version

from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[2]


def _lock_module() -> ModuleType:
    return load_script(REPO / "packaging" / "frozen" / "lock.py", "valis_build_lock")


LOCK = _lock_module()


def _requirements() -> list[Requirement]:
    with open(REPO / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)
    texts = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["test"],
        *project["project"]["optional-dependencies"]["build"],
        *project["build-system"]["requires"],
    ]
    return [Requirement(text) for text in texts]


def test_every_requirement_of_pyproject_is_pinned_at_a_version_it_allows() -> None:
    text = LOCK.LOCK.read_text("utf-8")
    pinned = LOCK.pins(text)
    for requirement in _requirements():
        name = LOCK.normalize(requirement.name)
        assert name in pinned, f"{requirement} is not in the lock: run `make lock`"
        assert Version(pinned[name]) in requirement.specifier, (
            f"the lock pins {name} {pinned[name]}, outside {requirement}: run `make lock`"
        )


def test_every_pin_carries_hashes() -> None:
    text = LOCK.LOCK.read_text("utf-8")
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text)
    pinned = [block for block in blocks if "==" in block.split("\n", 1)[0]]
    assert len(pinned) == len(LOCK.pins(text)) > 10
    for block in pinned:
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", block), block.split("\n", 1)[0]


def test_a_drifted_environment_is_named_pin_by_pin() -> None:
    pinned = {"attrs": "26.1.0", "trio": "0.32.0", "pyinstaller": "6.22.3"}
    present = {"attrs": "26.1.0", "trio": "0.31.0", "pytest": "9.2.0"}
    assert LOCK.mismatches(pinned, present) == [
        "pyinstaller 6.22.3 is not installed",
        "trio is 0.31.0, the lock says 0.32.0",
    ]
    assert LOCK.mismatches(pinned, {**present, "trio": "0.32.0", "pyinstaller": "6.22.3"}) == []
    assert LOCK.pins("Typing_Extensions==4.16.0 \\\n    --hash=sha256:ab\n") == {
        "typing-extensions": "4.16.0"
    }

"""No test module is imported by another module, test or not: what tests share lives in
helper modules named for what they do (``tests/dns_ask.py``, ``tests/scenario/pg.py``,
``tests/property/signed_example.py`` …), and fixtures are shared from those or from a
``conftest.py``. A test module imported elsewhere is collected twice over, its fixtures
and constants become another module's, and changing a test breaks a stranger. Read from
the import graph (ast: nothing is imported); the rule is also shown to fail on synthetic
modules that break it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.import_graph import Edge, import_graph

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("tests", "benchmarks")
"""Where modules that might import a test module live (``src`` never imports ``tests``)."""


def is_test_module(module: str) -> bool:
    """A module pytest collects as tests: ``test_*`` anywhere under ``tests``."""
    parts = module.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def imports_of_test_modules(edges: Iterable[Edge]) -> list[str]:
    return sorted(f"{edge.importer} imports the test module {edge.imported}"
                  for edge in edges if is_test_module(edge.imported))


def test_no_module_imports_a_test_module() -> None:
    assert imports_of_test_modules(import_graph(REPO, *FOLDERS)) == []


BREAKERS = (
    ("tests/scenario/test_b.py", "from tests.scenario.test_a import thing\n"),
    ("tests/property/helper.py", "from tests.scenario import test_a as story\n"),
    ("tests/scenario/test_b.py", "from .test_a import thing\n"),
    ("tests/scenario/test_b.py", "def late():\n    import tests.scenario.test_a\n"),
    ("benchmarks/bench.py", "from tests.scenario.test_a import start\n"),
)


@pytest.mark.parametrize(("path", "text"), BREAKERS)
def test_the_rule_fails_on_a_module_that_imports_a_test_module(
    tmp_path: Path, path: str, text: str
) -> None:
    for name in ("tests/__init__.py", "tests/scenario/__init__.py", "tests/scenario/test_a.py",
                 "tests/scenario/helper.py", path):
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text if name == path else "")
    found = imports_of_test_modules(import_graph(tmp_path, *FOLDERS))
    assert found, f"{path} imports a test module and nothing noticed"
    assert all("tests.scenario.test_a" in line for line in found), found


def test_a_helper_module_shared_by_tests_is_allowed(tmp_path: Path) -> None:
    for name, text in (("tests/scenario/helper.py", ""),
                       ("tests/scenario/test_a.py", "from tests.scenario.helper import x\n"),
                       ("tests/scenario/test_b.py", "from tests.scenario import helper\n")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert imports_of_test_modules(import_graph(tmp_path, *FOLDERS)) == []

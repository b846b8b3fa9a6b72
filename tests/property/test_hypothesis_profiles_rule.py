"""The hypothesis profiles decide how many examples a property draws: no test passes
``max_examples`` a number of its own (a test dear per example passes
``scaled(share)``, a share of the profile's count). Read with ast over ``tests``; the
rule is also shown to fail on a synthetic test that breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.hypothesis_profiles import EXAMPLES, scaled

TESTS = Path(__file__).resolve().parents[1]


def own_counts(source: str) -> list[int]:
    """The line of every ``max_examples=`` given anything but ``scaled(...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "max_examples":
            value = node.value
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id == "scaled"):
                found.append(value.lineno)
    return found


def test_no_test_names_its_own_number_of_examples() -> None:
    found = {str(path.relative_to(TESTS)): lines for path in sorted(TESTS.rglob("*.py"))
             if path.name != "hypothesis_profiles.py"
             and (lines := own_counts(path.read_text()))}
    assert found == {}


@pytest.mark.parametrize("text", [
    "@settings(max_examples=300)\ndef test_x(): pass\n",
    "SETTINGS = settings(deadline=None, max_examples=COUNT)\n",
    "settings.register_profile('mine', max_examples=5)\n",
    "S = settings(max_examples=scaled(0.5) * 4)\n",
])
def test_the_rule_fails_on_a_test_that_names_its_own_count(text: str) -> None:
    assert own_counts(text) != []


def test_a_share_of_the_profile_is_allowed_and_never_nothing() -> None:
    assert own_counts("@settings(max_examples=scaled(0.3))\ndef test_x(): pass\n") == []
    assert 1 <= scaled(0.001) <= scaled(0.5) <= scaled(1) <= max(EXAMPLES.values())


@pytest.mark.parametrize("share", [0, -0.5, 1.5])
def test_a_share_is_of_the_profile_not_beyond_it(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        scaled(share)

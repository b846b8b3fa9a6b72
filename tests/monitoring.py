"""The shipped monitoring (docs/examples: the Grafana dashboard and the Prometheus alerting
rules) as the tests read it: the PromQL expressions each names, the metric names those
expressions use, and the names a node's ``/metrics`` exports.

The rules are read without a YAML library (the test environment has none): the file's
shape is this project's own (``expr:`` on one line, or folded with ``>-`` under it), and
the tests compare the number of expressions read with the rules promtool counts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "examples"
RULES = EXAMPLES / "valis-alerts.yml"
RULES_TESTS = (EXAMPLES / "valis-alerts.test.yml", EXAMPLES / "valis-alerts-expiry.test.yml")
"""promtool's unit tests of the rules: those counted in minutes, and in hours."""
DASHBOARD = EXAMPLES / "valis-grafana-dashboard.json"

COMMIT_TO_WIRE = "valis_commit_to_wire_seconds"
"""The commit -> wire latency histogram, as the dashboard's constant ``commit_to_wire``
names it (its panels say ``${commit_to_wire}_bucket``)."""

_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "start", "end",
})
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_IDENTIFIER = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(\s*\()?")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,")
_TYPE_LINE = re.compile(r"^# TYPE ([a-zA-Z_:][\w:]*) (\w+)$", re.MULTILINE)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that call nothing,
    outside strings, label matchers, ranges and grouping clauses, and not keywords."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {
        name for name, call in _IDENTIFIER.findall(text)
        if not call and name.lower() not in _KEYWORDS
    }


def rule_expressions(text: str) -> dict[str, str]:
    """Each alert's name and its ``expr`` (a folded block joined into one line)."""
    found: dict[str, str] = {}
    lines = text.splitlines()
    alert = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("- alert:"):
            alert = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("expr:"):
            assert alert is not None, f"expr without an alert at line {number + 1}"
            value = stripped.split(":", 1)[1].strip()
            if value in (">-", ">", "|", "|-"):
                indent = len(line) - len(line.lstrip())
                block = []
                for following in lines[number + 1:]:
                    if following.strip() and len(following) - len(following.lstrip()) <= indent:
                        break
                    block.append(following.strip())
                value = " ".join(part for part in block if part)
            found[alert] = value
            alert = None
    return found


def without_annotations(text: str) -> str:
    """The rules with every ``annotations:`` block left out (promtool's unit tests compare
    annotations whole; their templates are checked by ``promtool check rules``)."""
    kept: list[str] = []
    skipping_under: int | None = None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if skipping_under is not None:
            if not line.strip() or indent > skipping_under:
                continue
            skipping_under = None
        if line.strip() == "annotations:":
            skipping_under = indent
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_expressions(board: dict[str, Any]) -> list[str]:
    """Every panel target's expression with the dashboard's variables put in (a constant
    by its value, Grafana's interval by 5m, any other variable by ``.*``), and the metric
    each ``label_values`` variable query reads."""
    variables = board["templating"]["list"]
    constants = {item["name"]: item["query"] for item in variables if item["type"] == "constant"}

    def put_in(expr: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name in constants:
                return str(constants[name])
            return "5m" if name.startswith("__") else ".*"
        return _VARIABLE.sub(value, expr)

    found = [
        put_in(target["expr"])
        for panel in board["panels"] for target in panel.get("targets", [])
    ]
    for item in variables:
        query = item.get("query")
        text = query.get("query", "") if isinstance(query, dict) else ""
        found += [f"{name}" for name in _LABEL_VALUES.findall(text)]
    return found


def exported(metrics_text: str) -> dict[str, str]:
    """Each metric family a ``/metrics`` text declares (``# TYPE``), with its kind."""
    return dict(_TYPE_LINE.findall(metrics_text))


def not_exported(names: set[str], families: dict[str, str]) -> set[str]:
    """Of ``names``, those no family exports (a histogram's ``_bucket``, ``_sum`` and
    ``_count`` series belong to its family)."""
    missing = set()
    for name in names:
        if name in families:
            continue
        base = next((name[: -len(suffix)] for suffix in _HISTOGRAM_SUFFIXES
                     if name.endswith(suffix)), None)
        if base is not None and families.get(base) == "histogram":
            continue
        missing.add(name)
    return missing


def promtool() -> str:
    """promtool's path; the message says what installs it (``make venv`` as root)."""
    found = shutil.which("promtool")
    assert found is not None, (
        "promtool is missing: `make venv` as root installs Debian's prometheus package")
    return found


def run_promtool(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)

"""The shipped alerting rules and dashboard (docs/examples) are well formed: promtool
accepts the rules and their unit tests pass (which alert fires, when, for which series),
every alert says how urgent it is and what to do, the dashboard's expressions name only
metrics, and the delivery carries both. That every name is one a live node exports is
tests/scenario/test_monitoring_metrics.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.monitoring import (
    COMMIT_TO_WIRE,
    DASHBOARD,
    RULES,
    RULES_TESTS,
    dashboard,
    dashboard_expressions,
    metric_names,
    not_exported,
    rule_expressions,
    run_promtool,
    without_annotations,
)
from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[2]


def test_promtool_accepts_the_rules_and_reads_each_alert_the_tests_read() -> None:
    done = run_promtool("check", "rules", str(RULES), cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    counted = re.search(r"SUCCESS: (\d+) rules found", done.stdout)
    assert counted is not None, done.stdout
    assert len(rule_expressions(RULES.read_text())) == int(counted.group(1))


def test_the_rules_unit_tests_pass(tmp_path: Path) -> None:
    """``valis-alerts*.test.yml`` against the rules as shipped, their annotations left
    out (promtool compares annotations whole; the check above expands their templates)."""
    (tmp_path / RULES.name).write_text(without_annotations(RULES.read_text()))
    for tests in RULES_TESTS:
        (tmp_path / tests.name).write_text(tests.read_text())
    checked = run_promtool("check", "rules", RULES.name, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    done = run_promtool("test", "rules", *(tests.name for tests in RULES_TESTS), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_waits_says_its_severity_and_what_to_run() -> None:
    text = RULES.read_text()
    blocks = re.split(r"\n      - alert: ", text)[1:]
    assert len(blocks) == len(rule_expressions(text))
    for block in blocks:
        name = block.split("\n", 1)[0]
        assert re.search(r"\n        for: \d+[smh]\n", block), name
        assert re.search(r"\n          severity: (critical|warning)\n", block), name
        assert "\n          summary: " in block, name
        description = block.split("\n          description: ", 1)[-1]
        assert re.search(r"`[a-z][^`]+`", description), name  # a command to run


def test_the_rule_reader_drops_only_annotations() -> None:
    text = RULES.read_text()
    stripped = without_annotations(text)
    assert "annotations:" not in stripped
    assert "summary:" not in stripped
    assert rule_expressions(stripped) == rule_expressions(text)


@pytest.mark.parametrize(("expr", "names"), [
    ("max_over_time(valis_ready[1d]) unless valis_ready{job=\"valis\"} == 0",
     {"valis_ready"}),
    ("valis_secondary_lag_seconds > on(job, instance, zone) group_left() "
     "(valis_zone_soa_refresh_seconds > 0)",
     {"valis_secondary_lag_seconds", "valis_zone_soa_refresh_seconds"}),
    ("histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket{a=~\"b|c\"}[5m])))",
     {"x_seconds_bucket"}),
    ("sum without (worker) (rate(a_total[1h:5m] offset 1d)) / ignoring(x) b unless c",
     {"a_total", "b", "c"}),
    ("max(a{le=\"0.5\", q='x{y}'}) - time() < 7 * 86400 and bool 1e3", {"a"}),
    ("label_replace(a, \"dst\", \"$1\", \"src\", \"(.*)\")", {"a"}),
])
def test_metric_names_are_read_out_of_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_a_histograms_series_belong_to_its_family() -> None:
    families = {"h_seconds": "histogram", "g": "gauge"}
    assert not_exported({"h_seconds_bucket", "h_seconds_count", "g", "g_count", "x"},
                        families) == {"g_count", "x"}


def test_the_dashboard_names_metrics_only_and_commit_to_wire_in_one_place() -> None:
    board = dashboard()
    expressions = dashboard_expressions(board)
    names = set().union(*(metric_names(expr) for expr in expressions))
    assert names
    assert all(name.startswith("valis_") for name in names), names
    assert {f"{COMMIT_TO_WIRE}_bucket", f"{COMMIT_TO_WIRE}_count"} <= names
    assert DASHBOARD.read_text().count(COMMIT_TO_WIRE) == 1  # the constant, nowhere else
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))


def test_the_delivery_carries_the_dashboard_the_rules_and_their_tests() -> None:
    dist = load_script(REPO / "packaging" / "frozen" / "dist.py", "valis_packaging_dist")
    shipped = dist.doc_files()
    for path in (DASHBOARD, RULES, *RULES_TESTS):
        assert shipped[f"share/doc/valis/examples/{path.name}"] == (path.read_bytes(), 0o644)

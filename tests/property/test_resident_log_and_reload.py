"""The resident's log lines (a level on each; JSON one object per line) and what a reload
applies, as pure values."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from valis_cli.commands.status import render_status
from valis_core.config_store import ConfigStore
from valis_core.resident.log_format import JsonFormatter, TextFormatter, log_format_argument
from valis_core.resident.reload import plan_reload
from valis_core.resident.status_document import STATUS
from valis_core.resident.views import serving_last_good

FACTS = {
    "VALIS_NODE_NAME": "ns1",
    "VALIS_LOCATION": "lab",
    "VALIS_OPERATOR_STATE_DSN": "dbname=valis",
    "VALIS_SERVED_ZONES": "example.test.",
}


def record(message: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("valis.resident", level, __file__, 1, message, None, None)


def test_a_json_line_is_one_object_with_its_level_even_for_a_multiline_message() -> None:
    line = JsonFormatter(journald=False).format(record("first\nsecond \"quoted\""))
    assert "\n" not in line
    document = json.loads(line)
    assert document["level"] == "warning"
    assert document["message"] == 'first\nsecond "quoted"'
    assert document["time"].endswith("Z")


def test_under_journald_lines_carry_a_priority_and_no_timestamp() -> None:
    assert TextFormatter(journald=True).format(record("x")) == "<4>valis resident: warning: x"
    priority, _, line = JsonFormatter(journald=True).format(record("x")).partition(">")
    assert priority == "<4"  # journald strips it and keeps the object as the message
    assert "time" not in json.loads(line)
    plain = TextFormatter(journald=False).format(record("x", logging.INFO))
    assert plain.endswith("Z valis resident: info: x")


def test_log_format_is_read_from_the_argv_in_either_spelling() -> None:
    assert log_format_argument(["--state-dir", "/s", "--log-format", "json"]) == "json"
    assert log_format_argument(["--log-format=text"]) == "text"
    assert log_format_argument(["--log-format=xml"]) is None
    assert log_format_argument([]) is None


def store(**changes: str) -> ConfigStore:
    return ConfigStore(path=Path("/s"), facts={**FACTS, **changes}, first_boot=False)


def test_a_reload_plans_logging_and_zones_live_and_the_rest_for_a_restart() -> None:
    plan = plan_reload(store(), store(VALIS_LOG_FORMAT="json",
                                      VALIS_SERVED_ZONES="example.test.,example.org.",
                                      VALIS_LOCATION="elsewhere"))
    assert plan.logging
    assert plan.zones == ("example.test.", "example.org.")
    assert plan.restart_keys == ("VALIS_LOCATION",)
    assert plan_reload(store(), store()).empty


def test_status_says_the_last_good_snapshot_is_served_while_the_database_is_down() -> None:
    document = {
        "node": "ns1", "location": "lab", "ready": True, "zones": {},
        "database": {"connected": False, "since": 0.0, "serving": serving_last_good(0.0)},
    }
    text = render_status(STATUS.structure(document), now=60.0)
    assert "serving the last good snapshot since 1970-01-01T00:00:00Z" in text

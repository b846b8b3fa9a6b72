"""Properties of the small pure pieces of the resident: sd_notify datagrams, Prometheus
text, the state-directory flag and the configuration store's view of the environment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.config_store import differing_keys, facts_from_environment
from valis_core.launch import LaunchArgError
from valis_core.resident import bring_up
from valis_core.resident.metrics import Family, Sample, render
from valis_core.resident.state_dir import (
    StateDirError,
    resolve_state_dir,
    state_dir_argument,
)
from valis_core.sd_notify import render_notification, socket_address

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@given(texts)
def test_a_status_is_one_line_of_its_datagram_whatever_it_holds(status: str) -> None:
    data = render_notification({"READY": "1", "STATUS": status})
    lines = data.decode("utf-8").splitlines()
    assert lines[0] == "READY=1"
    assert len(lines) == 2
    assert lines[1].startswith("STATUS=")


def test_an_at_sign_names_an_abstract_socket() -> None:
    assert socket_address("@valis/notify") == b"\0valis/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


@given(st.lists(st.tuples(texts, st.integers(0, 2**53)), max_size=5))
def test_metric_label_values_never_break_a_line(labelled: list[tuple[str, int]]) -> None:
    family = Family(
        "valis_test_total", "counter", "A test\ncounter.",
        tuple(Sample(value, (("label", text),)) for text, value in labelled),
    )
    lines = render([family]).rstrip("\n").split("\n")
    assert len(lines) == 2 + len(labelled)
    sample = re.compile(r'valis_test_total\{label="(?:[^"\\\n]|\\.)*"\} \d+')
    for line in lines[2:]:
        assert sample.fullmatch(line), line


def test_metric_names_and_labels_are_checked() -> None:
    with pytest.raises(ValueError, match="metric name"):
        Family("bad-name", "counter", "x", ())
    with pytest.raises(ValueError, match="label name"):
        Family("ok", "gauge", "x", (Sample(1, (("__reserved", "v"),)),))


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["--resident", "--state-dir", "/var/lib/valis"], "/var/lib/valis"),
        (["--state-dir=/srv/v", "--ports", "53"], "/srv/v"),
        (["--resident", "--ports", "53"], None),
    ],
)
def test_the_state_dir_flag_is_read_from_the_residents_argv(
    argv: list[str], found: str | None
) -> None:
    assert state_dir_argument(argv) == found


def test_the_state_dir_flag_wins_over_systemds_state_directory() -> None:
    environ = {"STATE_DIRECTORY": "/var/lib/valis-dns:/var/lib/other"}
    assert str(resolve_state_dir([], environ)) == "/var/lib/valis-dns"
    assert str(resolve_state_dir(["--state-dir", "/tmp/x"], environ)) == "/tmp/x"
    with pytest.raises(StateDirError, match="no state directory"):
        resolve_state_dir([], {})
    with pytest.raises(StateDirError, match="not an absolute path"):
        resolve_state_dir([], {"STATE_DIRECTORY": "relative"})
    # The flag is read by the launch argv's reader, under its rules (test_launch.py).
    with pytest.raises(LaunchArgError, match="absolute path"):
        resolve_state_dir(["--state-dir", "relative"], {})
    with pytest.raises(LaunchArgError, match="given twice"):
        state_dir_argument(["--state-dir", "/a", "--state-dir=/b"])


def test_only_site_facts_are_taken_from_the_environment() -> None:
    environ = {
        "VALIS_NODE_NAME": "n",
        "VALIS_REPL_PORT": "4005",
        "VALIS_SOMETHING_ELSE": "x",
        "HOME": "/root",
    }
    assert facts_from_environment(environ) == {"VALIS_NODE_NAME": "n"}


def test_environment_values_that_differ_from_the_store_are_named() -> None:
    stored = {"VALIS_NODE_NAME": "n", "VALIS_LOCATION": "a"}
    environ = {"VALIS_NODE_NAME": "n", "VALIS_LOCATION": "b", "VALIS_LOG_LEVEL": "debug"}
    assert differing_keys(stored, environ) == ("VALIS_LOCATION", "VALIS_LOG_LEVEL")


def test_the_docs_stage_table_is_the_residents_own() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "resident.md").read_text()
    assert bring_up.stage_table() in doc
    names = [stage.name for stage in bring_up.STAGES]
    assert len(set(names)) == len(names)
    assert names[:3] == ["launch argv", "privilege", "adopt"]


def test_the_docs_teardown_order_is_the_residents_own() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "resident.md").read_text()
    assert f"(the log line says the order: {bring_up.teardown_order()})" in " ".join(doc.split())


def test_teardown_is_bring_up_reversed() -> None:
    order = bring_up.teardown_order().split(", then ")
    stopping = [stage.stops for stage in bring_up.STAGES if stage.stops is not None]
    assert order == stopping[::-1]
    assert order[0] == "modules drain"
    assert order[-1] == "the listener descriptors close"


def test_loading_the_stage_table_and_run_loop_imports_nothing_of_the_answering_stack() -> None:
    # The codec stage is the check that the answering stack exists: a build without it
    # reaches that stage and fails closed with the codec's message, so loading the
    # resident (its table, every stage's room, the run loop) must not import it first.
    probe = "import sys, valis_core.resident.run; print('valis_core.dns.answer' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"

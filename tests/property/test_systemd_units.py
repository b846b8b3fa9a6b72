"""The systemd units shipped in packaging/systemd say what the contract asks of them."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from fulcrum.exec_chain import RUN_ACCOUNT
from fulcrum.launch import STOP_TIMEOUT
from tests.unit_files import FULCRUM_UNIT, UNITS, only, parse_unit
from valis_core.fence import FENCED_OUT_EXIT_STATUS
from valis_core.launcher_config import DEFAULT_PATH
from valis_core.operator_state.site_facts import DEVELOPMENT_LISTENER_KEY


def seconds(value: str) -> float:
    units = {"min": 60.0, "s": 1.0, "h": 3600.0}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return parse_unit(FULCRUM_UNIT.read_text())


def test_unit_is_notify_typed_and_accepts_the_residents_readiness(unit: dict[str, Any]) -> None:
    assert only(unit, "Service", "Type") == "notify"
    assert only(unit, "Service", "NotifyAccess") == "all"


def test_unit_provides_the_state_directory_owned_by_the_run_account(unit: dict[str, Any]) -> None:
    assert only(unit, "Service", "StateDirectory") == "valis-dns"
    assert only(unit, "Service", "User") == RUN_ACCOUNT
    assert only(unit, "Service", "Group") == RUN_ACCOUNT


def test_unit_leaves_the_configuration_directories_to_provisioning(unit: dict[str, Any]) -> None:
    # systemd 252 creates a missing ConfigurationDirectory= owned by User= (the run
    # account), which could then swap in a launcher config of its own for root's fulcrum
    # (tests/scenario/test_systemd_unit.py shows it under the real systemd).
    assert "ConfigurationDirectory" not in unit["Service"]


def test_unit_starts_fulcrum_privileged_on_the_launcher_config(unit: dict[str, Any]) -> None:
    exec_start = only(unit, "Service", "ExecStart")
    assert exec_start.startswith("+"), "fulcrum needs full privileges despite User="
    argv = shlex.split(exec_start[1:])
    assert Path(argv[0]).name == "fulcrum"
    assert Path(argv[0]).is_absolute()
    assert argv[1:] == ["launch", "--config", str(DEFAULT_PATH)]


def test_unit_restarts_on_failure_with_a_start_limit_of_five(unit: dict[str, Any]) -> None:
    assert only(unit, "Service", "Restart") == "on-failure"
    assert only(unit, "Unit", "StartLimitBurst") == "5"
    assert seconds(only(unit, "Unit", "StartLimitIntervalSec")) > 0


def test_a_fenced_out_exit_is_never_restarted(unit: dict[str, Any]) -> None:
    assert only(unit, "Service", "RestartPreventExitStatus") == str(FENCED_OUT_EXIT_STATUS)


def test_stop_signal_reaches_fulcrum_alone_and_outlasts_its_stop_bound(
    unit: dict[str, Any],
) -> None:
    assert only(unit, "Service", "KillMode") == "mixed"
    assert seconds(only(unit, "Service", "TimeoutStopSec")) > STOP_TIMEOUT


@pytest.mark.parametrize("path", sorted(UNITS.glob("*")), ids=lambda p: p.name)
def test_no_unit_carries_a_development_listener(path: Path) -> None:
    text = path.read_text()
    assert DEVELOPMENT_LISTENER_KEY not in text
    assert "REPL" not in text.upper()


def test_reload_asks_fulcrum_for_a_handover_as_root_with_the_units_launcher_config(
    unit: dict[str, Any],
) -> None:
    exec_reload = only(unit, "Service", "ExecReload")
    assert exec_reload.startswith("+"), "the handover socket is root's"
    argv = shlex.split(exec_reload[1:])
    start = shlex.split(only(unit, "Service", "ExecStart")[1:])
    assert argv[0] == start[0], "the same fulcrum program as ExecStart"
    assert argv[1:] == ["handover", *start[2:]]

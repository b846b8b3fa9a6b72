"""``fulcrum launch`` on the proving ground with a stand-in resident at the end of the chain
(``standin_resident.py``), as the launch scenarios run it: the ``launch`` fixture starts
fulcrum the way systemd would (every one started is stopped after) and gives the
``Unit``, whose stand-in reports what it was handed; ``accepted_ports`` reads the
fulcrum table inside a pid's netns."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, ensure_system_user
from tests.scenario.proving_ground import (
    PYTHON,
    Fulcrum,
    Ground,
    run_in_pid,
    unit_config_text,
    wait_for,
)

STANDIN = Path(__file__).with_name("standin_resident.py")
REPORT_TIMEOUT = 30.0
DSN = "postgresql://valis@/valis_state?host=/var/run/postgresql"


@attrs.define
class Unit:
    """One launch: the fulcrum process and where its stand-in reports."""

    fulcrum: Fulcrum
    report_path: Path
    config_path: Path

    def report(self) -> dict[str, Any]:
        wait_for(
            lambda: self.report_path.exists() or self.fulcrum.process.poll() is not None,
            REPORT_TIMEOUT,
            "the stand-in resident's report",
        )
        if not self.report_path.exists():
            raise AssertionError(f"fulcrum exited before the resident ran:\n{self.fulcrum.stderr}")
        return json.loads(self.report_path.read_text())  # type: ignore[no-any-return]

    def stopped_marker(self) -> dict[str, Any] | None:
        path = Path(f"{self.report_path}.stopped")
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture
def account() -> tuple[int, int]:
    require_root()
    entry = ensure_system_user(RUN_USER)
    return entry.pw_uid, entry.pw_gid


@pytest.fixture
def launch(ground: Ground, account: tuple[int, int]) -> Iterator[Any]:
    """Start ``fulcrum launch`` on the ground; every fulcrum started is stopped after."""
    workdir = Path(tempfile.mkdtemp(prefix="vl-fulcrum-"))
    os.chown(workdir, *account)  # the stand-in writes its report here as the run account
    # The run account may not reach this checkout (a clone under a 0700 home), so the
    # stand-in runs from a copy beside its report.
    standin = workdir / STANDIN.name
    shutil.copyfile(STANDIN, standin)
    standin.chmod(0o644)
    command = (PYTHON, "-I", str(standin))
    started: list[Fulcrum] = []

    def start(mode: str = "dedicated", env: dict[str, str] | None = None,
              extra_args: tuple[str, ...] = (), **fields: object) -> Unit:
        n = len(started)
        config_path = workdir / f"launcher-{n}.toml"
        config_path.write_text(unit_config_text(ground, command, mode=mode, **fields))
        report_path = workdir / f"report-{n}.json"
        fulcrum_env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "VALIS_STANDIN_REPORT": str(report_path),
            "VALIS_OPERATOR_STATE_DSN": DSN,
            "NOT_FOR_THE_RESIDENT": "root's business",
            # One DNS UDP socket unless a test asks for more (absent: one per CPU).
            "VALIS_DNS_WORKERS": "1",
            **(env or {}),
        }
        fulcrum = Fulcrum.start(config_path, fulcrum_env, workdir, extra_args)
        started.append(fulcrum)
        return Unit(fulcrum, report_path, config_path)

    try:
        yield start
    finally:
        for fulcrum in started:
            if fulcrum.process.poll() is None:
                fulcrum.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def accepted_ports(pid: int) -> tuple[str, set[tuple[str, int]], list[str]]:
    """The fulcrum table inside pid's netns: its policy line, port accepts, other rules."""
    listing = run_in_pid(pid, ["nft", "list", "table", "inet", "fulcrum"]).stdout
    ports = {(p, int(n)) for p, n in re.findall(r"^\s*(tcp|udp) dport (\d+) accept$", listing,
                                                re.MULTILINE)}
    policy = re.search(r"type filter hook input priority filter; policy (\w+);", listing)
    others = [
        line.strip() for line in listing.splitlines()
        if line.strip().endswith("accept") and not re.match(r"\s*(tcp|udp) dport", line)
    ]
    return (policy.group(1) if policy else ""), ports, others

"""docs/library.md's examples run as written: a library user copying one gets what the
page says (the third against a real resident and a real database)."""

from __future__ import annotations

import pwd
import re
from pathlib import Path
from typing import Any

import pytest

from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import RUN_USER, PgCluster
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from valis_core.acting_as import acting_as
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.zones import replace_zone

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "library.md"
ZONE = "example.test."


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def run_example(number: int) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"library_example_{number}"}
    exec(compile(examples()[number], f"{PAGE}:example {number + 1}", "exec"), namespace)
    return namespace


def test_the_page_has_its_three_examples() -> None:
    assert len(examples()) == 3


def test_check_a_zone_file_says_ok_or_why_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(ROOT)
    namespace = run_example(0)
    assert re.fullmatch(r"ok: \d+ records\n", capsys.readouterr().out)
    broken = tmp_path / "broken.zone"
    broken.write_text("@ 3600 IN SOA ns1 host 1 2 3 4 5\n@ 3600 IN CNAME elsewhere.\n")
    verdict = namespace["check_zone_file"](str(broken), ZONE)
    assert verdict.startswith("refused: ")
    assert "CNAME" in verdict


def test_planning_a_condense_lists_its_steps_without_touching_a_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_example(1)
    lines = capsys.readouterr().out.splitlines()
    steps = [line.split(". ", 1)[1] for line in lines]
    assert steps[0] == "assess host"
    claim = steps.index("claim fence at generation 5")
    assert steps.index("materialise durable state from /var/backups/node-a.backup at "
                       "generation 4") < claim < steps.index("start unit")
    assert steps[-1] == "read back apex soa example.test."


def test_reading_a_nodes_fence_and_status(
    resident_harness: Harness, pg_cluster: PgCluster, state_dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone(ZONE), ZONE))
    state_dir = make_state_dir(resident_harness.workdir)
    resident = resident_harness.start(state_dir, site_facts(state_dsn))
    resident.wait_ready()
    show_node = run_example(2)["show_node"]
    capsys.readouterr()
    account = pwd.getpwnam(RUN_USER)
    with acting_as((account.pw_uid, account.pw_gid)):
        show_node(state_dsn, state_dir)
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"fence: generation 0 held by node-a@loopback#[0-9a-f]{16}", out[0])
    assert out[1] == "node node-a at loopback: ready, generation 0"
    assert re.fullmatch(r"  example\.test\. serial \d+", out[2])

"""One fulcrum per netns: a second ``fulcrum launch`` beside a live one touches nothing.

The operator's story: a node is up on the proving ground (condensed from genesis, its
``fulcrum launch`` supervised as on a host without systemd, the real resident answering
DNS), and someone runs ``fulcrum launch`` for the same netns again, the way a re-run of
``valis condense --unit-command`` or ``valis apply --supervise`` does after the first lost
its terminal. Before the unit lock, the newcomer reclaimed the netns it found (killing
the resident) and the first fulcrum then tore the netns down under the newcomer. Now the
newcomer is refused at once, naming the first fulcrum's pid, and the first keeps
serving: the same processes in its netns, and an authoritative answer from the client
after every round. Twenty rounds, each with two newcomers racing each other.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import attrs
import pytest

from fulcrum.launch import unit_lock_path
from tests.conftest import require_root
from tests.scenario.operator_state_helpers import EXAMPLE_ZONE
from tests.scenario.pg import RUN_USER, PgCluster, connect_as
from tests.scenario.proving_ground import (
    FULCRUM,
    UNIT_IP,
    Fulcrum,
    Ground,
    dig,
    netns_names,
    run,
    unit_config_text,
    wait_for,
)
from tests.scenario.resident_harness import make_state_dir, resident_runtime, site_facts
from valis_core.apply.unit_control import ProcessUnitController
from valis_core.launcher_config import parse_launcher_config
from valis_core.ops.condense import CondenseRequest, RequestKind, condense_onto_host
from valis_core.ops.condense_host import LocalCondenseHost, ask_soa_in_netns, let_unit_notify

ROUNDS = 20
RIVALS_PER_ROUND = 2
RIVAL_TIMEOUT = 60.0
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@attrs.define
class Serving:
    """A node up on the ground: its launcher config, its supervised fulcrum, its log."""

    ground: Ground
    config: Path
    unit: ProcessUnitController
    log: Path
    workdir: Path

    @property
    def fulcrum_pid(self) -> int:
        pid = self.unit.pid
        assert pid is not None
        return pid

    def netns_pids(self) -> set[int]:
        """What runs in the unit's netns, as ``ip`` sees it (independent of fulcrum)."""
        listed = run(["ip", "netns", "pids", self.ground.unit_netns]).stdout
        return {int(pid) for pid in listed.split()}

    def answers(self) -> bool:
        answer = dig(self.ground.client, UNIT_IP, EXAMPLE_ZONE, "SOA", timeout=3.0)
        return answer.status == "NOERROR" and answer.authoritative and bool(answer.answer)


@pytest.fixture
def serving(
    ground: Ground, pg_cluster: PgCluster, zone_dsn: str, run_account_dir: Path
) -> Iterator[Serving]:
    require_root()
    account = pwd.getpwnam(RUN_USER)
    owner = (account.pw_uid, account.pw_gid)
    state_dir = make_state_dir(run_account_dir)
    config = run_account_dir / "launcher.toml"
    config.write_text(unit_config_text(ground, [resident_runtime()]))
    config.chmod(0o644)
    log = run_account_dir / "unit.log"
    facts = site_facts(zone_dsn)
    # The unit's output kept in a file; `exec` keeps fulcrum the supervised process.
    command = ["/bin/sh", "-c", 'exec "$@" >>"$UNIT_LOG" 2>&1', "sh",
               FULCRUM, "launch", "--config", str(config)]
    env = {"PATH": PATH, "UNIT_LOG": str(log), "STATE_DIRECTORY": str(state_dir), **facts}
    with ProcessUnitController(command, env=env, cwd="/", stop_timeout=30.0) as unit:
        let_unit_notify(unit, owner)
        host = LocalCondenseHost(
            state_dir=state_dir,
            run_account=owner,
            connect=lambda: connect_as(RUN_USER, zone_dsn, autocommit=True),
            unit=unit,
            holder=f"{facts['VALIS_NODE_NAME']}@{facts['VALIS_LOCATION']}",
            dns_address=(UNIT_IP, 53),
            assess=lambda: None,  # the host's readiness is test_deploy_from_genesis's story
            facts=facts,
            ready_timeout=120.0,
            ask_soa=ask_soa_in_netns(ground.client),
        )
        condense_onto_host(CondenseRequest(RequestKind.GENESIS, [EXAMPLE_ZONE]), host)
        yield Serving(ground, config, unit, log, run_account_dir)


def settled(serving: Serving, rivals: list[Fulcrum], residents: set[int]) -> bool:
    """Every rival has exited, or the first unit's processes changed under them."""
    exited = all(rival.process.poll() is not None for rival in rivals)
    return exited or serving.netns_pids() != residents


def test_a_second_fulcrum_for_a_live_netns_is_refused_naming_the_first_which_keeps_serving(
    serving: Serving,
) -> None:
    first = serving.fulcrum_pid
    residents = serving.netns_pids()
    assert residents, "nothing runs in the unit's netns"
    assert serving.answers()
    lock = unit_lock_path(parse_launcher_config(serving.config.read_text()))
    assert lock.read_text().strip() == str(first)

    for round_ in range(ROUNDS):
        rivals = [
            Fulcrum.start(serving.config, {"PATH": PATH}, serving.workdir)
            for _ in range(RIVALS_PER_ROUND)
        ]
        try:
            # Bounded: a rival that took the netns over never exits by itself, and the
            # first's resident is then gone; either ends the wait.
            wait_for(
                partial(settled, serving, rivals, residents),
                RIVAL_TIMEOUT, f"round {round_}: the rivals to be refused",
            )
            assert serving.netns_pids() == residents, (
                f"round {round_}: the first unit's processes changed\n"
                + "\n".join(r.stderr for r in rivals)
            )
            for rival in rivals:
                assert rival.process.poll() == 1, (round_, rival.stderr)
                assert (
                    f"netns {serving.ground.unit_netns} is already run by fulcrum pid {first}"
                    in rival.stderr
                ), (round_, rival.stderr)
                assert "Traceback" not in rival.stderr
        finally:
            for rival in rivals:
                if rival.process.poll() is None:
                    rival.stop()
        assert serving.unit.is_up(), f"round {round_}: the first fulcrum is gone"
        assert serving.answers(), f"round {round_}: the first unit stopped answering"

    serving.unit.stop()
    assert serving.ground.unit_netns not in netns_names()
    assert not lock.exists(), "the unit lock outlived the fulcrum that held it"
    assert f"unit {serving.ground.unit_netns} torn down" in serving.log.read_text()

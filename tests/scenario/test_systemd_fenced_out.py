"""The evacuated node's old host under a real systemd: fenced out, it stops for good.

The operator's story: node-a serves from this host under the shipped unit; the node is
evacuated to another host, whose condense claims the fence at a higher generation. The
old host's resident is fenced out at its next heartbeat. It must not churn: it exits with
the fenced-out status, fulcrum passes that status through as its own after tearing the
netns down, and the unit's ``RestartPreventExitStatus=`` keeps systemd from starting it
again — the unit ends failed with no restart. ``valis status`` there then says who fenced
it out and at which generation, long after the process is gone. Started again (as a
reboot of a still-enabled unit would), it is refused at the fence once and stays down.

The host is placed as in ``test_systemd_unit`` (the session's frozen delivery applied
with ``valis apply``, the database on the test host's private cluster, bound in); the
successor's claim is made directly in the database, as its condense would make it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import Ground, unit_config_text
from tests.scenario.proving_ground import sweep_stale as sweep_stale_grounds
from tests.scenario.systemd_container import Bind, SystemdContainer, sweep_stale
from tests.scenario.systemd_node import (
    DELIVERED,
    LAUNCHER_CONFIG,
    ROOT,
    SITE_FACTS,
    SOCKET_UNIT,
    STATE_DIRECTORY,
    UNIT,
    UP_TIMEOUT,
    Node,
    example_operator_state,
)
from valis_core.fence import FENCED_OUT_EXIT_STATUS
from valis_core.operator_state.fence import claim_instance_fence, read_instance_fence
from valis_core.operator_state.site_facts import render_site_facts

SUCCESSOR = "node-a@successor-host#0123456789abcdef"
STOPPED = ("failed", "inactive")


@pytest.fixture(scope="module")
def dsn(pg_cluster: PgCluster) -> str:
    return example_operator_state(pg_cluster)


@pytest.fixture(scope="module")
def old_host(pg_cluster: PgCluster, bundle: Path, delivery: Path, build_binds: tuple[Path, ...],
             dsn: str) -> Iterator[Node]:
    """The old host with the unit applied and serving node-a at the genesis generation."""
    require_root()
    ensure_system_user(RUN_USER)
    sweep_stale()
    sweep_stale_grounds()
    ground = Ground().build()
    try:
        binds = [*map(Bind, build_binds), Bind(pg_cluster.cluster.socket_dir)]
        with SystemdContainer(binds=binds) as box:
            box.adopt_link(ground.nic)
            config = unit_config_text(ground, [f"{ROOT}/current/bin/valis"])
            box.put_text(LAUNCHER_CONFIG, config, mode=0o644)
            facts = {"VALIS_NODE_NAME": "node-a", "VALIS_LOCATION": "old-host",
                     "VALIS_OPERATOR_STATE_DSN": dsn, "VALIS_SERVED_ZONES": "example.test."}
            box.put_text(SITE_FACTS, render_site_facts(facts), mode=0o644)
            for unit in (UNIT, SOCKET_UNIT):
                box.run("ln", "-s", f"{DELIVERED}/{unit}", f"/etc/systemd/system/{unit}")
            box.systemctl("daemon-reload")
            node = Node(box, ground, str(bundle / "valis"), delivery, delivery, delivery)
            status, _out, err = node.apply(delivery, "--timeout", str(UP_TIMEOUT))
            assert status == 0, err + box.journal(UNIT)
            yield node
        assert box.leftovers() == []
    finally:
        ground.cleanup()


def _supersede(pg_cluster: PgCluster, dsn: str) -> int:
    """The successor's condense: claim the generation above the fence's; that generation."""
    with pg_cluster.connect(dsn, autocommit=True) as conn:
        current = read_instance_fence(conn)
        assert current is not None
        claimed = claim_instance_fence(conn, current.generation + 1, SUCCESSOR)
    return claimed.generation


def _assert_stopped_for_good(node: Node, generation: int) -> None:
    box = node.box
    unit = box.wait_state(UNIT, STOPPED, timeout=UP_TIMEOUT, also=(
        "Result", "NRestarts", "ExecMainStatus", "ExecMainCode"))
    journal = box.journal(UNIT)
    assert unit["ActiveState"] == "failed", unit
    assert unit["NRestarts"] == "0", journal
    # fulcrum (the unit's main process) exited with the resident's own status.
    assert unit["ExecMainStatus"] == str(FENCED_OUT_EXIT_STATUS), unit
    assert "fenced out" in journal
    assert node.ground.unit_netns not in box.run("ip", "netns", "list").stdout
    shown = box.run(node.valis, "status", "--state-dir", STATE_DIRECTORY, check=False)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert shown.stderr.startswith(
        f"valis: fenced out by {SUCCESSOR} at generation {generation}: "), shown.stderr


def test_a_superseded_unit_stops_for_good_and_status_says_who_fenced_it_out(
    old_host: Node, pg_cluster: PgCluster, dsn: str
) -> None:
    old_host.box.systemctl("start", UNIT, timeout=UP_TIMEOUT)
    assert old_host.unit("ActiveState")["ActiveState"] == "active"
    generation = _supersede(pg_cluster, dsn)
    _assert_stopped_for_good(old_host, generation)


def test_a_fenced_out_unit_started_again_is_refused_once_and_not_restarted(
    old_host: Node, pg_cluster: PgCluster, dsn: str
) -> None:
    """What a reboot of the still-enabled unit does: one refusal at the fence, no churn."""
    generation = _supersede(pg_cluster, dsn)
    old_host.box.systemctl("stop", UNIT, check=False)
    old_host.box.systemctl("reset-failed", UNIT, check=False)
    started = old_host.box.systemctl("start", UNIT, check=False, timeout=UP_TIMEOUT)
    assert started.returncode != 0
    _assert_stopped_for_good(old_host, generation)

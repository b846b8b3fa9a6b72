"""A host whose launcher config names ``designated-port 5353``: the contract allows it and
never opens it. The unit boots and serves on 5353 inside its netns, the firewall drops
5353 from outside, and every place an operator looks — ``fulcrum config verify``,
``valis assess``, fulcrum's log, the resident's STATUS line and its fabric status — says
the served port is unreachable from outside, and why.

Provisioned and launched as ``test_deploy_from_genesis`` does, with its helpers (the zone
imported in-process: importing is another test's subject).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.scenario.genesis_host import (
    READY_TIMEOUT,
    SERIAL,
    ZONE,
    ZONE_FILE,
    produce_launcher_config,
    provision_state_dir,
    resident_pid,
    workdir,  # noqa: F401  (the fixture, shared)
)
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import (
    FULCRUM,
    PYTHON,
    UNIT_IP,
    Fulcrum,
    Ground,
    NotifyListener,
    dig,
    fulcrum_environment,
    run,
    run_in_pid,
    tcp_exchange,
)
from tests.scenario.resident_harness import resident_runtime
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.zones import replace_zone

PORT = 5353
UNREACHABLE = f"designated-port {PORT} is not in the firewall's accept set"

# Runs inside the unit's netns: GET the fabric's /status with the token it published.
_FABRIC_STATUS = r"""
import http.client, json, sys
info = json.load(open(sys.argv[1]))
token = open(info["token_file"]).read().strip()
conn = http.client.HTTPConnection(info["host"], info["port"], timeout=10)
conn.request("GET", "/status", headers={"Authorization": "Bearer " + token})
print(conn.getresponse().read().decode())
"""


def fabric_status(pid: int, state_dir: Path) -> dict[str, Any]:
    out = run_in_pid(pid, [PYTHON, "-I", "-c", _FABRIC_STATUS, str(state_dir / "fabric.json")])
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_designated_port_the_firewall_drops_is_served_inside_and_reported_everywhere(
    ground: Ground, workdir: Path, pg_cluster: PgCluster, state_dsn: str  # noqa: F811
) -> None:
    ensure_system_user(RUN_USER)
    valis = resident_runtime()
    state_dir = provision_state_dir(workdir)
    config = produce_launcher_config(ground, workdir, valis, designated_port=PORT)
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(ZONE_FILE.read_text(), ZONE))

    # -- before launch: verify and assess warn, and neither refuses ------------------------
    verified = run([FULCRUM, "config", "verify", str(config)])
    assert f"warning: {UNREACHABLE}" in verified.stdout
    assert "set designated-port = 53" in verified.stdout
    # The binary's self-test is another test's subject: ``true`` stands in for it here.
    assessed = run([
        valis, "assess", "--launcher-config", str(config), "--state-dir", str(state_dir),
        "--binary", "/bin/true",
        "--pg-socket-dir", str(pg_cluster.cluster.socket_dir),
        "--pg-port", str(pg_cluster.cluster.port),
    ], check=False)  # fmt: skip
    assert "warn  launcher-config" in assessed.stdout, assessed.stdout
    assert f"warning: {UNREACHABLE}" in assessed.stdout

    # -- launch: the unit boots rather than restart-looping ---------------------------------
    notify_dir = workdir / "notify"
    notify_dir.mkdir()
    notify = NotifyListener(notify_dir)
    environment = fulcrum_environment(notify, state_dir, state_dsn, ZONE)
    fulcrum = Fulcrum.start(config, environment, workdir)
    try:
        try:
            ready = notify.wait_for("READY", "1", READY_TIMEOUT)
        except TimeoutError:
            fulcrum.stop()
            raise AssertionError(f"no READY=1 from the unit:\n{fulcrum.stderr}") from None
        assert f"udp={UNIT_IP}:{PORT} tcp={UNIT_IP}:{PORT}" in ready["STATUS"]
        assert f"unreachable from outside: {UNREACHABLE}" in ready["STATUS"]
        pid = resident_pid(fulcrum)

        # -- inside the unit's netns the zone answers on 5353 --------------------------------
        for tcp in (False, True):
            soa = dig(None, UNIT_IP, ZONE, "SOA", tcp=tcp, port=PORT, pid=pid)
            assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
            assert soa.answer[0].split()[6] == SERIAL, soa.raw

        # -- from the client namespace, the firewall drops it ----------------------------------
        with pytest.raises(RuntimeError, match="no DNS response"):
            dig(ground.client, UNIT_IP, ZONE, "SOA", port=PORT, timeout=1.0)
        assert not tcp_exchange(ground.client, UNIT_IP, PORT, timeout=0.5)["ok"]

        # -- the resident's fabric status says it ---------------------------------------------
        dns = fabric_status(pid, state_dir)["dns"]
        assert dns["udp"] == dns["tcp"] == f"{UNIT_IP}:{PORT}"
        assert dns["behind_launcher_firewall"] is True
        assert dns["reachable_from_outside"] is False
        assert UNREACHABLE in dns["problem"]

        fulcrum.signal(signal.SIGTERM)
        assert fulcrum.wait() == 0, fulcrum.stderr
    finally:
        if fulcrum.process.poll() is None:
            fulcrum.stop()
        notify.close()

    # -- fulcrum's log (the resident's lines included) says it -------------------------------
    log = fulcrum.stderr
    assert f"unit {ground.unit_netns}: {UNREACHABLE}" in log
    assert f"adopt: {UNREACHABLE}" in log

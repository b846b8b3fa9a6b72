"""A handover under push boot: the new resident pushes its own edge socket, which the
steer puts in the old one's place in its SOCKMAP, in place; DNS over HTTPS on the edge
port and DNS on :53 are answered throughout, and no connection is refused.

A whole unit is launched with ``fulcrum launch`` (the real resident, the real steer, the
real firewall, as in test_push_boot), then ``fulcrum handover`` is asked while a client
in the client netns connects to the edge port over and over.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
from pathlib import Path

import dns.message

from tests.scenario.edge_ca import install, make_test_ca
from tests.scenario.genesis_host import (
    READY_TIMEOUT,
    ZONE,
    ZONE_FILE,
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
    unit_config_text,
)
from tests.scenario.resident_harness import resident_runtime
from tests.scenario.steer_netns import EDGE
from tests.scenario.steer_object import steer_object_path
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.zones import replace_zone

HANDOVER_TIMEOUT = 150.0
LOOP_SECONDS = 120.0

# Runs in the client netns until its stop file appears (bounded in count and time):
# DNS over HTTPS on the edge port, each outcome counted; one JSON line at the end.
_EDGE_LOOP = r"""
import json, os, ssl, sys, time, urllib.request
url, cafile, stop, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
context = ssl.create_default_context(cafile=cafile)
context.check_hostname = False
outcomes, deadline = {}, time.monotonic() + seconds
print("started", flush=True)
for _ in range(100000):
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as reply:
            key = str(reply.status)
    except Exception as exc:
        key = type(exc).__name__ + ": " + str(exc)[:80]
    outcomes[key] = outcomes.get(key, 0) + 1
    if os.path.exists(stop) or time.monotonic() > deadline:
        break
print(json.dumps(outcomes), flush=True)
"""


def test_a_handover_under_push_boot_replaces_the_edge_socket_in_place_refusing_nothing(
    ground: Ground, workdir: Path, pg_cluster: PgCluster, state_dsn: str,  # noqa: F811
) -> None:
    run_account = ensure_system_user(RUN_USER)
    state_dir = provision_state_dir(workdir)
    ca = make_test_ca()
    cafile = workdir / "edge-root.pem"
    cafile.write_bytes(ca.root_pem)
    install(ca.issue((ZONE.rstrip("."),), (UNIT_IP,)), state_dir,
            (run_account.pw_uid, run_account.pw_gid))
    config = workdir / "launcher.toml"
    config.write_text(unit_config_text(
        ground, [resident_runtime()], edge_port=EDGE,
        catchall_object_path=str(steer_object_path()),
    ))
    config.chmod(0o644)
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(ZONE_FILE.read_text(), ZONE))
    notify_dir = workdir / "notify"
    notify_dir.mkdir()
    notify = NotifyListener(notify_dir)
    environment = fulcrum_environment(notify, state_dir, state_dsn, ZONE)
    query = base64.urlsafe_b64encode(
        dns.message.make_query(ZONE, "SOA").to_wire()).rstrip(b"=").decode()
    stop_file = workdir / "stop-asking"
    fulcrum = Fulcrum.start(config, environment, workdir)
    try:
        try:
            notify.wait_for("READY", "1", READY_TIMEOUT)
        except TimeoutError:
            fulcrum.stop()
            raise AssertionError(f"no READY=1 from the unit:\n{fulcrum.stderr}") from None
        old = resident_pid(fulcrum)
        with subprocess.Popen(
            ["ip", "netns", "exec", ground.client, PYTHON, "-c", _EDGE_LOOP,
             f"https://{UNIT_IP}:{EDGE}/dns-query?dns={query}", str(cafile), str(stop_file),
             str(LOOP_SECONDS)],
            stdout=subprocess.PIPE, text=True,
        ) as asking:
            assert asking.stdout is not None
            assert asking.stdout.readline().strip() == "started"
            handover = subprocess.run(
                [FULCRUM, "handover", "--config", str(config)], capture_output=True,
                text=True, timeout=HANDOVER_TIMEOUT, check=False,
            )
            new = resident_pid(fulcrum)
            soa = dig(ground.client, UNIT_IP, ZONE, "SOA")
            stop_file.touch()
            outcomes = json.loads(asking.stdout.readline())
            asking.wait(timeout=30)
        assert handover.returncode == 0, handover.stderr + fulcrum.stderr
        assert "handed over" in handover.stdout, handover.stdout
        assert new != old
        assert (soa.status, soa.authoritative) == ("NOERROR", True), soa.raw
        # Every connection to the edge port was answered: the old socket's or the new's.
        assert set(outcomes) == {"200"}, outcomes
        fulcrum.signal(signal.SIGTERM)
        assert fulcrum.wait() == 0, fulcrum.stderr
    finally:
        stop_file.touch()
        if fulcrum.process.poll() is None:
            fulcrum.stop()
        notify.close()
    log = fulcrum.stderr
    pushes = re.findall(r"control: push from pid (\d+) accepted", log)
    assert pushes == [str(old), str(new)], log

"""A stranger asking for the zone costs the database nothing: a node launched by fulcrum
on the proving ground, its zone with one listed secondary, is asked for AXFRs from the
client namespace, an address no secondary has. They are REFUSED, and they still are,
every one at once, while the operator-state database is frozen (every PostgreSQL process
stopped with SIGSTOP): the node decides them from the secondaries it holds in memory and
never waits on the database for them. Its ordinary answers go on meanwhile.

Provisioned and launched as ``test_deploy_from_genesis`` does, with its helpers.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import dns.tsigkeyring

from tests.scenario.genesis_host import (
    READY_TIMEOUT,
    SERIAL,
    ZONE,
    ZONE_FILE,
    produce_launcher_config,
    provision_state_dir,
    workdir,  # noqa: F401  (the fixture, shared)
)
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import (
    CLIENT_IP,
    PYTHON,
    UNIT_IP,
    Fulcrum,
    Ground,
    NotifyListener,
    dig,
    fulcrum_environment,
    run_in,
)
from tests.scenario.resident_harness import resident_runtime
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.secondaries import Secondary, add_secondary
from valis_core.operator_state.zones import replace_zone

SECONDARY_IP = "198.51.100.53"
"""The listed secondary: an address nothing on the ground has (the client is not it)."""
KEY_NAME = "xfr-key."
SECRET = bytes(range(1, 33))
ASK_LIMIT = 10.0
"""Seconds each AXFR may take to be answered: the node answers a refusal in far less; a
node waiting on the frozen database never answers."""

# Runs in the client namespace as a stock interpreter: the AXFR given (hex) sent over TCP
# ``count`` times, each on a connection of its own; the RCODE of each first response
# printed as JSON, or "no answer" when none came within the limit.
_ASK = r"""
import json, socket, sys
host, query = sys.argv[1], bytes.fromhex(sys.argv[2])
count, limit = int(sys.argv[3]), float(sys.argv[4])
out = []
for _ in range(count):
    try:
        with socket.create_connection((host, 53), timeout=limit) as s:
            s.sendall(len(query).to_bytes(2, "big") + query)
            got = b""
            while len(got) < 4:
                chunk = s.recv(65535)
                if not chunk:
                    break
                got += chunk
            out.append(got[5] & 0x0F if len(got) >= 6 else "closed")
    except OSError as exc:
        out.append("no answer (%s)" % type(exc).__name__)
print(json.dumps(out))
"""


def axfr_query(*, signed: bool) -> bytes:
    query = dns.message.make_query(ZONE, "AXFR")
    if signed:
        query.use_tsig(dns.tsigkeyring.from_text(
            {KEY_NAME: base64.b64encode(SECRET).decode()}), KEY_NAME)
    return query.to_wire()


def ask(ground: Ground, query: bytes, count: int) -> list[object]:
    """``count`` AXFRs from the client namespace; the RCODE answered to each."""
    out = run_in(ground.client, [PYTHON, "-I", "-c", _ASK, UNIT_IP, query.hex(), str(count),
                                 str(ASK_LIMIT)], timeout=count * ASK_LIMIT + 30)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def cluster_processes(pg: PgCluster) -> list[int]:
    """The server's processes: the postmaster and every child of it."""
    postmaster = pg.cluster.postmaster_pid()
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    children.append(int(entry.name))
    return [postmaster, *children]


@contextlib.contextmanager
def frozen(pg: PgCluster) -> Iterator[None]:
    """Every process of the database stopped (it accepts nothing, answers nothing) for
    the block, and continued after it, whatever happens."""
    stopped: list[int] = []
    try:
        for pid in cluster_processes(pg):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_stranger_s_axfr_is_refused_without_the_database_even_while_it_is_frozen(
    ground: Ground, workdir: Path, pg_cluster: PgCluster, state_dsn: str  # noqa: F811
) -> None:
    ensure_system_user(RUN_USER)
    valis = resident_runtime()
    state_dir = provision_state_dir(workdir)
    config = produce_launcher_config(ground, workdir, valis)
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(ZONE_FILE.read_text(), ZONE))
        add_secondary(conn, Secondary(ZONE, SECONDARY_IP, KEY_NAME, "hmac-sha256", SECRET))
    notify_dir = workdir / "notify"
    notify_dir.mkdir()
    notify = NotifyListener(notify_dir)
    environment = fulcrum_environment(notify, state_dir, state_dsn, ZONE)
    fulcrum = Fulcrum.start(config, environment, workdir)
    try:
        try:
            notify.wait_for("READY", "1", READY_TIMEOUT)
        except TimeoutError:
            fulcrum.stop()
            raise AssertionError(f"no READY=1 from the unit:\n{fulcrum.stderr}") from None

        # A stranger, signed with the listed secondary's own key or unsigned: REFUSED.
        refused = dns.rcode.REFUSED.value
        assert ask(ground, axfr_query(signed=True), 2) == [refused] * 2
        assert ask(ground, axfr_query(signed=False), 2) == [refused] * 2

        # With the database frozen, every one is still refused at once, and the zone
        # still answered.
        with frozen(pg_cluster):
            assert ask(ground, axfr_query(signed=True), 5) == [refused] * 5
            assert ask(ground, axfr_query(signed=False), 5) == [refused] * 5
            soa = dig(ground.client, UNIT_IP, ZONE, "SOA", timeout=ASK_LIMIT)
            assert soa.status == "NOERROR", soa.raw
            assert soa.answer[0].split()[6] == SERIAL, soa.raw

        fulcrum.signal(signal.SIGTERM)
        assert fulcrum.wait() == 0, fulcrum.stderr
    finally:
        if fulcrum.process.poll() is None:
            fulcrum.stop()
        notify.close()
    log = fulcrum.stderr
    assert f"{CLIENT_IP} is not a listed secondary of {ZONE}" in log

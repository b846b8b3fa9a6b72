"""A secondary consuming a node's catalog zone (RFC 9432) follows the operator's catalog
with no configuration of its own touched: a zone imported and added to the catalog is
transferred and answered by the secondary, a member removed or whose zone is deleted is
dropped by it. Knot 3.2 (``catalog-role: interpret``) and BIND 9.18 (``catalog-zones``)
each consume the catalog in their own network namespace; their configuration names the
catalog and nothing of its members."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import PgCluster, valis
from tests.scenario.proving_ground import dig, wait_for
from tests.scenario.resident_harness import make_state_dir, site_facts
from tests.scenario.transfer_wire import (
    KEY_NAME,
    NODE_IP,
    SECONDARY_IP,
    Wire,
    start_node,
)
from valis_core.operator_state.secondaries import Secondary, add_secondary

CATALOG = "catalog.invalid."
BOUND = 60.0
"""Seconds a consumer is given to follow one change (NOTIFY, the catalog's IXFR, the
member's AXFR: a second or less on a quiet machine)."""


def knot_catalog_conf(directory: Path, secret: str) -> str:
    """Knot consuming the catalog: the catalog zone itself, and the templates its members
    are given (the first by default, ``other`` for the members in group ``other``), as
    docs/catalog.md gives it."""
    member = f"""    master: primary
    acl: notify-from-primary
    storage: "{directory}"
"""
    return f"""server:
    listen: {SECONDARY_IP}@53
    rundir: "{directory}"
    user: root:root
log:
  - target: "{directory}/knot.log"
    any: info
database:
    storage: "{directory}"
control:
    listen: "{directory}/knot.sock"
key:
  - id: {KEY_NAME}
    algorithm: hmac-sha256
    secret: {secret}
remote:
  - id: primary
    address: {NODE_IP}@53
    key: {KEY_NAME}
acl:
  - id: notify-from-primary
    address: {NODE_IP}
    key: {KEY_NAME}
    action: notify
template:
  - id: default
    storage: "{directory}"
  - id: member
{member}  - id: other
{member}zone:
  - domain: {CATALOG}
    master: primary
    acl: notify-from-primary
    catalog-role: interpret
    catalog-template: [member, other]
"""


def answers(wire: Wire, name: str, rdtype: str = "A") -> tuple[str, ...]:
    """The consumer's authoritative answer for ``name`` (nothing when it has no zone)."""
    try:
        found = dig(wire.secondary, SECONDARY_IP, name, rdtype)
    except RuntimeError:
        return ()
    return found.answer if found.status == "NOERROR" and "aa" in found.flags else ()


def gone(wire: Wire, name: str) -> bool:
    """Whether the consumer answers ``name``'s zone no more (REFUSED: not its zone)."""
    try:
        return dig(wire.secondary, SECONDARY_IP, name, "SOA").status == "REFUSED"
    except RuntimeError:
        return False


def bind_catalog_conf(directory: Path, secret: str) -> str:
    """BIND 9.18 consuming the catalog (``catalog-zones``), as docs/catalog.md gives it."""
    primary = f"{NODE_IP} key \"{KEY_NAME}\""
    return f"""options {{
    directory "{directory}";
    pid-file "{directory}/named.pid";
    session-keyfile "{directory}/session.key";
    managed-keys-directory "{directory}";
    listen-on port 53 {{ {SECONDARY_IP}; }};
    listen-on-v6 {{ none; }};
    recursion no;
    allow-new-zones yes;
    catalog-zones {{
        zone "{CATALOG}" default-primaries {{ {primary}; }}
            zone-directory "{directory}" in-memory no;
    }};
}};
controls {{ }};
key "{KEY_NAME}" {{
    algorithm hmac-sha256;
    secret "{secret}";
}};
zone "{CATALOG}" {{
    type secondary;
    primaries {{ {primary}; }};
    file "{directory}/catalog.db";
}};
"""


def knot_serial(wire: Wire, directory: Path) -> str:
    """The catalog's serial Knot holds (it answers no query for a catalog zone; its
    control socket says)."""
    out = subprocess.run(
        ["knotc", "-s", str(directory / "knot.sock"), "zone-status", CATALOG],
        capture_output=True, text=True, timeout=10, check=False,
    ).stdout
    found = re.search(r"serial: (\d+)", out)
    return found.group(1) if found else ""


def bind_serial(wire: Wire, directory: Path) -> str:
    """The catalog's serial BIND serves."""
    found = answers(wire, CATALOG, "SOA")
    return found[0].split()[6] if found else ""


CONSUMERS = {
    "knot": (knot_catalog_conf, ["knotd", "-c"], "knot.log", knot_serial),
    "bind": (bind_catalog_conf, ["named", "-g", "-c"], "bind.out", bind_serial),
}
"""Each consumer: its configuration, how it runs in the foreground, its log, and how to
read the catalog's serial it holds."""


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_a_consumer_serves_the_members_of_the_catalog_and_drops_those_that_leave(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path, wire: Wire, consumer: str
) -> None:
    conf, command, log_name, held_serial = CONSUMERS[consumer]
    if shutil.which(command[0]) is None and not Path("/usr/sbin", command[0]).exists():
        pytest.skip(f"{command[0]} is not installed (scripts/bootstrap installs it)")
    secret = base64.b64encode(bytes(range(1, 33))).decode()
    import_zone(pg_cluster, state_dsn, "b.test.", extra="www IN A 192.0.2.82\n")
    assert valis("zone", "catalog", "create", "--dsn", state_dsn, CATALOG)[0] == 0
    assert valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "b.test.",
                 "--group", "other")[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        # The catalog's one secondary: its members are transferred to it with its key.
        add_secondary(conn, Secondary(CATALOG, SECONDARY_IP, KEY_NAME, "hmac-sha256",
                                      base64.b64decode(secret)))
    node = start_node(wire, make_state_dir(run_account_dir), site_facts(state_dsn, zones="*"),
                      run_account_dir)
    directory = Path(tempfile.mkdtemp(prefix=f"{consumer}-", dir=run_account_dir))
    (directory / f"{consumer}.conf").write_text(conf(directory, secret))
    server = None
    try:
        node.wait_ready()
        log = directory / log_name
        with (directory / f"{consumer}.out").open("ab") as sink:
            server = subprocess.Popen(
                ["ip", "netns", "exec", wire.secondary, *command,
                 str(directory / f"{consumer}.conf")],
                stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True,
            )
        # The member listed before the consumer started, in group ``other``: transferred and served.
        found = wait_for(lambda: answers(wire, "www.b.test."), BOUND,
                         f"{consumer} to serve the catalog's member b.test. ({log})", interval=0.2)
        assert found[0].split()[-1] == "192.0.2.82"

        # A zone imported now and added to the catalog: the consumer is told (NOTIFY), transfers
        # the catalog's change, then the new member, and answers for it.
        import_zone(pg_cluster, state_dsn, "a.test.", extra="www IN A 192.0.2.81\n")
        status, out, _ = valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "a.test.")
        assert status == 0, out
        found = wait_for(lambda: answers(wire, "www.a.test."), BOUND,
                         f"{consumer} to serve the new member a.test. ({log})", interval=0.2)
        assert found[0].split()[-1] == "192.0.2.81"
        assert "IXFR from serial" in node.stderr()  # the catalog followed incrementally

        # A change to a member reaches the consumer by the member's own NOTIFY and IXFR.
        import_zone(pg_cluster, state_dsn, "a.test.", serial=2,
                    extra="www IN A 192.0.2.81\nnew IN A 192.0.2.83\n")
        wait_for(lambda: answers(wire, "new.a.test."), BOUND,
                 f"{consumer} to follow a change of a.test. ({log})", interval=0.2)

        # Removed from the catalog: the consumer drops the zone.
        assert valis("zone", "catalog", "remove", "--dsn", state_dsn, CATALOG, "a.test.")[0] == 0
        wait_for(lambda: gone(wire, "a.test."), BOUND, f"{consumer} to drop a.test. ({log})",
                 interval=0.2)
        # Its zone deleted from operator state: it leaves the catalog, and the consumer drops it.
        assert valis("zone", "delete", "--dsn", state_dsn, "--force", "b.test.")[0] == 0
        wait_for(lambda: gone(wire, "b.test."), BOUND, f"{consumer} to drop b.test. ({log})",
                 interval=0.2)
        # The consumer holds the catalog at the node's serial.
        serial = dig(wire.node, NODE_IP, CATALOG, "SOA").answer[0].split()[6]
        wait_for(lambda: held_serial(wire, directory) == serial, BOUND,
                 f"{consumer} to hold serial {serial} of the catalog ({log})", interval=0.2)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        node.stop()
        node.notify.close()

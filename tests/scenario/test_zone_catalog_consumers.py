"""A secondary consuming a node's catalog zone (RFC 9432) follows the operator's catalog
with no configuration of its own touched: a zone imported and added to the catalog is
transferred and answered by the secondary, a member removed or whose zone is deleted is
dropped by it. Knot 3.2 (``catalog-role: interpret``) and BIND 9.18 (``catalog-zones``)
each consume the catalog in their own network namespace; their configuration names the
catalog and nothing of its members."""

from __future__ import annotations

import base64
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.scenario.catalog_consumers import (
    CATALOG,
    CONSUMERS,
    answers,
    bind_catalog_conf,
    gone,
)
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
    stop_server,
)
from valis_core.operator_state.secondaries import Secondary, add_secondary

BOUND = 60.0
"""Seconds a consumer is given to follow one change (NOTIFY, the catalog's IXFR, the
member's AXFR: a second or less on a quiet machine)."""


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
        stop_server(server)
        node.stop()
        node.notify.close()


OTHER = "other.invalid."


def test_bind_takes_a_moved_member_over_from_the_new_catalog_and_keeps_serving_it(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path, wire: Wire
) -> None:
    """RFC 9432 section 5.6 with a real consumer: BIND 9.18 consuming two catalogs serves a
    member of the first; ``valis zone catalog move`` lists it in the second and names the
    second in its coo, and BIND passes the member to the second catalog (once it has
    applied the second after the first: the move made again sees to it); the member's
    removal from the first then leaves it served, never deleted, where another member's
    removal drops that one."""
    _, command, log_name, _ = CONSUMERS["bind"]
    if shutil.which(command[0]) is None and not Path("/usr/sbin", command[0]).exists():
        pytest.skip(f"{command[0]} is not installed (scripts/bootstrap installs it)")
    secret = base64.b64encode(bytes(range(1, 33))).decode()
    for zone, address in (("a.test.", "192.0.2.81"), ("b.test.", "192.0.2.82")):
        import_zone(pg_cluster, state_dsn, zone, extra=f"www IN A {address}\n")
    for catalog in (CATALOG, OTHER):
        assert valis("zone", "catalog", "create", "--dsn", state_dsn, catalog)[0] == 0
    for zone in ("a.test.", "b.test."):
        assert valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, zone)[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        for catalog in (CATALOG, OTHER):
            add_secondary(conn, Secondary(catalog, SECONDARY_IP, KEY_NAME, "hmac-sha256",
                                          base64.b64decode(secret)))
    node = start_node(wire, make_state_dir(run_account_dir), site_facts(state_dsn, zones="*"),
                      run_account_dir)
    directory = Path(tempfile.mkdtemp(prefix="bind-coo-", dir=run_account_dir))
    (directory / "bind.conf").write_text(bind_catalog_conf(directory, secret, (CATALOG, OTHER)))
    server = None
    log = directory / log_name

    def processed(catalog: str) -> None:
        """Wait for BIND to have applied the node's version of ``catalog`` (its catalog
        processing logs each version it applies; a transfer alone is not that)."""
        serial = dig(wire.node, NODE_IP, catalog, "SOA").answer[0].split()[6]
        line = f"updating catalog zone '{catalog.rstrip('.')}' with serial {serial}"
        wait_for(lambda: line in log.read_text(), BOUND,
                 f"BIND to apply serial {serial} of {catalog} ({log})", interval=0.2)

    try:
        node.wait_ready()
        with (directory / "bind.out").open("ab") as sink:
            server = subprocess.Popen(
                ["ip", "netns", "exec", wire.secondary, *command, str(directory / "bind.conf")],
                stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True,
            )
        for name in ("www.a.test.", "www.b.test."):
            wait_for(functools.partial(answers, wire, name), BOUND,
                     f"BIND to serve {name} ({log})", interval=0.2)

        for catalog in (CATALOG, OTHER):  # the move's two steps, each applied
            status, out, _ = valis("zone", "catalog", "move", "--dsn", state_dsn, CATALOG,
                                   "a.test.", "--to", OTHER)
            assert status == 0, out
            processed(catalog)
        # Taken over: BIND deletes the member as the first catalog's and adds it as the
        # second's, transferring it again.
        taken = ("deleting zone 'a.test' from catalog 'catalog.invalid'",
                 "adding zone 'a.test' from catalog 'other.invalid' - success",
                 "catz_delzone_taskaction: zone 'a.test' deleted")
        wait_for(lambda: all(line in log.read_text() for line in taken), BOUND,
                 f"BIND to take a.test. over from {OTHER} ({log})", interval=0.2)
        wait_for(lambda: answers(wire, "www.a.test."), BOUND,
                 f"BIND to serve a.test. again, as {OTHER}'s ({log})", interval=0.2)
        # Both out of the first catalog: b.test. is dropped; the moved a.test. is not, its
        # ownership having passed to the second (without the coo BIND keeps it the first's,
        # passes over the second's entry as a duplicate, and deletes it here).
        since = len(log.read_text())
        for zone in ("a.test.", "b.test."):
            assert valis("zone", "catalog", "remove", "--dsn", state_dsn, CATALOG, zone)[0] == 0
        processed(CATALOG)
        wait_for(lambda: gone(wire, "b.test."), BOUND, f"BIND to drop b.test. ({log})",
                 interval=0.2)  # its deletion is logged with the catalog's others
        assert "zone 'a.test' deleted" not in log.read_text()[since:], log
        found = answers(wire, "www.a.test.")
        assert found, f"BIND dropped the moved member a.test. ({log})"
        assert found[0].split()[-1] == "192.0.2.81"
    finally:
        stop_server(server)
        node.stop()
        node.notify.close()


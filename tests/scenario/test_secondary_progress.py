"""How far each listed secondary has followed its zone outlives the resident: a real
resident writes what it saw to operator state, and the one started after it on the same
state directory shows the same serial in ``valis status`` before the secondary asks
again; the write keeps the newer sighting and skips a secondary no longer listed; the
journal's age limit keeps what the slowest listed secondary still needs, up to its own
bound, while the limit on records never yields."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Iterator

import dns.message
import dns.opcode
import dns.query
import dns.tsig
import dns.xfr
import dns.zone
import pytest

from tests.conftest import require_root
from tests.scenario.operator_state_helpers import run_sql
from tests.scenario.pg import PgCluster
from tests.scenario.proving_ground import run
from tests.scenario.resident_harness import Harness, inside_netns, make_state_dir, site_facts
from valis_core.dns.transfer.secondary_progress import Seen
from valis_core.operator_state.catalogs import add_member, create_catalog, remove_member
from valis_core.operator_state.journal import prune, read_difference
from valis_core.operator_state.secondaries import Secondary, add_secondary, remove_secondary
from valis_core.operator_state.secondary_progress import read_progress, save_progress

ZONE = "example.test."
KEY_NAME = "xfr.example."
SECRET = bytes(range(32))
BOUND = 30.0


def listed_at(address: str) -> Secondary:
    return Secondary(ZONE, address, KEY_NAME, "hmac-sha256", SECRET)


def test_a_write_keeps_the_newer_sighting_and_skips_a_secondary_no_longer_listed(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, listed_at("192.0.2.7"))
        add_secondary(conn, listed_at("2001:db8::7"))
        assert save_progress(conn, [Seen(ZONE, "192.0.2.7", 5, 2000.0),
                                    Seen(ZONE, "2001:db8::7", 9, 1000.0),
                                    Seen(ZONE, "192.0.2.99", 1, 1000.0)]) == 2
        conn.commit()
        # an older sighting written late changes nothing; a newer one replaces
        save_progress(conn, [Seen(ZONE, "192.0.2.7", 3, 1500.0),
                             Seen(ZONE, "2001:db8::7", 10, 1200.0)])
        conn.commit()
        assert read_progress(conn) == (Seen(ZONE, "2001:db8::7", 10, 1200.0),
                                       Seen(ZONE, "192.0.2.7", 5, 2000.0))
        assert remove_secondary(conn, ZONE, "192.0.2.7")
        assert read_progress(conn) == (Seen(ZONE, "2001:db8::7", 10, 1200.0),)


def test_a_catalog_members_inherited_secondary_keeps_its_progress_until_it_no_longer_serves(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    catalog = "catalog.invalid."
    with pg_cluster.connect(zone_dsn) as conn:
        create_catalog(conn, catalog, now=1000.0)
        add_secondary(conn, Secondary(catalog, "192.0.2.8", KEY_NAME, "hmac-sha256", SECRET))
        add_secondary(conn, Secondary(catalog, "192.0.2.9", KEY_NAME, "hmac-sha256", SECRET))
        add_member(conn, catalog, ZONE)
        conn.commit()
        # The member's secondaries are its catalog's: their progress is kept as a zone's
        # own is; an address that serves neither the member nor the catalog is skipped.
        assert save_progress(conn, [Seen(ZONE, "192.0.2.8", 5, 1000.0),
                                    Seen(ZONE, "192.0.2.9", 6, 1100.0),
                                    Seen(catalog, "192.0.2.8", 2, 1200.0),
                                    Seen(ZONE, "192.0.2.99", 1, 1300.0)]) == 3
        conn.commit()
        assert read_progress(conn) == (Seen(ZONE, "192.0.2.8", 5, 1000.0),
                                       Seen(ZONE, "192.0.2.9", 6, 1100.0),
                                       Seen(catalog, "192.0.2.8", 2, 1200.0))
        # The catalog's secondary removed: its progress on the catalog and the member goes.
        assert remove_secondary(conn, catalog, "192.0.2.9")
        assert read_progress(conn) == (Seen(ZONE, "192.0.2.8", 5, 1000.0),
                                       Seen(catalog, "192.0.2.8", 2, 1200.0))
        # The member gone from the catalog: no secondary serves it any more.
        assert remove_member(conn, catalog, ZONE)
        assert read_progress(conn) == (Seen(catalog, "192.0.2.8", 2, 1200.0),)
        # Listed on the zone itself, a secondary's progress stays when the catalog's goes.
        add_secondary(conn, listed_at("192.0.2.8"))
        add_member(conn, catalog, ZONE)
        save_progress(conn, [Seen(ZONE, "192.0.2.8", 7, 1400.0)])
        assert remove_secondary(conn, catalog, "192.0.2.8")
        assert read_progress(conn) == (Seen(ZONE, "192.0.2.8", 7, 1400.0),)


def versions(pg_cluster: PgCluster, dsn: str, count: int) -> None:
    """``count`` more versions of the zone, one TXT record each (one journal entry)."""
    for i in range(count):
        run_sql(pg_cluster, dsn, ("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                                  " VALUES (%s, %s, 'TXT', 60, '\"v\"')", (ZONE, f"t{i}.{ZONE}")))


def test_the_journal_keeps_what_the_slowest_listed_secondary_needs_up_to_its_bound(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    versions(pg_cluster, zone_dsn, 4)  # serials 1 -> 5, an entry each
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        add_secondary(conn, listed_at("192.0.2.7"))
        add_secondary(conn, listed_at("192.0.2.8"))
        save_progress(conn, [Seen(ZONE, "192.0.2.7", 3, 1000.0),
                             Seen(ZONE, "192.0.2.8", 5, 1000.0)])
        assert prune(conn, max_age=0) == 2  # 1 -> 2 and 2 -> 3: nobody needs them
        assert read_difference(conn, ZONE, 2, 5) is None
        assert read_difference(conn, ZONE, 3, 5) is not None  # the slow one's IXFR
        assert prune(conn, max_age=0) == 0
        # the records limit never yields (an entry: the SOA out and in, and its TXT)
        assert prune(conn, max_age=0, max_records=3) == 1
        assert read_difference(conn, ZONE, 3, 5) is None
        assert read_difference(conn, ZONE, 4, 5) is not None
        save_progress(conn, [Seen(ZONE, "192.0.2.7", 4, 2000.0)])
        assert prune(conn, max_age=0, hold_max_age=0) == 1  # past its own bound
        assert read_difference(conn, ZONE, 4, 5) is None


def axfr(port: int) -> int:
    """A whole-zone transfer from the node as the listed secondary; the serial it got."""
    zone = dns.zone.Zone(ZONE)
    query, _ = dns.xfr.make_query(zone)
    key = dns.tsig.Key(KEY_NAME, SECRET, "hmac-sha256")
    query.use_tsig({key.name: key}, key.name)
    dns.query.inbound_xfr("127.0.0.1", zone, query, port=port, timeout=BOUND, lifetime=BOUND)
    soa = zone.get_soa()
    return int(soa.serial)


def secondary_shown(status: dict[str, object]) -> list[tuple[str, int | None]]:
    shown = status.get("secondaries") or []
    assert isinstance(shown, list)
    return [(s["address"], s["serial"]) for s in shown]


def test_a_restarted_resident_shows_how_far_each_secondary_had_followed(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, listed_at("127.0.0.1"))
    state_dir = make_state_dir(resident_harness.workdir)
    first = resident_harness.start(state_dir, site_facts(zone_dsn))
    first.wait_ready()
    assert first.port is not None
    serial = axfr(first.port)
    assert secondary_shown(first.status()) == [("127.0.0.1", serial)]
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:  # written within SAVE_EVERY, under the fence
        with pg_cluster.connect(zone_dsn) as conn:
            if [(s.address, s.serial) for s in read_progress(conn)] == [("127.0.0.1", serial)]:
                break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the progress was not written: {first.stderr()}")
    first.stop()

    second = resident_harness.start(state_dir, site_facts(zone_dsn))
    second.wait_ready()
    assert secondary_shown(second.status()) == [("127.0.0.1", serial)]


@pytest.fixture
def own_netns() -> Iterator[str]:
    """A network namespace with its loopback up, so a test may listen on port 53."""
    require_root()
    name = f"vl-prog-{secrets.token_hex(3)}"
    run(["ip", "netns", "add", name])
    try:
        run(["ip", "-n", name, "link", "set", "lo", "up"])
        yield name
    finally:
        run(["ip", "netns", "del", name], check=False)


def notifies_within(listening: socket.socket, seconds: float) -> list[str]:
    """The zone of the first NOTIFY ``listening`` receives within ``seconds`` (none:
    ``[]``)."""
    zones: list[str] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        listening.settimeout(left)
        try:
            data = listening.recv(65535)
        except TimeoutError:
            break
        message = dns.message.from_wire(data, keyring=False)
        if message.opcode() == dns.opcode.NOTIFY:
            zones.append(message.question[0].name.to_text())
            break
    return zones


@pytest.mark.parametrize("stored_serial", [None, 0, 1])
def test_a_node_starting_notifies_the_secondaries_that_lack_its_version(
    resident_harness: Harness, pg_cluster: PgCluster, zone_dsn: str, own_netns: str,
    stored_serial: int | None,
) -> None:
    """The zone is at serial 1. Stored progress behind it (0) or none at all: NOTIFY at
    start; up to date (1): nothing is sent."""
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, listed_at("127.0.0.1"))
        if stored_serial is not None:
            save_progress(conn, [Seen(ZONE, "127.0.0.1", stored_serial, 1000.0)])
    with inside_netns(own_netns):
        listening = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with listening:
        listening.bind(("127.0.0.1", 53))
        resident = resident_harness.start(make_state_dir(resident_harness.workdir),
                                          site_facts(zone_dsn), netns=own_netns)
        resident.wait_ready()
        heard = notifies_within(listening, 3.0 if stored_serial == 1 else BOUND)
        if stored_serial == 1:
            assert heard == []
        else:
            assert heard == [ZONE], resident.stderr()

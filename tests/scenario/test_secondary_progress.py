"""How far each listed secondary has followed its zone outlives the resident: a real
resident writes what it saw to operator state, and the one started after it on the same
state directory shows the same serial in ``valis status`` before the secondary asks
again; the write keeps the newer sighting and skips a secondary no longer listed."""

from __future__ import annotations

import time

import dns.query
import dns.tsig
import dns.xfr
import dns.zone

from tests.scenario.pg import PgCluster
from tests.scenario.resident_harness import Harness, make_state_dir, site_facts
from valis_core.dns.transfer.secondary_progress import Seen
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

"""A zone signed with NSEC3 has its serial raised once per refresh window when nothing
else changed it, and again when its signing changes, so its secondaries transfer it
signed anew: the raise is a journaled change by the zone's serial policy, a zone changed
since then or denying compactly is left alone, and a node another instance superseded
raises nothing."""

from __future__ import annotations

import time

import pytest

from tests.scenario.operator_state_helpers import import_zone, run_sql
from tests.scenario.pg import PgCluster
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.fence import FencedOut, FenceState
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence
from valis_core.operator_state.zone_denial import set_denial
from valis_core.operator_state.zone_resign import raise_unchanged_serials

CHAINED = "chained.test."
COMPACT = "compact.test."
HOLDER = "node-a@loopback#0123456789abcdef"
STANDING = FenceState(generation=0, holder=HOLDER)


def signed(pg: PgCluster, dsn: str, zone: str, denial: str) -> None:
    run_sql(pg, dsn, (
        "INSERT INTO zone_signing (zone, algorithm, key_tag, denial, set_by)"
        " VALUES (%s, 13, 12345, %s, %s)", (zone, denial, HOLDER),
    ))


def serial(pg: PgCluster, dsn: str, zone: str) -> int:
    with pg.connect(dsn) as conn:
        (rdata,) = conn.execute(
            "SELECT rdata FROM records WHERE zone = %s AND rtype = 'SOA'", (zone,)
        ).fetchone() or ("",)
    return int(rdata.split()[2])


def test_an_unchanged_nsec3_zone_is_raised_once_per_window(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, CHAINED, serial=7)
    import_zone(pg_cluster, state_dsn, COMPACT, serial=7)
    signed(pg_cluster, state_dsn, CHAINED, "nsec3")
    signed(pg_cluster, state_dsn, COMPACT, "compact")
    with pg_cluster.connect(state_dsn) as conn:
        seed_instance_fence(conn, HOLDER)
    since = time.time() + 0.001  # a window that began after both imports
    time.sleep(0.01)
    with pg_cluster.connect(state_dsn, autocommit=True) as conn:
        raised = raise_unchanged_serials(conn, STANDING, [CHAINED, COMPACT], since=since,
                                         now=time.time())
        assert raised == [(CHAINED, 8)]
        journaled = conn.execute(
            "SELECT old_serial, new_serial FROM zone_journal WHERE zone = %s ORDER BY id DESC"
            " LIMIT 1", (CHAINED,)
        ).fetchone()
        assert journaled == (7, 8)
        # The raise is a change within the window: the window's next look leaves it.
        assert raise_unchanged_serials(conn, STANDING, [CHAINED, COMPACT], since=since,
                                       now=time.time()) == []
        # Its signing changes (a new salt, here): raised again within the window.
        set_denial(conn, STANDING, CHAINED, Nsec3Params(0, b"\x01"))
        assert raise_unchanged_serials(conn, STANDING, [CHAINED, COMPACT], since=since,
                                       now=time.time()) == [(CHAINED, 9)]
    assert (serial(pg_cluster, state_dsn, CHAINED), serial(pg_cluster, state_dsn, COMPACT)) \
        == (9, 7)


def test_a_superseded_node_raises_nothing(pg_cluster: PgCluster, state_dsn: str) -> None:
    import_zone(pg_cluster, state_dsn, CHAINED, serial=7)
    signed(pg_cluster, state_dsn, CHAINED, "nsec3")
    with pg_cluster.connect(state_dsn) as conn:
        seed_instance_fence(conn, HOLDER)
        claim_instance_fence(conn, 1, "node-a@elsewhere#fedcba9876543210")
    with pg_cluster.connect(state_dsn, autocommit=True) as conn, pytest.raises(FencedOut):
        raise_unchanged_serials(conn, STANDING, [CHAINED], since=time.time() + 60,
                                now=time.time())
    assert serial(pg_cluster, state_dsn, CHAINED) == 7

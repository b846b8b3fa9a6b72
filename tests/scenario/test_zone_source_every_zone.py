"""A node serving every zone of operator state (``VALIS_SERVED_ZONES=*``), against the
private cluster: it serves what the database holds, a zone imported later is served
without a site-facts edit and a zone deleted stops being served; it fails closed as a
list of names does (no zone at all, a zone it cannot serve); after an outage it catches
up on zones added and deleted meanwhile; the site facts take ``*`` only alone; and
condense proves every zone before the fence and reads back each one's SOA."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import dns.message
import pytest
import trio

from tests.dns_ask import ask
from tests.scenario.operator_state_helpers import (
    answer_texts,
    import_zone,
    run_sql,
    soa_zone,
    zone_source,
)
from tests.scenario.pg import PgCluster
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.wire.records import ZoneError
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.site_facts import (
    EVERY_ZONE,
    SiteFactsError,
    check_site_facts,
    served_zones,
    serves_every_zone,
)
from valis_core.operator_state.zones import delete_zone
from valis_core.operator_state.zones import served_zones as zones_served_by
from valis_core.ops.condense import Step, StepKind
from valis_core.ops.condense_host import LocalCondenseHost

WAIT = 10.0  # a bound on waiting for the source to catch up, never a timing assertion
ORG, NET, COM = "example.org.", "example.net.", "example.com."


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(WAIT):
        while not check():
            await trio.sleep(0.01)


def _delete(pg: PgCluster, dsn: str, zone: str) -> None:
    with pg.connect(dsn) as conn:
        assert delete_zone(conn, zone)


async def test_every_zone_is_served_as_operator_state_holds_it_added_and_deleted(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG, "www IN A 192.0.2.80\n")
    import_zone(pg_cluster, state_dsn, NET, "www IN A 198.51.100.80\n")
    source = zone_source(pg_cluster, state_dsn, [EVERY_ZONE])
    holder = IndexHolder(await source.load())
    assert holder.current.zones == (NET, ORG)
    assert set(source.zones) == {NET, ORG}
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        # A zone imported now is served, with no site-facts edit.
        await trio.to_thread.run_sync(
            lambda: import_zone(pg_cluster, state_dsn, COM, "www IN A 203.0.113.80\n")
        )
        await _until(lambda: COM in holder.current.zones)
        assert answer_texts(holder.current, "www.example.com.", "A") == {"203.0.113.80"}
        # A change to a zone is applied owner by owner, as with a list of names.
        run_sql(pg_cluster, state_dsn, ("UPDATE records SET rdata = '192.0.2.81' "
                                        "WHERE owner = 'www.example.org.'", ()))
        await _until(lambda: answer_texts(holder.current, "www.example.org.", "A")
                     == {"192.0.2.81"})
        # A zone deleted is no longer served; the others are.
        await trio.to_thread.run_sync(_delete, pg_cluster, state_dsn, NET)
        await _until(lambda: NET not in holder.current.zones)
        assert holder.current.zones == (COM, ORG)
        assert answer_texts(holder.current, "www.example.com.", "A") == {"203.0.113.80"}
        nursery.cancel_scope.cancel()
    assert set(source.zones) == {COM, ORG}
    assert source.stats.gone == set()
    assert source.stats.failed_reloads == 0
    assert source.stats.patched_zones >= 1


async def test_every_zone_fails_closed_on_no_zone_and_on_a_zone_it_cannot_serve(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    empty = zone_source(pg_cluster, state_dsn, [EVERY_ZONE])
    with pytest.raises(OperatorStateError, match="operator state holds no zone"):
        await empty.load()
    import_zone(pg_cluster, state_dsn, ORG, "www IN A 192.0.2.80\n")
    import_zone(pg_cluster, state_dsn, NET, "www IN A 198.51.100.80\n")
    run_sql(pg_cluster, state_dsn, (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) "
        "VALUES ('example.net.', 'www.example.net.', 'CNAME', 300, 'ns1.example.net.')", ()))
    source = zone_source(pg_cluster, state_dsn, [EVERY_ZONE])
    with pytest.raises(ZoneError, match=r"zone example\.net\. cannot be served: www"):
        await source.load()


class Gate:
    """A reconnect pause the test ends."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.opened = trio.Event()

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        await self.opened.wait()


async def test_every_zone_catches_up_on_zones_added_and_deleted_while_away(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    import_zone(pg_cluster, state_dsn, ORG, "www IN A 192.0.2.80\n")
    import_zone(pg_cluster, state_dsn, NET, "www IN A 198.51.100.80\n")
    gate = Gate()
    source = zone_source(pg_cluster, state_dsn, [EVERY_ZONE], sleep=gate.sleep)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        with pg_cluster.connect(state_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        await _until(lambda: len(gate.delays) >= 1)
        # While it is away (no notification reaches it): one zone added, one deleted.
        import_zone(pg_cluster, state_dsn, COM, "www IN A 203.0.113.80\n")
        _delete(pg_cluster, state_dsn, ORG)
        gate.opened.set()
        await _until(lambda: source.stats.following and holder.current.zones == (COM, NET))
        nursery.cancel_scope.cancel()
    assert answer_texts(holder.current, "www.example.com.", "A") == {"203.0.113.80"}
    assert set(source.zones) == {COM, NET}


def _facts(zones: str) -> dict[str, str]:
    return {
        "VALIS_NODE_NAME": "node-a",
        "VALIS_LOCATION": "loopback",
        "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
        "VALIS_SERVED_ZONES": zones,
    }


def test_the_site_facts_take_every_zone_only_alone(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    check_site_facts(_facts("*"))
    assert serves_every_zone(served_zones(_facts("*")))
    assert not serves_every_zone(served_zones(_facts("example.org.,example.net.")))
    for mixed in ("*,example.org.", "example.org.,*"):
        with pytest.raises(SiteFactsError, match=r"'\*' alone"):
            check_site_facts(_facts(mixed))
        with pytest.raises(SiteFactsError, match=r"'\*' alone"):
            zone_source(pg_cluster, state_dsn, mixed.split(","))
    # A node serving every zone is named as serving each (zone list, zone delete).
    import_zone(pg_cluster, state_dsn, ORG)
    import_zone(pg_cluster, state_dsn, NET)
    run_sql(pg_cluster, state_dsn, (
        "INSERT INTO site_facts (node, key, value) VALUES "
        "('node-a', 'VALIS_SERVED_ZONES', '*'), ('node-b', 'VALIS_SERVED_ZONES', %s)",
        (ORG,)))
    with pg_cluster.connect(state_dsn) as conn:
        assert zones_served_by(conn) == {ORG: ("node-a", "node-b"), NET: ("node-a",)}


def test_condense_proves_and_reads_back_every_zone_when_it_serves_every_zone(
    pg_cluster: PgCluster, state_dsn: str, tmp_path: Path
) -> None:
    import_zone(pg_cluster, state_dsn, ORG, "www IN A 192.0.2.80\n")
    import_zone(pg_cluster, state_dsn, NET, "www IN A 198.51.100.80\n")
    asked: list[str] = []

    def ask_soa(zone: str, address: tuple[str, int]) -> dns.message.Message:
        asked.append(zone)
        index = ZoneIndex.from_zone_text(soa_zone(zone), zone)
        return ask(index, zone, "SOA")

    def never(*_: object) -> object:
        raise AssertionError("not a step of this test")

    host = LocalCondenseHost(
        state_dir=tmp_path, run_account=(os.getuid(), os.getgid()),
        connect=lambda: pg_cluster.connect(state_dsn, autocommit=True),
        unit=never,  # type: ignore[arg-type]
        holder="node-a@loopback", dns_address=("127.0.0.1", 53), assess=lambda: None,
        ask_soa=ask_soa,
    )
    host.prove_zone_servable(Step(StepKind.PROVE_ZONE_SERVABLE, zone=EVERY_ZONE))
    host.read_back_apex_soa(Step(StepKind.READ_BACK_APEX_SOA, zone=EVERY_ZONE))
    assert sorted(asked) == [NET, ORG]
    # A zone that cannot be served is refused before the fence, as a named one is.
    run_sql(pg_cluster, state_dsn, (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) "
        "VALUES ('example.net.', 'www.example.net.', 'CNAME', 300, 'ns1.example.net.')", ()))
    with pytest.raises(ZoneError, match=r"zone example\.net\. cannot be served"):
        host.prove_zone_servable(Step(StepKind.PROVE_ZONE_SERVABLE, zone=EVERY_ZONE))

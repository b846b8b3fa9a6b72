"""Online signing on a node serving every zone of operator state (``VALIS_SERVED_ZONES=*``):
a zone the node gains while it runs is signed as soon as operator state says so, as a
zone it booted with is, and one it loses is signed no more."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

from tests.scenario.operator_state_helpers import import_zone, zone_source
from tests.scenario.pg import PgCluster, valis
from tests.scenario.signing_node import ZONE, node_state  # noqa: F401 (the fixture)
from valis_core.dns import wire
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.operator_state.site_facts import EVERY_ZONE
from valis_core.operator_state.zones import delete_zone
from valis_core.resident.signing import SigningFollower

WAIT = 15.0  # a bound on waiting for the poll to catch up, never a timing assertion
BOOTED = "example.org."


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(WAIT):
        while not check():
            await trio.sleep(0.02)


def _signs(holder: IndexHolder, zone: str) -> bool:
    return holder.signer is not None and wire.from_text(zone) in holder.signer.zones


async def test_a_zone_gained_while_running_is_signed_when_signed_and_dropped_when_lost(
    pg_cluster: PgCluster, state_dsn: str, node_state: Path  # noqa: F811
) -> None:
    import_zone(pg_cluster, state_dsn, BOOTED, "www IN A 192.0.2.80\n")
    source = zone_source(pg_cluster, state_dsn, [EVERY_ZONE])
    holder = IndexHolder(await source.load())
    signing = SigningFollower(
        state_dsn, node_state, source.zones, follows=lambda: source.zones,
        opens=lambda: pg_cluster.connect(state_dsn, autocommit=True),
    )
    try:
        await signing.load(holder)
        assert holder.signer is None
        async with trio.open_nursery() as nursery:
            await nursery.start(source.run, holder)
            await nursery.start(signing.follow, holder)
            await trio.to_thread.run_sync(lambda: import_zone(pg_cluster, state_dsn, ZONE))
            await _until(lambda: ZONE in holder.current.zones)
            status, _, err = await trio.to_thread.run_sync(lambda: valis(
                "zone", "sign", ZONE, "--algorithm", "15", "--state-dir", str(node_state)
            ))
            assert status == 0, err
            await _until(lambda: _signs(holder, ZONE))
            assert not _signs(holder, BOOTED)

            with pg_cluster.connect(state_dsn) as conn:
                assert delete_zone(conn, ZONE)
            await _until(lambda: ZONE not in holder.current.zones)
            await _until(lambda: not _signs(holder, ZONE))
            assert signing.served == (BOOTED,)
            nursery.cancel_scope.cancel()
    finally:
        signing.close()
        source.close()

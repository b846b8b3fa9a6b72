"""NOTIFY reads the listed secondaries only when a change may have someone to tell
(issue 27: a node taking 50 changes a second read the list and the fence for each).

The sender first asks the resident's reader for the list in memory when that list is
known to be the database's (``SecondaryReader.current``: read since the listening
session opened and since the last announcement it took, none waiting unread). A
change to a zone it lists no secondary for is then sent to no one without a read; a
change to a listed zone is read (and the fence with it) and sent as before; a
secondary added is told of its zone's next change once its announcement is heard.
Real PostgreSQL, a real UDP socket as the secondary.
"""

from __future__ import annotations

import socket

import trio

from tests.scenario.operator_state_helpers import import_zone, soa_zone
from tests.scenario.pg import PgCluster
from tests.scenario.transfer_wire import KEY_NAME, ZONE
from valis_core.dns.transfer import Listed
from valis_core.dns.transfer.notify_send import ChangeWatch, NotifySender
from valis_core.dns.wire import from_text
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.secondaries import Secondary, add_secondary
from valis_core.resident.secondaries import SecondaryReader

OTHER = "other.test."
BOUND = 30.0


def watched(zone: str, sender: NotifySender) -> ChangeWatch:
    holder = ChangeWatch(ZoneIndex.from_zone_text(soa_zone(zone), zone))
    holder.changed = sender.changed
    return holder


def next_version(holder: ChangeWatch, zone: str, serial: int) -> None:
    holder.swap(ZoneIndex.from_zone_text(soa_zone(zone, serial=serial), zone))


async def notified(listening: trio.socket.SocketType, zone: str) -> None:
    """Wait (bounded) for a NOTIFY whose question is ``zone``; the others are skipped."""
    name = from_text(zone).lower()
    with trio.fail_after(BOUND):
        while True:
            data = await listening.recv(65535)
            if data[12:12 + len(name)].lower() == name:
                return


async def test_a_change_no_secondary_lists_is_sent_to_no_one_without_a_read(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    import_zone(pg_cluster, zone_dsn, OTHER)
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, Secondary(ZONE, "127.0.0.1", KEY_NAME, "hmac-sha256", bytes(32)))
    reader = SecondaryReader(lambda: pg_cluster.connect(zone_dsn, autocommit=True),
                             refresh=3600.0)
    reads: list[tuple[Listed, ...]] = []

    async def counted() -> tuple[Listed, ...]:
        reads.append(await reader.listed_fenced())
        return reads[-1]

    try:
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listening:
            await listening.bind(("127.0.0.1", 0))
            sender = NotifySender("127.0.0.1", counted, port=listening.getsockname()[1],
                                  attempts=1, timeout=0.05, known=reader.current)
            listed, other = watched(ZONE, sender), watched(OTHER, sender)
            async with trio.open_nursery() as nursery:
                await nursery.start(reader.follow)  # started once it listens
                await nursery.start(sender.run)
                assert reader.current() is None  # nothing read since it listens
                with trio.fail_after(BOUND):
                    while reader.current() is None:
                        await reader.listed()
                        await trio.sleep(0.01)
                next_version(other, OTHER, 2)  # nobody lists it: no read, nothing sent
                next_version(listed, ZONE, 2)  # batches are taken in order
                await notified(listening, ZONE)
                assert len(reads) == 1
                with pg_cluster.connect(zone_dsn) as conn:
                    add_secondary(conn, Secondary(OTHER, "127.0.0.1", KEY_NAME,
                                                  "hmac-sha256", bytes(32)))
                with trio.fail_after(BOUND):  # its announcement heard, the list read again
                    while not any(s.zone == OTHER for s in reader.current() or ()):
                        await trio.sleep(0.01)
                next_version(other, OTHER, 3)
                await notified(listening, OTHER)
                assert len(reads) == 2
                assert {s.zone for s in reads[-1]} == {ZONE, OTHER}
                nursery.cancel_scope.cancel()
    finally:
        reader.close()

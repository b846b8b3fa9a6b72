"""Swaps under load never mix two snapshots (issue 29): two UDP workers sharing a port
answer a stream of queries from several clients while the holder swaps to a new zone
version every millisecond (1 kHz), each version with its own www address, CNAME target
and SOA serial, most of them patches of the last (the table moves them in place,
keeping the answers of the owners they left alone: ``Table.moved``), every tenth made
afresh (the zone dropped and given again); every response is byte for byte what
``answer`` gives for one version current between the query's sending and its response's
arrival (the one served when it was sent, or a later one) — never an older one, nor one
put together from two. The workers answer in C meanwhile (the zone beside the swapped
one stays in the table)."""

from __future__ import annotations

import random
import socket

import dns.message
import pytest
import trio

from tests.scenario.udp_workers import LIMIT, workers
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.serve import _udp_loop
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

pytestmark = pytest.mark.usefixtures("compiled")

SWAPS = 1000
"""Versions swapped in, one a millisecond (longer on a loaded machine: bounded by count)."""
CLIENTS = 8
"""Client sockets, each with one query outstanding at a time."""
MOST_LOST = 0.5
"""The share of queries a loaded machine may lose (UDP) before the test says so."""

QUESTIONS = (
    ("www.example.com.", "A"),          # the swapped zone: its answer changes each version
    ("alias.example.com.", "A"),        # a CNAME to a name of each version
    ("example.com.", "SOA"),
    ("nothere.example.com.", "A"),      # NXDOMAIN with each version's SOA
    ("www.example.com.", "MX"),         # NODATA with each version's SOA
    ("ns.example.com.", "A"),           # owners no patch touches: kept in the table
    ("stable.example.com.", "TXT"),
    ("www.example.org.", "A"),          # the zone beside: the same in every version
    ("nothere.example.org.", "A"),
)


def changing(serial: int) -> list[RecordRow]:
    """The owners each version replaces: the apex (its serial), www, the alias and the
    name it points to."""
    high, low = divmod(serial, 250)
    return [
        RecordRow("example.com.", "example.com.", "SOA", 3600,
                  f"ns.example.com. h.example.com. {serial} 2 3 4 300"),
        RecordRow("example.com.", "example.com.", "NS", 3600, "ns.example.com."),
        RecordRow("example.com.", "www.example.com.", "A", 300, f"10.{high}.{low}.1"),
        RecordRow("example.com.", "alias.example.com.", "CNAME", 300,
                  f"v{serial}.example.com."),
        RecordRow("example.com.", f"v{serial}.example.com.", "A", 300, f"10.{high}.{low}.2"),
    ]


STEADY = [
    RecordRow("example.com.", "ns.example.com.", "A", 3600, "192.0.2.53"),
    RecordRow("example.com.", "stable.example.com.", "TXT", 3600, '"the same in every version"'),
    RecordRow("example.org.", "example.org.", "SOA", 3600,
              "ns.example.org. h.example.org. 1 2 3 4 300"),
    RecordRow("example.org.", "example.org.", "NS", 3600, "ns.example.org."),
    RecordRow("example.org.", "www.example.org.", "A", 300, "192.0.2.80"),
]


def versions(count: int) -> list[ZoneIndex]:
    """``count`` versions: the first and every tenth made afresh, the others patches of
    the one before (as the zone source patches a zone)."""
    made = [ZoneIndex.from_records([*changing(1), *STEADY])]
    for serial in range(2, count + 1):
        if serial % 10 == 0:
            made.append(ZoneIndex.from_records([*changing(serial), *STEADY]))
            continue
        owners = ["example.com.", "www.example.com.", "alias.example.com.",
                  f"v{serial - 1}.example.com.", f"v{serial}.example.com."]
        made.append(made[-1].with_owners_replaced("example.com.", owners, changing(serial)))
    return made


@pytest.mark.parametrize("backlog", [None, 0], ids=["handed-over", "batch-back"])
async def test_swaps_at_a_kilohertz_under_load_never_mix_two_snapshots(
    backlog: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``batch-back``: a worker may hand nothing over, so every batch with a question for
    ``answer`` comes back to the trio thread whole (``Pump.pending``)."""
    if backlog is not None:
        monkeypatch.setattr(_udp_loop, "WORKER_BACKLOG", backlog)
    indexes = versions(SWAPS + 1)
    holder = IndexHolder(indexes[0])
    served = [0]  # the version served now: moved by the swapper, read by the clients
    seen: list[tuple[bytes, bytes, int, int]] = []  # query, response, sent at, received at
    lost = [0]
    swapping = trio.Event()
    done = trio.Event()

    async def swapper() -> None:
        await swapping.wait()
        for at in range(1, SWAPS + 1):
            holder.swap(indexes[at])
            served[0] = at
            await trio.sleep(0.001)
        done.set()

    async def client(address: tuple[str, int], seed: int) -> None:
        draw = random.Random(seed)
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            await sock.bind(("127.0.0.1", 0))
            for qid in range(1_000_000):  # bounded; ends with the swaps
                if done.is_set():
                    return
                name, rtype = draw.choice(QUESTIONS)
                query = dns.message.make_query(name, rtype, use_edns=draw.choice([None, 0]))
                query.id = qid & 0xFFFF
                wire = query.to_wire()
                sent = served[0]
                await sock.sendto(wire, address)
                with trio.move_on_after(LIMIT / 10):
                    while True:
                        response = await sock.recv(65535)
                        if response[:2] == wire[:2]:
                            seen.append((wire, response, sent, served[0]))
                            break
                    continue
                lost[0] += 1

    async with workers(holder, 2, shared=True) as running, trio.open_nursery() as nursery:
        nursery.start_soon(swapper)
        for seed in range(CLIENTS):
            nursery.start_soon(client, running.addresses[0], seed)
        swapping.set()
    oracles: dict[int, Snapshot] = {}
    for wire, response, sent, received in seen:
        candidates = []
        for at in range(sent, received + 1):
            oracle = oracles.setdefault(at, Snapshot(indexes[at]))
            candidates.append(answer(oracle, wire, transport=Transport.UDP))
        assert response in candidates, (
            f"a response from none of versions {sent + 1}..{received + 1}: "
            f"{dns.message.from_wire(response)}")
    assert len(seen) >= 200
    assert lost[0] <= MOST_LOST * (len(seen) + lost[0])
    assert sum(stats.udp_compiled for stats in running.stats) > 0

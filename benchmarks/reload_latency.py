"""Reload latency: from a committed record change to the new answer on the wire.

Stands up a private PostgreSQL cluster (``valis_core.operator_state.local_cluster``; as
root the server runs as ``postgres``, otherwise as you, and your account is mapped to
role ``valis``), imports ``--records`` A records spread over ``--zones`` zones, runs
``PgZoneSource`` feeding ``serve_udp`` on 127.0.0.1, and then, ``--changes`` times:
commits an UPDATE of one record's address (``--rows-per-change``: of that many records,
in one statement), and asks over UDP until the new address comes
back (one probe per millisecond). The latency is the time from the commit returning to
that answer arriving. "Source update" is the zone source's own time to apply a change
(read the changed owners and patch the zone's index, or re-read the zone whole), from
``ZoneSourceStats.last_load_seconds``; each run also prints (on stderr) how many zone
updates were owner-level patches and how many re-read the zone whole.

    .venv/bin/python benchmarks/reload_latency.py               # 100k in 1 and in 100 zones
    .venv/bin/python benchmarks/reload_latency.py --zones 1 --records 100000 --changes 20
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dns.message
import dns.rrset
import psycopg
import trio

from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import serve_udp
from valis_core.dns.wire.records import RecordRow
from valis_core.operator_state.local_cluster import LocalCluster
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zone_source import PgZoneSource
from valis_core.operator_state.zones import replace_zone

PROBE_TIMEOUT = 0.05
PROBE_INTERVAL = 0.001
"""Between probes: resolution of the measurement, without the probe loop itself
competing with the rebuild for the interpreter."""
CHANGE_TIMEOUT = 30.0


def zone_rows(zone: str, count: int) -> list[RecordRow]:
    soa = f"ns1.{zone} hostmaster.{zone} 1 7200 3600 1209600 300"
    rows = [
        RecordRow(zone, zone, "SOA", 3600, soa),
        RecordRow(zone, zone, "NS", 3600, f"ns1.{zone}"),
        RecordRow(zone, f"ns1.{zone}", "A", 3600, "192.0.2.53"),
    ]
    rows += [
        RecordRow(zone, f"h{i}.{zone}", "A", 300, f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
        for i in range(count - len(rows))
    ]
    return rows


def cluster_for_this_user(root: Path) -> LocalCluster:
    me = getpass.getuser()
    server = "postgres" if os.geteuid() == 0 else me
    cluster = LocalCluster(root=root, server_user=server)
    cluster.initialize({me: ["valis"]})
    cluster.start()
    cluster.ensure_role("valis")
    cluster.ensure_database("valis_state", owner="valis")
    return cluster


async def ask(sock: trio.socket.SocketType, name: str) -> set[str]:
    query = dns.message.make_query(name, "A")
    await sock.send(query.to_wire())
    with trio.move_on_after(PROBE_TIMEOUT):
        while True:
            data = await sock.recv(65535)
            response = dns.message.from_wire(data)
            if response.id == query.id:
                return {
                    rdata.to_text()
                    for rrset in response.answer
                    if isinstance(rrset, dns.rrset.RRset)
                    for rdata in rrset
                }
    return set()


def commit_change(conn: psycopg.Connection[Any], owners: list[str], address: str) -> float:
    with conn.transaction():
        conn.execute(
            "UPDATE records SET rdata = %s WHERE owner = ANY(%s) AND rtype = 'A'",
            (address, owners),
        )
    return time.perf_counter()


async def measure(
    dsn: str, zones: list[str], changes: int, rows_per_change: int = 1
) -> tuple[list[float], float, float]:
    source = PgZoneSource.from_dsn(dsn, zones)
    started = time.perf_counter()
    holder = IndexHolder(await source.load())
    load_seconds = time.perf_counter() - started
    latencies: list[float] = []
    reloads: list[float] = []
    server = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await server.bind(("127.0.0.1", 0))
    client = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await client.connect(server.getsockname())
    writer = psycopg.connect(dsn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_udp, server, holder)
            await nursery.start(source.run, holder)
            zone = zones[0]
            owner = f"h7.{zone}"
            owners = [f"h{7 + i}.{zone}" for i in range(rows_per_change)]
            for n in range(changes):
                address = f"203.0.113.{n % 250 + 1}"
                committed = await trio.to_thread.run_sync(commit_change, writer, owners, address)
                with trio.fail_after(CHANGE_TIMEOUT):
                    while address not in await ask(client, owner):
                        await trio.sleep(PROBE_INTERVAL)
                latencies.append(time.perf_counter() - committed)
                reloads.append(source.stats.last_load_seconds)
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        print(
            f"zones patched {source.stats.patched_zones}, rebuilt whole "
            f"{source.stats.rebuilt_zones}, failed {source.stats.failed_reloads}",
            file=sys.stderr,
        )
    finally:
        writer.close()
        server.close()
        client.close()
    return latencies, load_seconds, statistics.median(reloads)


def report(label: str, records: int, latencies: list[float], load: float, reload: float) -> str:
    ms = sorted(x * 1000 for x in latencies)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return (
        f"| {label} | {records} | {len(ms)} | {statistics.median(ms):.1f} | {p90:.1f} "
        f"| {ms[-1]:.1f} | {reload * 1000:.1f} | {load:.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--zones", type=int, action="append", help="repeatable; default 1, 100")
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument(
        "--rows-per-change",
        type=int,
        default=1,
        help="records each change updates in one statement; above 64 the triggers name the "
        "zone only and the source re-reads it whole",
    )
    args = parser.parse_args()
    layouts = args.zones or [1, 100]
    root = Path(tempfile.mkdtemp(prefix="valis-reload-bench-", dir="/tmp"))
    cluster = cluster_for_this_user(root)
    lines = [
        "| layout | records | changes | median ms | p90 ms | max ms | source update ms "
        "| full load s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    try:
        for count in layouts:
            database = f"bench_{count}"
            cluster.ensure_database(database, owner="valis")
            dsn = cluster.dsn("valis", database)
            names = [f"z{i}.bench.example." for i in range(count)]
            with psycopg.connect(dsn) as conn:
                migrate(conn)
                for name in names:
                    replace_zone(conn, zone_rows(name, args.records // count))
            latencies, load, reload = trio.run(
                measure, dsn, names, args.changes, args.rows_per_change
            )
            per_zone = args.records // count
            label = f"{count} zone(s) of {per_zone}"
            if args.rows_per_change > 1:
                label += f", {args.rows_per_change} rows per change"
            lines.append(report(label, per_zone * count, latencies, load, reload))
            print(lines[-1], file=sys.stderr)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reload latency: from a committed record change to the new answer on the wire, as a
curve over the zone's size and the node's layout.

Stands up a private PostgreSQL cluster (``valis_core.operator_state.local_cluster``; as
root the server runs as ``postgres``, otherwise as you, and your account is mapped to
role ``valis``; fsync off, a throwaway cluster) and measures each point of the curve:
``--sizes`` records in all (10^4, 10^5 and 10^6 by default) in each ``--layouts`` (one
zone; zones of 100 records; zones of 10). For a point it imports what the database does
not hold yet (a large zone by ``replace_zone``, one COPY in a transaction of its own;
small zones 100 to a transaction, ``add_zones``), runs
``PgZoneSource`` over the point's zones feeding ``serve_udp`` on 127.0.0.1, and then
commits ``--changes`` UPDATEs of one record's address to the first zone (each to another
owner and another address; ``--rows-per-change``: that many records in one statement),
and after each asks over UDP until the new address comes back, at most
``--point-seconds`` per point. The latency is the time from the commit returning (the
clock read at real-time priority, as root: on two busy cores a writer of ordinary
priority may run again well after the server committed, and a late read would hide part
of the latency) to that answer arriving. The committing and the asking are done by a
process of its own (``reload_latency_probe.py``), asking every ``--probe-interval``
seconds (0.2 ms), as an operator's writer and a resolver are; ``--probe inline`` commits
from a worker thread of the measured process and asks from its trio loop between its own
turns, about every 1.3 ms, as the figures before 2026-12-05 were measured: that writer
and client took turns with the server and the source for the interpreter, and saw an
answer up to a probe interval after it was there. "Source update" is the zone source's own time
to apply a change (read the changed owners and patch the zone's index, or re-read the
zone whole), from ``ZoneSourceStats.last_load_seconds``; each point also says how many
zone updates were owner-level patches and how many re-read a zone whole.

The figures go to a Markdown table (stdout), a JSON document (``--json``;
``reload_latency_report``) and, with ``--plot``, a PNG of p50 and p99 against the
records on a log axis, one pair of lines per layout (``reload_latency_plot.py``, drawn by
Debian's python3 with matplotlib: ``benchmarks/live`` installs it).

    .venv/bin/python benchmarks/reload_latency.py                 # the whole curve
    .venv/bin/python benchmarks/reload_latency.py --sizes 1e4,1e5 --layouts one,10 \\
        --changes 50
    .venv/bin/python benchmarks/reload_latency.py --from build/bench/reload_latency.json \\
        --peers build/bench/reload_latency_peers.json --plot docs/performance-reload-latency.png
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dns.message
import dns.rrset
import psycopg
import trio
from dns_qps import check_plotter, describe_environment  # beside this script
from dns_qps import plot as draw_plot
from reload_latency_probe import CHANGE_TIMEOUT, commit_change
from reload_latency_report import (
    DEFAULT_LAYOUTS,
    DEFAULT_SIZES,
    Measured,
    Point,
    parse_layouts,
    parse_sizes,
    points,
    table,
    to_document,
)

from valis_core.atomic import write_atomic
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import serve_udp
from valis_core.dns.wire.records import RecordRow
from valis_core.heap import RESIDENT_HEAP
from valis_core.operator_state.local_cluster import LocalCluster
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zone_source import PgZoneSource
from valis_core.operator_state.zones import replace_zone

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "build" / "bench" / "reload_latency.json"
PROBE_SCRIPT = Path(__file__).resolve().parent / "reload_latency_probe.py"
PROBE_TIMEOUT = 0.05
PROBE_INTERVAL = 0.001
"""Between probes: resolution of the measurement, without the probe loop itself
competing with the rebuild for the interpreter."""
BULK_ZONE_RECORDS = 1000
BULK_ZONES = 100
"""Zones of at most ``BULK_ZONE_RECORDS`` records are added this many to a transaction."""
OWNER_STEP = 7919
"""Each change moves to the owner this many hosts on (a prime: every host in turn)."""


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


def changed_owners(zone: str, hosts: int, change: int, rows: int) -> list[str]:
    """The owners change number ``change`` updates: ``rows`` hosts from one that moves
    by ``OWNER_STEP`` each change."""
    first = change * OWNER_STEP
    return [f"h{(first + i) % hosts}.{zone}" for i in range(min(rows, hosts))]


def changed_address(change: int) -> str:
    """An address no earlier change wrote (198.18.0.0/15, for the first 2**17)."""
    return f"198.{18 + (change >> 16 & 1)}.{change >> 8 & 255}.{change & 255}"


def cluster_for_this_user(root: Path) -> LocalCluster:
    me = getpass.getuser()
    server = "postgres" if os.geteuid() == 0 else me
    cluster = LocalCluster(root=root, server_user=server)
    cluster.initialize({me: ["valis"]}, durable=False)
    cluster.start()
    cluster.ensure_role("valis")
    cluster.ensure_database("valis_state", owner="valis")
    return cluster


def import_missing(dsn: str, point: Point) -> float:
    """Import the point's zones the database does not hold; the seconds it took. A zone
    of more than ``BULK_ZONE_RECORDS`` records goes in by ``replace_zone``, smaller ones
    ``BULK_ZONES`` to a transaction (``add_zones``)."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        held = {name for (name,) in conn.execute("SELECT name FROM zones")}
        missing = [name for name in point.zone_names() if name not in held]
        if point.per_zone > BULK_ZONE_RECORDS:
            for name in missing:
                replace_zone(conn, zone_rows(name, point.per_zone))
            return time.perf_counter() - started
        for first in range(0, len(missing), BULK_ZONES):
            add_zones(conn, missing[first:first + BULK_ZONES], point.per_zone)
            done = min(first + BULK_ZONES, len(missing))
            if done % 5000 == 0:
                print(f"  imported {done:,} of {len(missing):,} zones", file=sys.stderr,
                      flush=True)
    return time.perf_counter() - started


def add_zones(conn: psycopg.Connection[Any], names: Sequence[str], per_zone: int) -> None:
    """Add new zones of ``per_zone`` records (``zone_rows``) in one transaction: one COPY
    of their names, one of their records. The triggers run as for any writer (the
    journal, the change notes); a transaction of many small new zones only spreads their
    per-transaction cost (measured at 10 records a zone: 2.9 ms a zone one to a
    transaction, 0.9 ms at 100 to a transaction, 2.4 ms at 1 000, since the triggers go
    over a statement's rows once per zone it holds)."""
    with conn.transaction(), conn.cursor() as cur:
        with cur.copy("COPY zones (name) FROM STDIN") as copy:
            for name in names:
                copy.write_row((name,))
        with cur.copy("COPY records (zone, owner, rtype, ttl, rdata) FROM STDIN") as copy:
            for name in names:
                for row in zone_rows(name, per_zone):
                    copy.write_row((row.zone, row.owner, row.rtype, row.ttl, row.rdata))


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


class Prober:
    """The writer and client in a process of its own (``reload_latency_probe.py``):
    ``change(address, zone, owners)`` commits a change and waits until it is answered; when it
    began, when it was committed and when answered (seconds on ``time.monotonic``'s
    clock)."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self._held = b""

    @classmethod
    async def start(cls, server: tuple[str, int], interval: float, dsn: str) -> Prober:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(PROBE_SCRIPT), server[0], str(server[1]), str(interval),
             dsn],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        prober = cls(process)
        if await prober._line() != b"ready":
            raise RuntimeError("reload_latency: the probe process did not start")
        return prober

    async def change(self, address: str, zone: str,
                     owners: list[str]) -> tuple[float, float, float]:
        assert self._process.stdin is not None
        await self._process.stdin.send_all(" ".join([address, zone, *owners]).encode() + b"\n")
        line = await self._line()
        if line == b"timeout":
            raise TimeoutError(f"reload_latency: no new answer within {CHANGE_TIMEOUT}s")
        began, committed, answered = line.split()
        return int(began) / 1e9, int(committed) / 1e9, int(answered) / 1e9

    async def _line(self) -> bytes:
        assert self._process.stdout is not None
        while b"\n" not in self._held:
            data = await self._process.stdout.receive_some()
            if not data:
                raise RuntimeError("reload_latency: the probe process ended")
            self._held += data
        line, self._held = self._held.split(b"\n", 1)
        return line

    async def aclose(self) -> None:
        self._process.kill()
        await self._process.wait()


async def measure(
    dsn: str, point: Point, args: argparse.Namespace, import_seconds: float
) -> Measured:
    zones = point.zone_names()
    source = PgZoneSource.from_dsn(dsn, zones, heap=RESIDENT_HEAP)  # as the resident's
    started = time.perf_counter()
    holder = IndexHolder(await source.load())
    load_seconds = time.perf_counter() - started
    latencies: list[float] = []
    updates: list[float] = []
    commits: list[float] = []
    server = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await server.bind(("127.0.0.1", 0))
    client = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await client.connect(server.getsockname())
    writer = psycopg.connect(dsn)
    hosts = point.per_zone - 3
    prober = None
    if args.probe == "process":
        prober = await Prober.start(server.getsockname(), args.probe_interval, dsn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_udp, server, holder)
            await nursery.start(source.run, holder)
            deadline = time.monotonic() + args.point_seconds
            for n in range(args.changes):
                if time.monotonic() > deadline:
                    break
                owners = changed_owners(zones[0], hosts, n, args.rows_per_change)
                address = changed_address(n)
                if prober is not None:
                    began, committed, answered = await prober.change(address, zones[0], owners)
                else:
                    began = time.monotonic()
                    committed = await trio.to_thread.run_sync(
                        commit_change, writer, zones[0], owners, address
                    )
                    with trio.fail_after(CHANGE_TIMEOUT):
                        while address not in await ask(client, owners[0]):
                            await trio.sleep(PROBE_INTERVAL)
                    answered = time.monotonic()
                latencies.append(answered - committed)
                commits.append(committed - began)
                updates.append(source.stats.last_load_seconds)
                await trio.sleep(args.gap)
            nursery.cancel_scope.cancel()
    finally:
        if prober is not None:
            with trio.CancelScope(shield=True):
                await prober.aclose()
        writer.close()
        server.close()
        client.close()
        source.close()
    return Measured(point, tuple(latencies), tuple(updates), load_seconds, import_seconds,
                    source.stats.patched_zones, source.stats.rebuilt_zones,
                    source.stats.failed_reloads, tuple(commits))


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    out.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES,
                     help="comma-separated records in all per point (default 1e4,1e5,1e6)")
    out.add_argument("--layouts", type=parse_layouts, default=DEFAULT_LAYOUTS,
                     help="comma-separated: 'one' (one zone) or records per zone "
                     "(default one,100,10)")
    out.add_argument("--changes", type=int, default=200,
                     help="changes per point (default 200: enough for a p99)")
    out.add_argument("--point-seconds", type=float, default=120.0,
                     help="at most this long changing per point (default 120)")
    out.add_argument("--gap", type=float, default=0.02,
                     help="seconds between one change answered and the next commit")
    out.add_argument("--rows-per-change", type=int, default=1,
                     help="records each change updates in one statement; above 64 the "
                     "triggers name the zone only and the source re-reads it whole")
    out.add_argument("--probe", choices=("process", "inline"), default="process",
                     help="commit and ask from a process of its own, every "
                     "--probe-interval seconds (default), or from the measured process "
                     "itself, every millisecond or so (the figures before 2026-12-05)")
    out.add_argument("--probe-interval", type=float, default=0.0002,
                     help="seconds between two asks of the probe process (default 0.0002)")
    out.add_argument("--json", type=Path, default=DEFAULT_JSON,
                     help="where the results go (default build/bench/reload_latency.json)")
    out.add_argument("--plot", type=Path, help="also draw the curve to this PNG "
                     "(docs/performance-reload-latency.png for the docs)")
    out.add_argument("--from", dest="source", type=Path, metavar="JSON",
                     help="measure nothing: print the table (and plot) of a results document")
    out.add_argument("--peers", type=Path, metavar="JSON",
                     help="with --plot: also draw Knot's and NSD's points from this document "
                     "of reload_latency_peers.py (benchmarks/live peers)")
    return out


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    if args.source is not None:
        document = json.loads(args.source.read_text())
        print(table(document), end="")
        if args.plot is not None:
            plot(args.source, args.plot, args.peers)
        return 0
    if args.changes < 1 or args.rows_per_change < 1:
        parser().error("--changes and --rows-per-change are at least 1")
    if args.plot is not None:
        check_plotter()
    curve = points(args.sizes, args.layouts)
    if not curve:
        parser().error("no point: every size is smaller than one zone of its layout")
    environment = describe_environment()
    root = Path(tempfile.mkdtemp(prefix="valis-reload-bench-", dir="/tmp"))
    cluster = cluster_for_this_user(root)
    measured: list[Measured] = []
    try:
        dsn = cluster.dsn("valis", "valis_state")
        with psycopg.connect(dsn) as conn:
            migrate(conn)
        for point in curve:
            print(f"{point.label}: importing ...", file=sys.stderr, flush=True)
            imported = import_missing(dsn, point)
            measured.append(trio.run(measure, dsn, point, args, imported))
            done = measured[-1]
            print(f"{point.label}: {len(done.latencies)} changes; zones patched "
                  f"{done.patched}, rebuilt whole {done.rebuilt}, failed {done.failed}; "
                  f"import {imported:.1f}s, full load {done.full_load_seconds:.2f}s",
                  file=sys.stderr, flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    environment["load_average_after"] = list(os.getloadavg())
    settings = {"sizes": list(args.sizes), "layouts": list(args.layouts),
                "changes": args.changes, "point_seconds": args.point_seconds,
                "gap": args.gap, "rows_per_change": args.rows_per_change,
                "probe": args.probe, "probe_interval": args.probe_interval}
    document = to_document(measured, args.layouts, settings, environment)
    print(table(document), end="")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.json, (json.dumps(document, indent=1) + "\n").encode())
    print(f"\nresults: {args.json}")
    if args.plot is not None:
        plot(args.json, args.plot, args.peers)
    return 0


def plot(source: Path, out: Path, peers: Path | None = None) -> None:
    """Draw ``source``'s curve, with the points of the peers' document beside it."""
    if peers is None:
        draw_plot(source, out, drawer="reload_latency_plot.py")
        return
    document = json.loads(source.read_text())
    document["peers"] = json.loads(peers.read_text())["points"]
    with tempfile.TemporaryDirectory(prefix="valis-reload-plot-") as scratch:
        both = Path(scratch) / "both.json"
        both.write_text(json.dumps(document))
        draw_plot(both, out, drawer="reload_latency_plot.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

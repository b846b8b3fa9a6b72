"""Where the resident's CPU per change goes (issue 27): the zone source following
PostgreSQL and the compiled table moved and taught, in one process.

The node of ``benchmarks/live rate`` (``bench.example.`` and 99 small zones) is imported
into a private cluster; a ``PgZoneSource`` follows it into an ``IndexHolder`` on the trio
thread, which answers ``--per-change`` queries of the normal mix every 1/``--rate`` s as
the compiled UDP loop answers them (``Table.ask``, else ``answer`` and
``fastpath.learn``), while another process commits ``--changes`` single-record
``UPDATE``s at ``--rate`` a second (as ``live rate`` does) to the zone queried or to
another zone. Printed for each phase: the questions Python answered a change (what the
table had to learn again) and the trio thread's CPU a change beyond what its queries cost
without changes (patch, swap, table move, relearning; not the UDP syscalls, not the
worker threads); ``--kinds`` counts the Python answers by kind, ``--profile`` prints
cProfile's top functions. Run as root from the repository root:

    .venv/bin/python benchmarks/change_profile.py [--phase queried] [--kinds] [--profile]

Figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.message
import dns.rdatatype
import psycopg
import trio
from dns_qps_live import OTHER_ZONES, other_zone, other_zone_text
from dns_qps_queries import ZONE, generate_zone, mix_queries
from reload_latency import cluster_for_this_user

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from valis_core.dns import parse_zone_text  # noqa: E402
from valis_core.dns.answer import Transport, answer, fastpath  # noqa: E402
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot  # noqa: E402
from valis_core.heap import RESIDENT_HEAP  # noqa: E402
from valis_core.operator_state.schema import migrate  # noqa: E402
from valis_core.operator_state.zone_source import PgZoneSource  # noqa: E402
from valis_core.operator_state.zones import replace_zone  # noqa: E402

NAMES = 10_000
WRITER = """
import sys, time, psycopg
from dns_qps_live import change_target
dsn, phase, names, changes, rate = sys.argv[1:]
with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("SET synchronous_commit = off")  # a commit never waits for the disk
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.monotonic()
    for n in range(int(changes)):
        time.sleep(max(0.0, began + n / float(rate) - time.monotonic()))
        zone, owner, address = change_target(phase, int(names), n + 1)
        conn.execute("UPDATE records SET rdata = %s WHERE zone = %s AND owner = %s"
                     " AND rtype = 'A'", (address, zone, owner))
"""


async def run(dsn: str, phase: str, args: argparse.Namespace,
              queries: list[bytes]) -> tuple[float, int, int, int]:
    """The trio thread's CPU over the phase, the queries Python answered, those asked,
    and the changes applied (patches)."""
    source = PgZoneSource.from_dsn(dsn, [ZONE, *(other_zone(i) for i in range(OTHER_ZONES))],
                                   heap=RESIDENT_HEAP)
    holder = IndexHolder(await source.load())
    served: list[Snapshot | None] = [None]
    table: list[fastpath.Table | None] = [None]
    missed = [0]
    kinds: dict[str, int] = {}

    def ask(query: bytes) -> None:
        snapshot = holder.snapshot
        if snapshot is not served[0]:
            served[0], table[0] = snapshot, fastpath.shared_table(snapshot)
        held = table[0]
        key = wanted = None
        if held is not None:
            fast, key, wanted = held.ask(query)
            if fast is not None:
                return
        missed[0] += 1
        if args.kinds:
            question = dns.message.from_wire(query).question[0]
            name = question.name.to_text()
            kind = ("apex " + dns.rdatatype.to_text(question.rdtype) if name == ZONE
                    else name.rstrip("0123456789." + ZONE.rstrip(".")).rstrip("0123456789")
                    + " " + dns.rdatatype.to_text(question.rdtype))
            kinds[kind] = kinds.get(kind, 0) + 1
        answer(snapshot, query, transport=Transport.UDP)
        if held is not None and (key is not None or wanted is not None):
            fastpath.learn(held, snapshot, key, wanted)

    for query in queries:
        ask(query)
    profile = cProfile.Profile() if args.profile else None
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        writer = None
        if phase != "none":
            writer = subprocess.Popen([sys.executable, "-c", WRITER, dsn, phase, str(NAMES),
                                       str(args.changes), str(args.rate)],
                                      cwd=Path(__file__).parent, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE)
            assert writer.stdout is not None
            assert writer.stdin is not None
            await trio.to_thread.run_sync(writer.stdout.readline)
            writer.stdin.write(b"go\n")
            writer.stdin.flush()
        started = time.thread_time()
        missed[0] = 0
        kinds.clear()
        if profile is not None:
            profile.enable()
        began = trio.current_time()  # trio's clock: sleep_until takes no other
        at = asked = 0
        patched = source.stats.patched_zones
        for tick in range(args.changes):  # the same length of time in every phase
            await trio.sleep_until(began + tick / args.rate)
            for query in queries[at:at + args.per_change]:
                ask(query)
            asked += len(queries[at:at + args.per_change])
            at = (at + args.per_change) % len(queries)
        await trio.sleep_until(began + args.changes / args.rate)
        if profile is not None:
            profile.disable()
        cpu = time.thread_time() - started
        patched = source.stats.patched_zones - patched
        if writer is not None:
            writer.terminate()
            await trio.to_thread.run_sync(writer.wait)
        nursery.cancel_scope.cancel()
    if kinds:
        print(f"{phase}: misses by kind: {sorted(kinds.items(), key=lambda kv: -kv[1])}",
              file=sys.stderr)
    if profile is not None:
        stats = pstats.Stats(profile).sort_stats("tottime")
        stats.print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    return cpu, missed[0], asked, patched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", action="append", choices=("none", "other", "queried"))
    parser.add_argument("--changes", type=int, default=200, help="changes a phase")
    parser.add_argument("--rate", type=float, default=50.0, help="changes a second")
    parser.add_argument("--per-change", type=int, default=3_000,
                        help="queries answered between two changes (150 000 q/s at 50/s)")
    parser.add_argument("--profile", action="store_true",
                        help="print cProfile's top functions (by own and by total time)")
    parser.add_argument("--kinds", action="store_true", help="count the misses by kind")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    zones = {ZONE: generate_zone(NAMES),
             **{other_zone(i): other_zone_text(other_zone(i)) for i in range(OTHER_ZONES)}}
    queries = [dns.message.make_query(*line.split()[:2]).to_wire()
               for line in mix_queries("normal", NAMES, 20_000).splitlines()]
    root = Path(tempfile.mkdtemp(prefix="valis-change-profile-", dir="/tmp"))
    cluster = cluster_for_this_user(root)
    try:
        dsn = cluster.dsn("valis", "valis_state")
        with psycopg.connect(dsn) as conn:
            migrate(conn)
            for origin, text in zones.items():
                replace_zone(conn, parse_zone_text(text, origin))
        results = {}
        for phase in args.phase or ["none", "other", "queried"]:
            results[phase] = trio.run(run, dsn, phase, args, queries)
        base = results.get("none")
        for phase, (cpu, missed, asked, patched) in results.items():
            line = (f"{phase:8} {asked:,} queries ({missed:,} answered by Python), trio "
                    f"thread {cpu:.2f} s CPU, {cpu / asked * 1e6:.2f} us a query")
            if phase != "none" and patched:
                line += (f"; {patched} changes applied, {missed / patched:.1f} Python answers "
                         "a change")
                if base is not None:
                    extra = (cpu - asked * base[0] / base[2]) / patched
                    line += f", {extra * 1e3:.3f} ms CPU a change beyond the queries'"
            print(line)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

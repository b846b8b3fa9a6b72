"""The answer path's CPU per change, in one process with no sockets (issue 27).

The node of ``benchmarks/live rate`` (``bench.example.`` of ``--names`` hosts, the zone
the normal mix asks, and a small zone beside it) answers the normal mix as the compiled
UDP loop does (``Table.ask``, else ``answer`` and ``fastpath.learn``), with a change
every ``--per-change`` queries: none, one to the other zone, or one to the zone queried
(a host's address and the apex's SOA serial replaced, as the zone source patches
them). Each phase runs ``--rounds`` times after two unmeasured passes over the mix; the
fastest round of each phase is kept (this process's CPU time: steadier than wall time
on a machine doing other work), and a phase's extra CPU over the phase without changes
is divided by its changes. The patch and the swap are in it; the zone source's read
from PostgreSQL, NOTIFY and the logging are not (``benchmarks/live rate`` has them).
Run from the repository root:

    .venv/bin/python benchmarks/change_churn.py [--per-change N] [--queries N]

Figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import time

import dns.message
from dns_qps_queries import ZONE, generate_zone, mix_queries  # beside this script

from valis_core.dns import parse_zone_text
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

OTHER = "z0.other.example."
OTHER_TEXT = (f"$ORIGIN {OTHER}\n$TTL 3600\n@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n"
              "@ IN NS ns1\nns1 IN A 192.0.2.1\n"
              + "".join(f"h{i} IN A 192.0.2.{i + 10}\n" for i in range(8)))
OWNER_STEP = 7919
PHASES = ("none", "other", "queried")


class Node:
    """A holder serving the two zones, its table, and the changes made to it."""

    def __init__(self, rows: list[RecordRow], names: int) -> None:
        self.holder = IndexHolder(ZoneIndex.from_records(rows))
        self.apex = {zone: [row for row in rows if row.zone == zone and row.owner == zone]
                     for zone in (ZONE, OTHER)}
        self.names = names
        self.made = 0
        self.served: Snapshot | None = None
        self.table: fastpath.Table | None = None

    def ask(self, query: bytes) -> None:
        snapshot = self.holder.snapshot
        if snapshot is not self.served:
            self.served, self.table = snapshot, fastpath.shared_table(snapshot)
        table = self.table
        if table is not None:
            fast, key, wanted = table.ask(query)
            if fast is not None:
                return
        answer(snapshot, query, transport=Transport.UDP)
        if table is not None and (key is not None or wanted is not None):
            fastpath.learn(table, snapshot, key, wanted)

    def change(self, phase: str) -> None:
        self.made += 1
        n = self.made
        zone = ZONE if phase == "queried" else OTHER
        owner = (f"host{n * OWNER_STEP % self.names + 1}.{ZONE}" if phase == "queried"
                 else f"h{n * OWNER_STEP % 8}.{OTHER}")
        apex = [row if row.rtype != "SOA" else RecordRow(
            row.zone, row.owner, "SOA", row.ttl,
            " ".join([*row.rdata.split()[:2], str(n + 1), *row.rdata.split()[3:]]))
            for row in self.apex[zone]]
        new = [RecordRow(zone, owner, "A", 300, f"198.18.{n >> 8 & 255}.{n & 255}"), *apex]
        self.holder.swap(self.holder.current.with_owners_replaced(zone, [owner, zone], new))


def one_round(rows: list[RecordRow], queries: list[bytes], phase: str,
              args: argparse.Namespace) -> float:
    """CPU seconds to answer ``args.total`` queries of the mix in ``phase``."""
    node = Node(rows, args.names)
    for _ in range(2):
        for query in queries:
            node.ask(query)
    start = time.process_time()
    done = 0
    while done < args.total:
        at = done % len(queries)
        for query in queries[at:at + args.per_change]:
            node.ask(query)
        done += args.per_change
        if phase != "none":
            node.change(phase)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=10_000, help="hosts in the zone queried")
    parser.add_argument("--queries", type=int, default=100_000, help="lines of the mix")
    parser.add_argument("--total", type=int, default=300_000, help="queries per round")
    parser.add_argument("--per-change", type=int, default=3_000,
                        help="queries between two changes (150 000 q/s at 50 changes/s)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not 0 < args.per_change <= args.queries:
        raise SystemExit("--per-change is above 0 and at most --queries")
    rows = [*parse_zone_text(generate_zone(args.names), ZONE), *parse_zone_text(OTHER_TEXT, OTHER)]
    queries = [dns.message.make_query(*line.split()[:2]).to_wire()
               for line in mix_queries("normal", args.names, args.queries).splitlines()]
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for phase in PHASES:
            best[phase] = min(best.get(phase, float("inf")), one_round(rows, queries, phase, args))
    changes = args.total // args.per_change
    print(f"normal mix, {args.total:,} queries a round, a change every {args.per_change:,} "
          f"(fastest of {args.rounds} rounds)")
    for phase in PHASES:
        extra = (best[phase] - best["none"]) / changes * 1e3 if phase != "none" else 0.0
        print(f"{phase:8} {best[phase] / args.total * 1e6:6.3f} us a query; "
              f"{extra:6.3f} ms more a change")


if __name__ == "__main__":
    main()

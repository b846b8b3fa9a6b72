"""From a zone added to a catalog to every catalog consumer answering it: the catalog's
NOTIFY and IXFR, the consumer's own configuration of the member, the member's AXFR.

Stands up what ``tests/scenario/test_zone_catalog_consumers.py`` runs: a private
PostgreSQL cluster, a real resident as the ``valis`` account in one network namespace
serving a catalog, and Knot 3.2 or BIND 9.18 (Debian's) consuming it in another
(``tests/scenario/catalog_consumers.py``). Each round imports a new zone and adds it to
the catalog in one transaction's worth of operator work (``add_member``), then asks the
consumer for a name of the new zone over UDP from its namespace every 5 ms until it
answers (at most 30 s). Reported per consumer: the seconds from the catalog's commit
returning to the consumer's first answer (min, median, p99 by rank, max). Needs root.
Every loop is bounded in count and time. Figures for docs/catalog.md, not a test.

    .venv/bin/python benchmarks/catalog_follow.py                  # both, 10 rounds each
    .venv/bin/python benchmarks/catalog_follow.py --consumer knot --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.catalog_consumers import CATALOG, CONSUMERS, answers
from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import PgCluster, private_cluster
from tests.scenario.resident_harness import site_facts
from tests.scenario.transfer_wire import KEY_NAME, SECONDARY_IP, Wire, node_and_secondary

from valis_core.operator_state.catalogs import add_member, create_catalog
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.secondaries import Secondary, add_secondary

BOUND = 30.0
POLL = 0.005
SECRET = bytes(range(1, 33))


def wait_answer(wire: Wire, name: str) -> float:
    started = time.monotonic()
    for _ in range(int(BOUND / POLL)):
        if answers(wire, name):
            return time.monotonic() - started
        if time.monotonic() - started > BOUND:
            break
        time.sleep(POLL)
    raise SystemExit(f"the consumer did not answer {name} within {BOUND:.0f}s")


def run_consumer(pg: PgCluster, consumer: str, rounds: int) -> list[float]:
    conf, command, _log, _serial = CONSUMERS[consumer]
    dsn = pg.new_database("catalog")
    with pg.connect(dsn) as conn:
        migrate(conn)
        create_catalog(conn, CATALOG, now=time.time())
        add_secondary(conn, Secondary(CATALOG, SECONDARY_IP, KEY_NAME, "hmac-sha256", SECRET))
    with node_and_secondary(site_facts(dsn, zones="*"), conf, command, SECRET,
                            consumer) as (wire, _node):
        seconds = []
        for i in range(rounds + 1):
            zone = f"m{i}.test."
            import_zone(pg, dsn, zone, extra=f"www IN A 192.0.2.{i % 250 + 1}\n")
            with pg.connect(dsn) as conn:
                add_member(conn, CATALOG, zone)
            took = wait_answer(wire, f"www.{zone}")  # from the commit's return
            if i:  # the first round waits for the consumer's own start as well
                seconds.append(took)
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumer", choices=[*sorted(CONSUMERS), "both"], default="both")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    consumers = sorted(CONSUMERS) if args.consumer == "both" else [args.consumer]
    with private_cluster("postgres") as pg:
        for consumer in consumers:
            seconds = sorted(run_consumer(pg, consumer, args.rounds))
            p99 = seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))]
            print(f"{consumer}: a zone added to the catalog, answered by the consumer: min "
                  f"{seconds[0]:.3f}s median {statistics.median(seconds):.3f}s p99 {p99:.3f}s "
                  f"max {seconds[-1]:.3f}s ({len(seconds)} zones)")


if __name__ == "__main__":
    main()

"""Re-importing a large zone that exists: the import with one change, after many.

Stands up a private PostgreSQL cluster (the scenario tests'
``tests.scenario.pg.private_cluster``), imports a zone of ``--records`` A records
(``benchmarks/zone_rows``), re-imports it ``--prior`` times with one record changed each
time, then times ``--rounds`` more such re-imports. Two writers are timed:

- ``import``: ``valis_core.operator_state.zones.import_zone`` from parsed rows, what
  ``valis zone import`` does after parsing: read the stored zone, diff, write the changed
  rows, seal the journal entry, commit;
- ``rewrite``: ``replace_zone``, a DELETE of every row then a COPY of every row in one
  transaction (an operator's own bulk SQL does the same): the journal trigger nets the
  whole zone away to the one change, the trigger's worst case.

Each run prints its wall time and its CPU time (this process's and its PostgreSQL
server process's, added), with the load average: on a shared machine the wall time is
mostly the wait for a core, the CPU time the work itself.

``--nested-loops`` turns hash and merge joins off for the run account, as statistics that
mislead the planner would: the journal's plans must not depend on them (migration 0011).
The journal entries are checked to hold exactly the one change each.

Needs root (a private cluster, the run account). Every loop is bounded in count.

    .venv/bin/python benchmarks/zone_reimport.py                    # 100 000 records
    .venv/bin/python benchmarks/zone_reimport.py --records 20000 --nested-loops
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import attrs
import psycopg
from tests.scenario.pg import private_cluster
from zone_rows import ZONE, rows

from valis_core.dns.wire.records import RecordRow
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zones import import_zone, replace_zone


def version(count: int, changed: int, serial: int) -> list[RecordRow]:
    """The zone at ``serial`` with owners ``host0`` .. ``host{changed - 1}`` moved into
    203.0.113/24: each version changes one record (and the SOA) from the one before."""
    out = []
    for i, row in enumerate(rows(count)):
        if row.rtype == "SOA":
            out.append(RecordRow(ZONE, row.owner, "SOA", row.ttl,
                                 row.rdata.replace(" 1 7200 ", f" {serial} 7200 ")))
        elif i - 3 < changed and row.owner.startswith("host"):
            out.append(RecordRow(ZONE, row.owner, "A", row.ttl,
                                 f"203.0.113.{(i - 3) % 250 + 1}"))
        else:
            out.append(row)
    return out


def cpu_seconds(conn: psycopg.Connection[Any]) -> float:
    """This process's CPU time and that of ``conn``'s server process, added: the work
    done, whatever else the machine is running."""
    fields = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return time.process_time() + server


def journal_sizes(conn: psycopg.Connection[Any]) -> list[tuple[int, int]]:
    """Each sealed entry's removed and added record counts, oldest first."""
    return [
        (int(removed), int(added))
        for removed, added in conn.execute(
            "SELECT count(*) FILTER (WHERE NOT r.added), count(*) FILTER (WHERE r.added)"
            " FROM zone_journal j JOIN zone_journal_records r ON r.entry = j.id"
            " WHERE j.zone = %s GROUP BY j.id ORDER BY j.id",
            (ZONE,),
        )
    ]


@attrs.frozen
class Runs:
    """How many re-imports: ``prior`` untimed, then ``rounds`` timed."""

    count: int
    prior: int
    rounds: int


def run(
    label: str,
    write: Callable[[Sequence[RecordRow]], None],
    conn: psycopg.Connection[Any],
    runs: Runs,
    serial: int,
) -> int:
    """Time ``runs.rounds`` one-change re-imports after ``runs.prior`` untimed ones;
    return the last serial."""
    walls, cpus = [], []
    for i in range(runs.prior + runs.rounds):
        serial += 1
        zone = version(runs.count, changed=serial, serial=serial)
        started, spent = time.perf_counter(), cpu_seconds(conn)
        write(zone)
        wall, cpu = time.perf_counter() - started, cpu_seconds(conn) - spent
        if i >= runs.prior:
            walls.append(wall)
            cpus.append(cpu)
        print(f"  {label} #{i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU"
              f" (load average {os.getloadavg()[0]:.1f})", flush=True)
    last = journal_sizes(conn)[-(runs.prior + runs.rounds):]
    print(f"{label}: after {runs.prior} prior re-imports, {runs.rounds} timed:"
          f" wall median {statistics.median(walls):.2f} s (max {max(walls):.2f} s),"
          f" CPU median {statistics.median(cpus):.2f} s (max {max(cpus):.2f} s);"
          f" journal entries (removed, added) {sorted(set(last))}")
    return serial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--prior", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nested-loops", action="store_true",
                        help="turn hash and merge joins off for the run account")
    args = parser.parse_args()
    with private_cluster("postgres") as pg:
        dsn = pg.new_database("reimport")
        with pg.connect(dsn) as conn:
            migrate(conn)
        if args.nested_loops:
            # JIT off too: a disabled join kind adds 10^10 to a plan's cost, which would
            # otherwise have PostgreSQL compile every small statement of the triggers.
            pg.cluster.admin_sql(
                "ALTER ROLE valis SET enable_hashjoin = off;"
                " ALTER ROLE valis SET enable_mergejoin = off;"
                " ALTER ROLE valis SET jit = off"
            )
        # Autocommit, as the verbs' sessions are between their transactions: a read
        # left open would hold every later import inside one transaction.
        with pg.connect(dsn, autocommit=True) as conn:
            started = time.perf_counter()
            import_zone(conn, version(args.records, changed=1, serial=1), now=time.time())
            print(f"first import of {args.records} records: "
                  f"{time.perf_counter() - started:.2f} s", flush=True)
            runs = Runs(args.records, args.prior, args.rounds)
            serial = run("import", lambda zone: import_zone(conn, zone, now=time.time()),
                         conn, runs, 1)
            run("rewrite", lambda zone: replace_zone(conn, zone), conn, runs, serial)


if __name__ == "__main__":
    main()

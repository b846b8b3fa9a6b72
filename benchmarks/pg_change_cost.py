"""PostgreSQL's own CPU per change, split by trigger (issue 27, the change-rate target).

A change is what ``benchmarks/live rate`` commits: one autocommitted ``UPDATE`` of a host's
address in ``records`` (each to another host, a new address). This runs N of them against
a private cluster holding one zone of ``--names`` hosts and reads the backend's utime +
stime from /proc before and after, first with every trigger, then with the journal
trigger, the owner-change NOTIFY trigger, both, or the commit-time seal disabled (ALTER
TABLE ... DISABLE TRIGGER in the scratch database: measurement only). A plain indexed
SELECT gives the floor of one statement's round trip. The resident's reads are not counted
here. ``--through 13`` also measures a database migrated only through 0013 (before 0014's
one-row journal path and self-journalling seal), each split on both in turn, so a before
and after share the machine's load.

``--cold`` measures a change as ``live rate`` meets it instead: the backend on a core
(``--core``) a cache-thrashing process keeps busy, as the UDP worker keeps the server's core,
one change every ``--gap`` seconds (20 ms: 50 a second), a session of the same database
listening to what the zone source listens to (its CPU is reported too, and what it heard
is read after each change), ``--rounds`` rounds of ``--changes`` changes on each database
in turn; the median round is printed. A backend's CPU per change is then about twice what
the warm splits measure (docs/performance.md, the tenth round). ``--variant FILE.sql``
(repeatable, with ``--cold``) adds a database at the latest migration with FILE's SQL run
after its zone is imported: a probe of another design (``benchmarks/pg_change_variants``),
measurement only. Usage: .venv/bin/python benchmarks/pg_change_cost.py [--changes N]
[--names N] [--through N] [--cold [--rounds N] [--gap S] [--core N] [--variant FILE.sql]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dns_qps_queries import ZONE, generate_zone  # noqa: E402  (beside this script)
from tests.scenario.operator_state_helpers import migrate_through  # noqa: E402
from tests.scenario.pg import private_cluster  # noqa: E402

from valis_core.dns import parse_zone_text  # noqa: E402
from valis_core.operator_state.schema import shipped_migrations  # noqa: E402
from valis_core.operator_state.zone_notes import CHANNELS  # noqa: E402
from valis_core.operator_state.zones import replace_zone  # noqa: E402

CHANGE = "UPDATE records SET rdata = %s WHERE zone = %s AND owner = %s AND rtype = 'A'"
FLOOR = "SELECT 1 FROM records WHERE zone = %s AND owner = %s AND rtype = 'A'"
SPLITS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("every trigger", ()),
    ("journal trigger off", (("records", "records_journal_update"),)),
    ("notify trigger off", (("records", "records_notify_update"),)),
    ("journal + notify off", (("records", "records_journal_update"),
                              ("records", "records_notify_update"))),
    ("seal off", (("zone_journal", "zone_journal_seal"),)),
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--names", type=int, default=1000)
    parser.add_argument("--through", type=int, action="append", default=[], metavar="N",
                        help="also measure a database migrated only through migration N "
                             "(repeatable), each split run on every database in turn")
    parser.add_argument("--cold", action="store_true",
                        help="each change on a core kept busy by a cache-thrashing process, "
                             "one every --gap seconds, with a listening session")
    parser.add_argument("--rounds", type=int, default=5, help="with --cold")
    parser.add_argument("--gap", type=float, default=0.02, help="with --cold: seconds")
    parser.add_argument("--core", type=int, default=0,
                        help="with --cold: the backends' core (this script takes another)")
    parser.add_argument("--variant", type=Path, action="append", default=[],
                        metavar="FILE.sql", help="with --cold: also a database with FILE's "
                        "SQL run after its import (repeatable)")
    args = parser.parse_args()
    latest = shipped_migrations()[-1].version
    versions = [*sorted(set(args.through) - {latest}), latest]
    if args.variant and not args.cold:
        parser.error("--variant needs --cold")
    if args.cold:
        return cold(args, versions)
    with private_cluster() as pg:
        databases = [Database(pg, version, args.names) for version in versions]
        floor = databases[-1].run(FLOOR, args.changes, lambda d, n: (ZONE, d.host(n)))
        print(f"{'indexed SELECT (floor)':32} {floor:6.2f} ms backend CPU each", flush=True)
        for label, off in SPLITS:
            for database in databases:
                cost = database.run_without(off, args.changes)
                print(f"{label + f' (through {database.version:04d})':32} {cost:6.2f} "
                      "ms backend CPU per change", flush=True)
        for database in databases:
            database.conn.close()
    return 0


def cold(args: argparse.Namespace, versions: list[int]) -> int:
    """``--cold``: each database's backend and listener on ``args.core`` beside a
    cache-thrashing process, the changes paced; the median round of each."""
    others = sorted(os.sched_getaffinity(0) - {args.core})
    if not others:
        print("pg_change_cost: --cold needs a core besides --core", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {others[0]})
    thrash = subprocess.Popen(
        ["taskset", "-c", str(args.core), sys.executable, "-c", THRASH],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with private_cluster() as pg:
            databases = [Database(pg, version, args.names) for version in versions]
            databases += [Database(pg, versions[-1], args.names, variant=path)
                          for path in args.variant]
            for database in databases:
                database.listen(args.core)
                database.paced(50, 0.005)  # plans made, caches filled
            rounds: dict[str, list[tuple[float, float]]] = {d.label: [] for d in databases}
            for round_ in range(args.rounds):
                for database in databases:
                    spent = database.paced(args.changes, args.gap)
                    rounds[database.label].append(spent)
                    print(f"round {round_ + 1}/{args.rounds} {database.label:32} "
                          f"backend {spent[0]:.3f} ms, listener {spent[1]:.3f} ms a change",
                          flush=True)
            print(f"median of {args.rounds} rounds of {args.changes} changes, one every "
                  f"{args.gap * 1000:g} ms, on a cold core:")
            for label, spent in rounds.items():
                backend = statistics.median(each[0] for each in spent)
                heard = statistics.median(each[1] for each in spent)
                print(f"{label:32} backend {backend:6.3f} ms, listener {heard:6.3f} ms a "
                      f"change (backend {min(e[0] for e in spent):.3f}-"
                      f"{max(e[0] for e in spent):.3f})")
            for database in databases:
                database.close()
    finally:
        thrash.kill()
        thrash.wait()
    return 0


THRASH = (
    "b = bytearray(16 << 20)\n"
    "while True:\n"
    "    for i in range(0, len(b), 64):\n"
    "        b[i] = (b[i] + 1) & 255\n"
)
"""What keeps the backends' core busy and its caches cold between changes, as the UDP
worker keeps the server's: a write to every cache line of 16 MiB, over and over."""


class Database:
    """One scratch database holding the zone, migrated through ``version`` (and given
    ``variant``'s SQL after its import, when given)."""

    def __init__(self, pg: Any, version: int, names: int, variant: Path | None = None) -> None:
        self.version = version
        self.names = names
        self.label = f"through {version:04d}" if variant is None else f"variant {variant.name}"
        dsn = pg.new_database(f"cost{version}" if variant is None else "variant")
        with pg.connect(dsn, autocommit=True) as conn:
            migrate_through(conn, version)
            with conn.transaction():
                replace_zone(conn, parse_zone_text(generate_zone(names), ZONE))
            if variant is not None:
                conn.execute(variant.read_text().encode("utf-8"))
        self.pg, self.dsn = pg, dsn
        self.conn: Any = pg.connect(dsn, autocommit=True)
        self.pid = int(self.conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        self.listener: Any = None
        self.listener_pid = 0
        self.serial = 0

    def listen(self, core: int) -> None:
        """A session listening to what the zone source listens to; it and the writing
        backend on ``core``."""
        self.listener = self.pg.connect(self.dsn, autocommit=True)
        for channel in CHANNELS:
            self.listener.execute(f"LISTEN {channel}")
        self.listener_pid = int(self.listener.execute("SELECT pg_backend_pid()").fetchone()[0])
        for pid in (self.pid, self.listener_pid):
            os.sched_setaffinity(pid, {core})

    def heard(self) -> None:
        """Take what the listening session was sent (as the zone source does)."""
        pgconn = self.listener.pgconn
        pgconn.consume_input()
        while pgconn.notifies() is not None:
            pass

    def paced(self, changes: int, gap: float) -> tuple[float, float]:
        """``changes`` changes, one every ``gap`` seconds: the backend's and the
        listener's CPU per change, in ms."""
        began, heard = cpu_seconds(self.pid), cpu_seconds(self.listener_pid)
        due = time.monotonic()
        for _ in range(changes):
            self.conn.execute(CHANGE, (address(self.serial), ZONE, self.host(self.serial)))
            self.serial += 1
            self.heard()
            due += gap
            time.sleep(max(0.0, due - time.monotonic()))
        time.sleep(0.05)
        self.heard()
        return ((cpu_seconds(self.pid) - began) * 1000 / changes,
                (cpu_seconds(self.listener_pid) - heard) * 1000 / changes)

    def close(self) -> None:
        self.conn.close()
        if self.listener is not None:
            self.listener.close()

    def host(self, n: int) -> str:
        return f"host{n * 7 % self.names + 1}.{ZONE}"

    def run(self, sql: str, changes: int, params: Any) -> float:
        for _ in range(20):  # past psycopg's prepare threshold
            self.conn.execute(sql, params(self, self.serial))
            self.serial += 1
        began = cpu_seconds(self.pid)
        for _ in range(changes):
            self.conn.execute(sql, params(self, self.serial))
            self.serial += 1
        return (cpu_seconds(self.pid) - began) * 1000 / changes

    def run_without(self, off: tuple[tuple[str, str], ...], changes: int) -> float:
        for table, trigger in off:
            self.conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
        cost = self.run(CHANGE, changes, lambda d, n: (address(n), ZONE, d.host(n)))
        for table, trigger in off:
            self.conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
        return cost


def address(n: int) -> str:
    return f"198.{18 + (n >> 16 & 1)}.{n >> 8 & 255}.{n & 255}"


if __name__ == "__main__":
    sys.exit(main())

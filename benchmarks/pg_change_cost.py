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
and after share the machine's load. Usage: .venv/bin/python benchmarks/pg_change_cost.py
[--changes N] [--names N] [--through N]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dns_qps_queries import ZONE, generate_zone  # noqa: E402  (beside this script)
from tests.scenario.operator_state_helpers import migrate_through  # noqa: E402
from tests.scenario.pg import private_cluster  # noqa: E402

from valis_core.dns import parse_zone_text  # noqa: E402
from valis_core.operator_state.schema import shipped_migrations  # noqa: E402
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
    args = parser.parse_args()
    latest = shipped_migrations()[-1].version
    versions = [*sorted(set(args.through) - {latest}), latest]
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


class Database:
    """One scratch database holding the zone, migrated through ``version``."""

    def __init__(self, pg: Any, version: int, names: int) -> None:
        self.version = version
        self.names = names
        dsn = pg.new_database(f"cost{version}")
        with pg.connect(dsn, autocommit=True) as conn:
            migrate_through(conn, version)
            with conn.transaction():
                replace_zone(conn, parse_zone_text(generate_zone(names), ZONE))
        self.conn: Any = pg.connect(dsn, autocommit=True)
        self.pid = int(self.conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        self.serial = 0

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

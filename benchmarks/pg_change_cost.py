"""PostgreSQL's own CPU per change, split by trigger (issue 27, the change-rate target).

A change is what ``benchmarks/live rate`` commits: one autocommitted ``UPDATE`` of a host's
address in ``records`` (each to another host, a new address). This runs N of them against
a private cluster holding one zone of ``--names`` hosts and reads the backend's utime +
stime from /proc before and after, first with every trigger, then with the journal
trigger, the owner-change NOTIFY trigger, both, or the commit-time seal disabled (ALTER
TABLE ... DISABLE TRIGGER in the scratch database: measurement only). A plain indexed
SELECT gives the floor of one statement's round trip. The resident's reads are not counted
here. Usage: .venv/bin/python benchmarks/pg_change_cost.py [--changes N] [--names N]
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
from tests.scenario.pg import private_cluster  # noqa: E402

from valis_core.dns import parse_zone_text  # noqa: E402
from valis_core.operator_state.schema import migrate  # noqa: E402
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
    args = parser.parse_args()
    with private_cluster() as pg:
        dsn = pg.new_database("cost")
        with pg.connect(dsn) as conn:
            migrate(conn)
            replace_zone(conn, parse_zone_text(generate_zone(args.names), ZONE))
        conn: Any = pg.connect(dsn, autocommit=True)
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        serial = 0

        def host(n: int) -> str:
            return f"host{n * 7 % args.names + 1}.{ZONE}"

        def run(sql: str, params: Any) -> float:
            nonlocal serial
            for _ in range(20):  # past psycopg's prepare threshold
                conn.execute(sql, params(serial))
                serial += 1
            began = cpu_seconds(pid)
            for _ in range(args.changes):
                conn.execute(sql, params(serial))
                serial += 1
            return (cpu_seconds(pid) - began) * 1000 / args.changes

        def address(n: int) -> str:
            return f"198.{18 + (n >> 16 & 1)}.{n >> 8 & 255}.{n & 255}"

        floor = run(FLOOR, lambda n: (ZONE, host(n)))
        print(f"{'indexed SELECT (floor)':24} {floor:6.2f} ms backend CPU each", flush=True)
        for label, off in SPLITS:
            for table, trigger in off:
                conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
            cost = run(CHANGE, lambda n: (address(n), ZONE, host(n)))
            for table, trigger in off:
                conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
            print(f"{label:24} {cost:6.2f} ms backend CPU per change", flush=True)
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

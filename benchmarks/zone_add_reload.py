"""Adding a served zone to a running node: from SIGHUP to the new zone swapped in.

Stands up a private PostgreSQL cluster and a real resident run as the ``valis`` account
(the scenario tests' ``tests.scenario.pg.private_cluster`` and
``tests.scenario.resident_harness``) serving ``example.test.``, imports a zone of
``--records`` A records, stores it in the node's served zones with ``valis site-facts
set --state-dir``, and sends the resident SIGHUP. Reported: the seconds from the signal to
the ``reload: now serving`` log line (the new source loaded every served zone, the public
view answered each apex SOA, the index swapped in), and whether the new zone's SOA is
then answered over UDP. ``--rounds`` repeats it (removing the zone, then adding it again).

Needs root (a private cluster, the run account). Every loop is bounded in count and time.

    .venv/bin/python benchmarks/zone_add_reload.py                     # 100 000 records
    .venv/bin/python benchmarks/zone_add_reload.py --records 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rcode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import RUN_USER, private_cluster, run_as
from tests.scenario.resident_harness import Resident, harness, make_state_dir, site_facts

from valis_core.operator_state.schema import migrate

BASE = "example.test."
ADDED = "big.test."
BOUND = 120.0


def set_zones(resident: Resident, dsn: str, zones: str) -> None:
    done = run_as(RUN_USER, [
        "valis", "site-facts", "set", "node-a", f"VALIS_SERVED_ZONES={zones}",
        "--state-dir", str(resident.state_dir), "--dsn", dsn,
    ])
    if done.returncode != 0:
        raise SystemExit(f"valis site-facts set failed: {done.stderr.strip()}")


def reload_seconds(resident: Resident) -> float:
    seen = resident.stderr().count("reload: now serving")
    started = time.monotonic()
    resident.proc.send_signal(signal.SIGHUP)
    while resident.stderr().count("reload: now serving") == seen:
        if time.monotonic() - started > BOUND:
            raise SystemExit(f"no reload within {BOUND:.0f}s:\n{resident.stderr()}")
        time.sleep(0.005)
    return time.monotonic() - started


def answered(resident: Resident, zone: str) -> bool:
    assert resident.port is not None
    query = dns.message.make_query(zone, "SOA")
    reply = dns.query.udp(query, "127.0.0.1", port=resident.port, timeout=5)
    return reply.rcode() == dns.rcode.NOERROR and bool(reply.answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with private_cluster("postgres") as pg, harness() as running:
        dsn = pg.new_database("reload")
        with pg.connect(dsn) as conn:
            migrate(conn)
        import_zone(pg, dsn, BASE)
        extra = "".join(f"h{i} IN A 192.0.2.{i % 250 + 1}\n" for i in range(args.records))
        import_zone(pg, dsn, ADDED, extra=extra)
        resident = running.start(make_state_dir(running.workdir), site_facts(dsn))
        resident.wait_ready()
        times = []
        for _ in range(args.rounds):
            set_zones(resident, dsn, f"{BASE},{ADDED}")
            times.append(reload_seconds(resident))
            if not answered(resident, ADDED):
                raise SystemExit(f"{ADDED} not answered after the reload")
            set_zones(resident, dsn, BASE)
            reload_seconds(resident)
        print(f"added a zone of {args.records} records by reload, {args.rounds} rounds: "
              f"median {statistics.median(times):.2f}s, max {max(times):.2f}s "
              "(SIGHUP to swapped in; then answered over UDP)")


if __name__ == "__main__":
    main()

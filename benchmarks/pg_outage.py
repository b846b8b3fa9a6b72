"""PostgreSQL outage campaign: a serving resident while its database is stopped, and
while it is restarted.

Stands up a private PostgreSQL cluster and a real resident run as the ``valis`` account
(the scenario tests' ``tests.scenario.pg.private_cluster`` and
``tests.scenario.resident_harness``), asks it over UDP on loopback without pause (one
query at a time, each waiting at most ``--query-timeout``), and then, for each case:

- ``stop``: PostgreSQL stopped for ``--outage`` seconds (30 by default), then started;
- ``restart``: PostgreSQL stopped and started at once (a fast restart);

then commits a change to a served record right after the database is back and asks
until the new address is answered. Per case it reports the queries sent and answered
while the database was away, the longest gap between two answers (over the whole case),
the seconds from that commit to the new answer, whether the heartbeat resumed
(``node_liveness.beats`` grew) and how many restarts the resident needed (its process
and its single READY must be the same before and after: 0).

Needs root (a private cluster, the run account). Every loop is bounded in count and time.

    .venv/bin/python benchmarks/pg_outage.py                  # stop 30 s, then a restart
    .venv/bin/python benchmarks/pg_outage.py --outage 5 --case stop
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import dns.exception
import dns.message
import dns.query

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import PgCluster, private_cluster
from tests.scenario.resident_harness import Resident, harness, make_state_dir, site_facts

from valis_core.dns import parse_zone_text
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zones import replace_zone

ZONE = "example.test."
WWW = "www.example.test."
FIRST = "192.0.2.80"
BOUND = 120.0
"""Seconds any wait (for the change, for a heartbeat) may take before the case fails."""
MAX_QUERIES = 2_000_000


@attrs.frozen
class Probe:
    """One query: when it was sent, and the answer's addresses (None: no answer)."""

    sent: float
    answered: float | None
    addresses: frozenset[str] | None


class Asker:
    """Asks the resident for ``WWW`` A one query after another until stopped (bounded by
    ``MAX_QUERIES`` and ``BOUND`` past the longest case)."""

    def __init__(self, port: int, timeout: float, limit: float) -> None:
        self.port = port
        self.timeout = timeout
        self.limit = limit
        self.probes: list[Probe] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(self.timeout + 5)

    def _run(self) -> None:
        query = dns.message.make_query(WWW, "A")
        deadline = time.monotonic() + self.limit
        while not self.done.is_set() and len(self.probes) < MAX_QUERIES:
            sent = time.monotonic()
            if sent > deadline:
                return
            try:
                response = dns.query.udp(query, "127.0.0.1", port=self.port,
                                         timeout=self.timeout)
            except (OSError, dns.exception.DNSException):
                self.probes.append(Probe(sent, None, None))
                continue
            found = frozenset(r.to_text() for rrset in response.answer for r in rrset)
            self.probes.append(Probe(sent, time.monotonic(), found))

    def window(self, start: float, end: float) -> list[Probe]:
        return [p for p in list(self.probes) if start <= p.sent < end]


def beats(pg: PgCluster, dsn: str) -> int:
    with pg.connect(dsn) as conn:
        row = conn.execute("SELECT beats FROM node_liveness WHERE node = 'node-a'").fetchone()
    return int(row[0]) if row is not None else 0


def set_www(pg: PgCluster, dsn: str, address: str) -> float:
    """Commit the change; the moment the commit returned."""
    with pg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE records SET rdata = %s WHERE owner = %s AND rtype = 'A'",
                     (address, WWW))  # fmt: skip
    return time.monotonic()


def max_gap(probes: list[Probe], start: float, end: float) -> float:
    """The longest time without an answer between ``start`` and ``end``."""
    times = [start, *(p.answered for p in probes if p.answered is not None), end]
    times = sorted(t for t in times if start <= t <= end)
    return max((b - a for a, b in itertools.pairwise(times)), default=end - start)


def run_case(
    name: str, outage: float, *, pg: PgCluster, dsn: str, resident: Resident, asker: Asker,
    address: str,
) -> dict[str, Any]:
    pid = resident.pid
    readies = sum("READY" in m for m in resident.notify.messages)
    beats_before = beats(pg, dsn)
    began = time.monotonic()
    time.sleep(1.0)  # a second of ordinary service first, inside the gap measurement
    stopped = time.monotonic()
    before = [p.addresses for p in asker.window(began, stopped) if p.addresses is not None]
    held = before[-1] if before else None  # what the served snapshot held at the stop
    pg.cluster.stop()
    if outage > 0:
        time.sleep(outage)
    pg.cluster.start()
    back = time.monotonic()
    committed = set_www(pg, dsn, address)
    served = resumed_at = None
    deadline = committed + BOUND
    while (served is None or resumed_at is None) and time.monotonic() < deadline:
        if served is None:
            answered = [p.answered for p in asker.window(committed, time.monotonic())
                        if p.addresses is not None and address in p.addresses]
            served = min((t for t in answered if t is not None), default=None)
        if resumed_at is None and beats(pg, dsn) > beats_before:
            resumed_at = time.monotonic()
        time.sleep(0.01)
    time.sleep(1.0)  # a second of service afterwards, inside the gap measurement
    ended = time.monotonic()
    away = asker.window(stopped, back)
    resident.notify.collect(0.01)
    same = (
        resident.proc.poll() is None
        and resident.pid == pid
        and sum("READY" in m for m in resident.notify.messages) == readies
    )
    return {
        "case": name,
        "outage_s": round(back - stopped, 2),
        "sent_while_away": len(away),
        "answered_while_away": sum(p.addresses is not None for p in away),
        "other_answers_while_away": sum(
            p.addresses is not None and p.addresses != held for p in away
        ),
        "max_gap_s": round(max_gap(asker.window(began, ended), began, ended), 4),
        "change_served_after_s": None if served is None else round(served - committed, 3),
        "heartbeats_resumed": resumed_at is not None,
        "heartbeat_resumed_after_s": None if resumed_at is None else round(resumed_at - back, 2),
        "restarts_needed": 0 if same else 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage", type=float, default=30.0,
                        help="seconds PostgreSQL stays stopped in the stop case (default: 30)")
    parser.add_argument("--case", action="append", choices=("stop", "restart"),
                        help="only these cases (repeatable; default: both)")
    parser.add_argument("--query-timeout", type=float, default=0.5)
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root: the campaign needs a private cluster and the run account")
    cases = args.case or ["stop", "restart"]
    results = []
    with private_cluster() as pg, harness() as running:
        dsn = pg.new_database("outage")
        with pg.connect(dsn) as conn:
            migrate(conn)
            replace_zone(conn, parse_zone_text(soa_zone(ZONE, extra=f"www IN A {FIRST}\n"),
                                               ZONE))
        resident = running.start(make_state_dir(running.workdir), site_facts(dsn))
        resident.wait_ready()
        assert resident.port is not None
        asker = Asker(resident.port, args.query_timeout,
                      limit=len(cases) * (args.outage + 3 * BOUND))
        asker.start()
        try:
            for number, case in enumerate(cases, start=1):
                outage = args.outage if case == "stop" else 0.0
                print(f"case {case}: PostgreSQL away for {outage:.0f}s ...", file=sys.stderr,
                      flush=True)
                results.append(run_case(case, outage, pg=pg, dsn=dsn, resident=resident,
                                        asker=asker, address=f"192.0.2.{80 + number}"))
        finally:
            asker.stop()
        if resident.proc.poll() is not None:
            print(resident.stderr(), file=sys.stderr)
    if args.json:
        for result in results:
            print(json.dumps(result))
    else:
        print(table(results))
    return 0 if all(r["restarts_needed"] == 0 and r["heartbeats_resumed"]
                    and r["change_served_after_s"] is not None for r in results) else 1


def table(results: list[dict[str, Any]]) -> str:
    heads = ["case", "outage_s", "sent_while_away", "answered_while_away",
             "other_answers_while_away", "max_gap_s", "change_served_after_s",
             "heartbeats_resumed", "heartbeat_resumed_after_s", "restarts_needed"]
    rows = [[str(r[h]) for h in heads] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

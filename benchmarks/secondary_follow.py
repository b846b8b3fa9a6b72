"""From a committed change to a real secondary answering it: NOTIFY, IXFR, the secondary's
own apply, end to end.

Stands up what ``tests/scenario/test_zone_transfer.py`` runs: a private PostgreSQL
cluster, a real resident as the ``valis`` account in one network namespace, NSD or Knot
(Debian's) as its secondary in another, joined by a veth pair. The zone holds
``--records`` A records besides its apex. Each round commits one new record by SQL (the
commit raises the serial itself) and asks the secondary for it over UDP, from its own
namespace, every 2 ms until it answers (at most 30 s). Reported per server: the seconds
from the commit returning to the secondary's first answer (min, median, max), and how
many of the rounds the node sent as an IXFR from the journal (its log says which).

Needs root. Every loop is bounded in count and time. Figures for docs/transfers.md, not
a test: nothing here passes or fails.

    .venv/bin/python benchmarks/secondary_follow.py                 # both, 10 rounds
    .venv/bin/python benchmarks/secondary_follow.py --server knot --rounds 20
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

import dns.message
import dns.rcode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import PgCluster, private_cluster
from tests.scenario.resident_harness import inside_netns, site_facts
from tests.scenario.transfer_wire import (
    KEY_NAME,
    SECONDARY_IP,
    SERVERS,
    ZONE,
    node_and_secondary,
)

from valis_core.operator_state.schema import migrate
from valis_core.operator_state.secondaries import Secondary, add_secondary

BOUND = 30.0
POLL = 0.002
SECRET = bytes(range(1, 33))


def answered(sock: socket.socket, name: str) -> bool:
    query = dns.message.make_query(name, "A")
    sock.sendto(query.to_wire(), (SECONDARY_IP, 53))
    try:
        data = sock.recv(65535)
    except TimeoutError:
        return False
    reply = dns.message.from_wire(data)
    return reply.id == query.id and reply.rcode() == dns.rcode.NOERROR and bool(reply.answer)


def wait_answer(sock: socket.socket, name: str) -> float:
    started = time.monotonic()
    for _ in range(int(BOUND / POLL)):
        if answered(sock, name):
            return time.monotonic() - started
        if time.monotonic() - started > BOUND:
            break
        time.sleep(POLL)
    raise SystemExit(f"the secondary did not answer {name} within {BOUND:.0f}s")


def run_server(pg: PgCluster, server: str, records: int, rounds: int) -> None:
    dsn = pg.new_database("follow")
    with pg.connect(dsn) as conn:
        migrate(conn)
    extra = "".join(f"h{i} IN A 198.51.100.{i % 250 + 1}\n" for i in range(records))
    import_zone(pg, dsn, ZONE, extra=extra)
    with pg.connect(dsn) as conn:
        add_secondary(conn, Secondary(ZONE, SECONDARY_IP, KEY_NAME, "hmac-sha256", SECRET))
    conf, command, _ = SERVERS[server]
    with node_and_secondary(site_facts(dsn), conf, command, SECRET, server) as (wire, node):
        with inside_netns(wire.secondary):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(0.5)
        wait_answer(sock, f"ns1.{ZONE}")
        seconds = []
        for i in range(rounds):
            name = f"r{i}.{ZONE}"
            with pg.connect(dsn) as conn, conn.transaction():
                conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                             " VALUES (%s, %s, 'A', 300, '203.0.113.7')", (ZONE, name))
            seconds.append(wait_answer(sock, name))
        sock.close()
        ixfr = node.stderr().count("zone transfer: IXFR from serial")
        print(f"{server}: {rounds} commits, zone of {records} records: commit to answer "
              f"min {min(seconds):.3f}s median {statistics.median(seconds):.3f}s "
              f"max {max(seconds):.3f}s; {ixfr} sent as IXFR from the journal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=[*sorted(SERVERS), "both"], default="both")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    servers = sorted(SERVERS) if args.server == "both" else [args.server]
    with private_cluster("postgres") as pg:
        for server in servers:
            run_server(pg, server, args.records, args.rounds)


if __name__ == "__main__":
    main()

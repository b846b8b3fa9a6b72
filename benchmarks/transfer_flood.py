"""AXFR floods from addresses no secondary has: what they cost the operator-state database,
and what they do to honest UDP answers.

Stands up what ``tests/scenario/test_zone_transfer.py`` runs: a private PostgreSQL
cluster and a real resident as the ``valis`` account in one network namespace, its zone
with one listed secondary; a second namespace, joined by a veth pair, holds that
secondary's address and ``--strangers`` more. Measured, in turn:

1. idle: ``--probes`` plain UDP SOA queries from the secondary's address, one at a time
   (2 ms apart), their round-trip p50 and p99 (a lost query counts as its 1 s timeout);
2. flood: the same probe while one worker per stranger address (a process of its own)
   opens a TCP connection, sends an AXFR (signed with the listed secondary's own key,
   as a thief would) and reads the answer, paced so all of them together ask ``--rate``
   AXFRs a second for ``--seconds`` seconds. Reported: the rate reached, the answers
   by RCODE, the probe's p50/p99 and the p99 over the idle one; and the database's work
   during the flood: the scans of ``zone_secondaries`` (``pg_stat_user_tables``) and the
   transactions committed in the node's database (``pg_stat_database``), besides what
   the resident's own refresh of its secondaries (every 10 s) makes; and the node's CPU
   time over the flood (its process tree, from /proc).

Needs root. Every loop is bounded in count and time. Figures for docs/transfers.md, not
a test: nothing here passes or fails.

    .venv/bin/python benchmarks/transfer_flood.py
    .venv/bin/python benchmarks/transfer_flood.py --rate 2000 --seconds 20
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.message
import dns.tsigkeyring
from dns_qps import tree_cpu_seconds  # beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user, private_cluster
from tests.scenario.resident_harness import inside_netns, make_state_dir, site_facts
from tests.scenario.transfer_wire import (
    KEY_NAME,
    NODE_IP,
    SECONDARY_IP,
    ZONE,
    Wire,
    start_node,
)

from valis_core.operator_state.schema import migrate
from valis_core.operator_state.secondaries import Secondary, add_secondary

SECRET = bytes(range(1, 33))
REPLY_LIMIT = 1.0
GAP = 0.002
STATS_SETTLE = 2.0
"""Seconds to let the database's backends publish their statistics before they are read."""

# One flooding worker, run in the secondary's namespace as a stock interpreter: AXFRs
# from ``source`` at ``rate`` a second for ``seconds``, each on a connection of its own,
# its answer's RCODE read; the counts printed as JSON.
_WORKER = r"""
import json, socket, sys, time
server, source, query = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
rate, seconds = float(sys.argv[4]), float(sys.argv[5])
framed = len(query).to_bytes(2, "big") + query
counts = {}
started = time.monotonic()
for i in range(int(rate * seconds)):
    due = started + i / rate
    now = time.monotonic()
    if now > started + seconds + 5:
        counts["gave up"] = counts.get("gave up", 0) + 1
        break
    if due > now:
        time.sleep(due - now)
    try:
        with socket.create_connection((server, 53), timeout=2.0,
                                      source_address=(source, 0)) as s:
            s.sendall(framed)
            got = b""
            while len(got) < 6:
                chunk = s.recv(65535)
                if not chunk:
                    break
                got += chunk
            kind = str(got[5] & 0x0F) if len(got) >= 6 else "closed"
    except OSError as exc:
        kind = type(exc).__name__
    counts[kind] = counts.get(kind, 0) + 1
counts["elapsed"] = time.monotonic() - started
print(json.dumps(counts))
"""


def probe(netns: str, count: int) -> tuple[float, float, int]:
    """p50 and p99 (seconds) of ``count`` SOA queries to the node, one at a time, and how
    many went unanswered."""
    with inside_netns(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((SECONDARY_IP, 0))
    sock.settimeout(REPLY_LIMIT)
    times: list[float] = []
    lost = 0
    with sock:
        for i in range(count):
            query = dns.message.make_query(ZONE, "SOA", id=i % 65536).to_wire()
            started = time.perf_counter()
            sock.sendto(query, (NODE_IP, 53))
            while True:
                try:
                    data = sock.recv(65535)
                except TimeoutError:
                    lost += 1
                    times.append(REPLY_LIMIT)
                    break
                if data[:2] == query[:2]:
                    times.append(time.perf_counter() - started)
                    break
            time.sleep(GAP)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))], lost


def database_work(pg: PgCluster, dsn: str) -> tuple[int, int]:
    """Scans of ``zone_secondaries`` so far, and transactions committed in its database."""
    with pg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        scans = conn.execute(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables"
            " WHERE relname = 'zone_secondaries'").fetchone()
        commits = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert scans is not None
    assert commits is not None
    return int(scans[0]), int(commits[0])


def add_strangers(wire: Wire, count: int) -> list[str]:
    links = json.loads(subprocess.run(["ip", "-n", wire.secondary, "-j", "link"],
                                      capture_output=True, text=True, check=True).stdout)
    (device,) = [link["ifname"] for link in links if link["ifname"] != "lo"]
    addresses = [f"192.0.2.{100 + i}" for i in range(count)]
    for address in addresses:
        subprocess.run(["ip", "-n", wire.secondary, "addr", "add", f"{address}/24", "dev",
                        device], check=True)
    return addresses


def flood(
    wire: Wire, strangers: list[str], rate: float, seconds: float
) -> list[subprocess.Popen[str]]:
    query = dns.message.make_query(ZONE, "AXFR")
    query.use_tsig(dns.tsigkeyring.from_text({KEY_NAME: base64.b64encode(SECRET).decode()}),
                   KEY_NAME)
    return [
        subprocess.Popen(["ip", "netns", "exec", wire.secondary, "/usr/bin/python3", "-I",
                          "-c", _WORKER, NODE_IP, source, query.to_wire().hex(),
                          str(rate / len(strangers)), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
        for source in strangers
    ]


def run(pg: PgCluster, args: argparse.Namespace) -> None:
    dsn = pg.new_database("flood")
    with pg.connect(dsn) as conn:
        migrate(conn)
    import_zone(pg, dsn, ZONE)
    with pg.connect(dsn) as conn:
        add_secondary(conn, Secondary(ZONE, SECONDARY_IP, KEY_NAME, "hmac-sha256", SECRET))
    account = ensure_system_user(RUN_USER)
    workdir = Path(tempfile.mkdtemp(prefix="valis-flood-", dir="/tmp"))
    os.chown(workdir, account.pw_uid, account.pw_gid)
    os.chmod(workdir, 0o755)
    wire = Wire()
    node = None
    try:
        wire.build()
        strangers = add_strangers(wire, args.strangers)
        node = start_node(wire, make_state_dir(workdir), site_facts(dsn), workdir)
        node.wait_ready()
        idle = probe(wire.secondary, args.probes)
        time.sleep(STATS_SETTLE)
        scans0, commits0 = database_work(pg, dsn)
        cpu0 = tree_cpu_seconds(node.proc.pid)
        started = time.monotonic()
        workers = flood(wire, strangers, args.rate, args.seconds)
        flooded = probe(wire.secondary, args.probes)
        counts: dict[str, float] = {}
        for worker in workers:
            out, _ = worker.communicate(timeout=args.seconds + 60)
            for key, value in json.loads(out).items():
                counts[key] = max(counts.get(key, 0), value) if key == "elapsed" else \
                    counts.get(key, 0) + value
        elapsed = time.monotonic() - started
        cpu = tree_cpu_seconds(node.proc.pid) - cpu0
        time.sleep(STATS_SETTLE)
        scans1, commits1 = database_work(pg, dsn)
        asked = sum(value for key, value in counts.items() if key != "elapsed")
        refused = counts.get("5", 0)
        print(f"{args.strangers} stranger addresses, {asked:.0f} AXFRs in "
              f"{counts['elapsed']:.1f}s ({asked / counts['elapsed']:.0f}/s asked for "
              f"{args.rate:.0f}/s): {refused:.0f} REFUSED, others "
              f"{ {k: v for k, v in counts.items() if k not in ('5', 'elapsed')} }; the "
              f"node's CPU {cpu:.1f}s ({cpu / max(asked, 1) * 1e6:.0f} us an AXFR, the probe's "
              "queries included)")
        print(f"database during the flood ({elapsed:.1f}s, the resident's refresh every 10 s "
              f"included, and this script's own reads of the statistics): "
              f"{scans1 - scans0} scans of zone_secondaries, {commits1 - commits0} "
              "transactions committed")
        print(f"honest UDP p50 / p99: idle {idle[0] * 1e3:.2f} / {idle[1] * 1e3:.2f} ms "
              f"({idle[2]} lost); under the flood {flooded[0] * 1e3:.2f} / "
              f"{flooded[1] * 1e3:.2f} ms ({flooded[2]} lost); p99 ratio "
              f"{flooded[1] / idle[1]:.1f}x")
    finally:
        if node is not None:
            node.stop()
            node.notify.close()
        wire.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="AXFRs a second, in all")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--strangers", type=int, default=16, help="stranger addresses")
    parser.add_argument("--probes", type=int, default=2000)
    args = parser.parse_args()
    with private_cluster("postgres") as pg:
        run(pg, args)


if __name__ == "__main__":
    main()

"""Commit to answer for the peers: the same one-record change measured on Knot (a DDNS
update) and NSD (its zone file rewritten, then reloaded), beside ``reload_latency.py``'s
curve for valis.

For each of ``--sizes`` (records in one zone, the zone ``reload_latency.zone_rows``
makes), each server serves that zone from a master file on 127.0.0.1, and then takes
``--changes`` changes (``--nsd-changes`` for NSD, whose every change is a reload of the
zone), each to another host and an address no earlier change wrote,
as ``reload_latency.py`` makes them:

- Knot: one DDNS update over UDP (the host's A deleted, the new one added). The update is
  Knot's commit and its apply at once (its NOERROR comes back once the new version is
  served), so the latency counts from sending it; "the change itself" is its round trip.
- NSD: the zone file written anew (a temporary file renamed over it, its mtime a second
  on from the last, so that NSD sees it changed), then ``SIGHUP`` (NSD reloads the zone
  files that changed). The latency counts from the signal; "the change itself" is the
  file's writing, the operator's edit (this script's, not NSD's work).

After each, the changed name is asked over UDP every ``--probe-interval`` seconds until
the new address is answered (``reload_latency_probe.seen_at``), the clock read at the
commit at real-time priority as root, as the valis probe reads it at its commit. p50,
p99 and the maximum are nearest-rank over the changes; the load is the time from
starting the server to the zone's SOA answered. The figures go to a Markdown table
(stdout) and a JSON document (``--json``). Run by ``benchmarks/live peers`` (which
installs Knot and NSD when missing):

    .venv/bin/python benchmarks/reload_latency_peers.py --sizes 1e4,1e5,1e6
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.update
from dns_qps import describe_environment, free_port, knot_conf, nsd_conf, which
from reload_latency import changed_address, changed_owners, zone_rows
from reload_latency_probe import at_real_time, seen_at
from reload_latency_report import Percentiles, parse_sizes

from valis_core.atomic import write_atomic

ZONE = "big.example."
LOAD_TIMEOUT = 600.0
"""At most this long for a server to answer for the zone it loads."""
STOP_TIMEOUT = 30.0

Change = Callable[[str, str], tuple[float, float, float]]
"""Make a change (owner, address) on a server: when making it began, when it was
committed (the latency counts from there) and when it was made (monotonic seconds)."""


def master_lines(records: int) -> list[str]:
    """The zone's master file, a line a record."""
    return [f"{row.owner} {row.ttl} IN {row.rtype} {row.rdata}\n"
            for row in zone_rows(ZONE, records)]


def zone_text(records: int) -> str:
    return "".join(master_lines(records))


def answers_soa(port: int) -> bool:
    query = dns.message.make_query(ZONE, "SOA")
    try:
        response = dns.query.udp(query, "127.0.0.1", port=port, timeout=0.5)
    except (dns.exception.DNSException, OSError):
        return False  # not up yet
    return response.rcode() == dns.rcode.NOERROR and bool(response.answer)


@contextmanager
def running(command: list[str], port: int, log: Path) -> Iterator[tuple[int, float]]:
    """``command`` started, its pid and how long it took to answer for the zone."""
    began = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        while not answers_soa(port):
            if process.poll() is not None:
                raise SystemExit(f"{command[0]} exited {process.returncode}: see {log}")
            if time.monotonic() - began > LOAD_TIMEOUT:
                raise SystemExit(f"{command[0]} did not answer in {LOAD_TIMEOUT:.0f} s")
            time.sleep(0.05)
        yield process.pid, time.monotonic() - began
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def knot_change(port: int) -> Change:
    def change(owner: str, address: str) -> tuple[float, float, float]:
        update = dns.update.UpdateMessage(ZONE)
        update.delete(owner, "A")
        update.add(owner, 300, "A", address)
        with at_real_time():
            began = time.monotonic()
            response = dns.query.udp(update, "127.0.0.1", port=port, timeout=30)
            made = time.monotonic()
        if response.rcode() != dns.rcode.NOERROR:
            raise SystemExit(f"Knot refused an update: {dns.rcode.to_text(response.rcode())}")
        return began, began, made
    return change


def nsd_change(pid: int, path: Path, records: int) -> Change:
    lines = master_lines(records)
    index = {line.split(" ", 1)[0]: i for i, line in enumerate(lines) if " IN A " in line}
    mtime = path.stat().st_mtime_ns

    def change(owner: str, address: str) -> tuple[float, float, float]:
        nonlocal mtime
        began = time.monotonic()
        lines[index[owner]] = f"{owner} 300 IN A {address}\n"
        mtime += 1_000_000_000
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as out:
            out.writelines(lines)
        os.utime(out.name, ns=(mtime, mtime))
        os.replace(out.name, path)
        with at_real_time():
            os.kill(pid, signal.SIGHUP)
            committed = time.monotonic()
        return began, committed, committed
    return change


def measure(change: Change, port: int, records: int, changes: int,
            interval: float) -> tuple[list[float], list[float]]:
    """Each change's latency and the time the change itself took, seconds."""
    hosts = records - 3
    latencies, making = [], []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.05)
        sock.connect(("127.0.0.1", port))
        for n in range(changes):
            owner = changed_owners(ZONE, hosts, n, 1)[0]
            address = changed_address(n)
            began, committed, made = change(owner, address)
            seen = seen_at(sock, owner, address, interval)
            if seen is None:
                raise SystemExit(f"change {n} to {owner} was not answered")
            latencies.append(seen / 1e9 - committed)
            making.append(made - began)
    return latencies, making


def point(server: str, records: int, changes: int, interval: float,
          work: Path) -> dict[str, Any]:
    home = work / f"{server}-{records}"
    home.mkdir()
    path = home / "big.zone"
    path.write_text(zone_text(records))
    port = free_port()
    if server == "knot":
        sections = ("acl:\n  - id: local-update\n    address: 127.0.0.1\n"
                    "    action: update\ntemplate:\n  - id: default\n    acl: local-update\n")
        command = [which("knotd"), "-c", str(knot_conf(home, port, [(ZONE, path)],
                                                       sections=sections))]
    else:
        command = [which("nsd"), "-d", "-c", str(nsd_conf(home, port, [(ZONE, path)]))]
    with running(command, port, home / "server.log") as (pid, load):
        change = knot_change(port) if server == "knot" else nsd_change(pid, path, records)
        latencies, making = measure(change, port, records, changes, interval)
    ms = [round(value * 1000, 3) for value in latencies]
    made_ms = [round(value * 1000, 3) for value in making]
    return {"server": server, "records": records, "changes": len(ms), "load_s": round(load, 3),
            "latency_ms": attrs.asdict(Percentiles.of(ms)),
            "change_ms": attrs.asdict(Percentiles.of(made_ms)), "latencies_ms": ms}


def table(points: Sequence[dict[str, Any]]) -> str:
    lines = ["| server | records | changes | p50 ms | p99 ms | max ms | the change itself, "
             "p50 ms | load s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        latency = p["latency_ms"]
        lines.append(f"| {p['server']} | {p['records']:,} | {p['changes']} | "
                     f"{latency['p50']:.1f} | {latency['p99']:.1f} | {latency['max']:.1f} | "
                     f"{p['change_ms']['p50']:.1f} | {p['load_s']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1e4,1e5,1e6"),
                        help="comma-separated records in the zone (default 1e4,1e5,1e6)")
    parser.add_argument("--servers", default="knot,nsd", help="comma-separated subset")
    parser.add_argument("--changes", type=int, default=200, help="changes a point (Knot)")
    parser.add_argument("--nsd-changes", type=int, default=20,
                        help="changes a point for NSD, each a reload")
    parser.add_argument("--probe-interval", type=float, default=0.0002)
    parser.add_argument("--json", type=Path,
                        default=Path("build/bench/reload_latency_peers.json"))
    args = parser.parse_args(argv)
    servers = [s for s in args.servers.split(",") if s]
    unknown = set(servers) - {"knot", "nsd"}
    if unknown:
        parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
    points = []
    with tempfile.TemporaryDirectory(prefix="valis-peers-") as work:
        for records in sorted(args.sizes):
            for server in servers:
                changes = args.changes if server == "knot" else args.nsd_changes
                found = point(server, records, changes, args.probe_interval, Path(work))
                print(f"{server} {records:,} records: p50 {found['latency_ms']['p50']} ms, "
                      f"p99 {found['latency_ms']['p99']} ms", file=sys.stderr, flush=True)
                points.append(found)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.json, json.dumps({
        "benchmark": "reload_latency_peers", "environment": describe_environment(),
        "settings": {"changes": args.changes, "nsd_changes": args.nsd_changes,
                     "probe_interval": args.probe_interval},
        "points": points}, indent=1).encode() + b"\n")
    print(table(points))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Compare `valis serve` with NSD and Knot under dnsperf on loopback.

Each server serves the same generated zone and is pinned to one core (``taskset``);
dnsperf is pinned to another. All servers run at once (idle unless under load) and are
measured round-robin, ``--rounds`` times each, in two passes of fixed duration; the
report gives the median and the range:

1. saturation: dnsperf with 100 queries outstanding and no rate limit; reports queries
   per second and latency, and the ratio valis/NSD;
2. fixed offered rate (``dnsperf -Q``): reports the server's CPU seconds per answered
   query, from utime+stime in /proc/PID/stat of the server's whole process tree,
   read before and after the run.

Run through ``benchmarks/dns_qps`` (``make bench``), which installs the tools.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import dns.message
import dns.query
import dns.rcode

ROOT = Path(__file__).resolve().parent.parent
ZONE = "bench.example."
QUERY_LINES = 100_000
READY_LIMIT = 30.0


@attrs.frozen
class Run:
    """One dnsperf run against one server."""

    qps: float
    sent: int
    completed: int
    lost: int
    latency_avg: float
    latency_max: float
    rcodes: str
    cpu_seconds: float

    @property
    def cpu_per_query(self) -> float:
        return self.cpu_seconds / self.completed if self.completed else float("nan")


@attrs.frozen
class Server:
    name: str
    command: list[str]
    port: int


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=10_000, help="host names in the zone")
    parser.add_argument("--duration", type=int, default=10, help="seconds per dnsperf run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per server and pass")
    parser.add_argument("--rate", type=int, default=30_000, help="offered rate of pass 2")
    parser.add_argument("--servers", default="valis,nsd,knot", help="comma-separated subset")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--client-core", default="1")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--mix", choices=sorted(MIXES), default="normal",
                        help="the query mix: normal, or a flood inside the served zone")
    args = parser.parse_args(argv)
    builders: dict[str, Callable[[Path, Path, int], Server]] = {
        "valis": valis_server,
        "nsd": nsd_server,
        "knot": knot_server,
    }
    wanted = [name.strip() for name in args.servers.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(builders))
    if unknown:
        parser.error(f"unknown servers: {', '.join(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="valis-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        zone_file = work / "bench.example.zone"
        queries = work / "queries.txt"
        zone_file.write_text(generate_zone(args.names))
        queries.write_text(MIXES[args.mix](args.names, QUERY_LINES))
        print(f"zone {ZONE} with {args.names} names; {QUERY_LINES} queries in the "
              f"{args.mix} mix; "
              f"{args.rounds} rounds of {args.duration}s runs; servers on core "
              f"{args.server_core}, dnsperf on core {args.client_core}", flush=True)
        running: list[tuple[Server, int]] = []
        reference: list[str] | None = None
        for name in wanted:
            server = builders[name](work, zone_file, free_port())
            process = start(server, args, work)
            processes.append(process)
            answers = sample_answers(server.port)
            if reference is not None and answers != reference:
                raise SystemExit(f"{name} answers differently: {answers} != {reference}")
            reference = answers
            running.append((server, process.pid))
        runs = measure_rounds(running, args, queries)
        report(runs, args)
    finally:
        for process in processes:
            stop(process)
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def start(server: Server, args: argparse.Namespace, work: Path) -> subprocess.Popen[bytes]:
    log_path = work / f"{server.name}.log"
    command = ["taskset", "-c", args.server_core, *server.command]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(server, process, log_path)
    except BaseException:
        stop(process)
        raise
    return process


def measure_rounds(
    running: Sequence[tuple[Server, int]], args: argparse.Namespace, queries: Path
) -> dict[str, tuple[list[Run], list[Run]]]:
    """Round-robin over the servers (all idle but the one under load), so a noisy
    neighbour on the machine spreads over all of them rather than one."""
    runs: dict[str, tuple[list[Run], list[Run]]] = {s.name: ([], []) for s, _ in running}
    for round_ in range(1, args.rounds + 1):
        for server, pid in running:
            saturated = dnsperf(server, args, queries, pid, rate=None)
            runs[server.name][0].append(saturated)
            print(f"round {round_} {server.name:6} saturation: {saturated.qps:10.0f} q/s, "
                  f"latency avg {saturated.latency_avg * 1e6:7.0f} us", flush=True)
        for server, pid in running:
            paced = dnsperf(server, args, queries, pid, rate=args.rate)
            runs[server.name][1].append(paced)
            print(f"round {round_} {server.name:6} at {args.rate} q/s offered: "
                  f"{paced.qps:10.0f} q/s, {paced.cpu_per_query * 1e6:6.2f} us CPU/query",
                  flush=True)
    return runs


def wait_ready(server: Server, process: subprocess.Popen[bytes], log_path: Path) -> None:
    limit = time.monotonic() + READY_LIMIT
    probe = dns.message.make_query(ZONE, "SOA")
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{server.name} exited early:\n{log_path.read_text()}")
        try:
            dns.query.udp(probe, "127.0.0.1", port=server.port, timeout=0.2)
            return
        except (dns.exception.Timeout, OSError):
            if time.monotonic() > limit:
                raise SystemExit(
                    f"{server.name} did not answer in {READY_LIMIT}s:\n{log_path.read_text()}"
                ) from None
            time.sleep(0.1)


def sample_answers(port: int) -> list[str]:
    """rcode and answer count for a few queries of each kind, to check that every server
    serves the same zone the same way before it is measured."""
    samples = [("host1", "A"), ("host10", "AAAA"), ("alias20", "A"), ("missing1", "A"),
               ("host3", "MX"), ("", "SOA"), ("", "NS")]
    out = []
    for label, rdtype in samples:
        name = f"{label}.{ZONE}" if label else ZONE
        response = dns.query.udp(dns.message.make_query(name, rdtype), "127.0.0.1",
                                 port=port, timeout=2)
        out.append(f"{name} {rdtype} {dns.rcode.to_text(response.rcode())} "
                   f"{sum(len(rrset) for rrset in response.answer)}")
    return out


def dnsperf(
    server: Server, args: argparse.Namespace, queries: Path, pid: int, *, rate: int | None
) -> Run:
    command = ["taskset", "-c", args.client_core, "dnsperf", "-s", "127.0.0.1",
               "-p", str(server.port), "-d", str(queries), "-l", str(args.duration),
               "-c", "1", "-T", "1", "-q", "100", "-t", "2"]
    if rate is not None:
        command += ["-Q", str(rate)]
    before = tree_cpu_seconds(pid)
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          timeout=args.duration + 60)
    after = tree_cpu_seconds(pid)
    if done.returncode != 0:
        raise SystemExit(f"dnsperf failed against {server.name}:\n{done.stdout}{done.stderr}")
    return parse_dnsperf(done.stdout, after - before)


def parse_dnsperf(output: str, cpu_seconds: float) -> Run:
    def field(pattern: str) -> re.Match[str]:
        match = re.search(pattern, output)
        if match is None:
            raise SystemExit(f"unexpected dnsperf output:\n{output}")
        return match

    latency = field(r"Average Latency \(s\):\s+([\d.]+) \(min [\d.]+, max ([\d.]+)\)")
    return Run(
        qps=float(field(r"Queries per second:\s+([\d.]+)").group(1)),
        sent=int(field(r"Queries sent:\s+(\d+)").group(1)),
        completed=int(field(r"Queries completed:\s+(\d+)").group(1)),
        lost=int(field(r"Queries lost:\s+(\d+)").group(1)),
        latency_avg=float(latency.group(1)),
        latency_max=float(latency.group(2)),
        rcodes=field(r"Response codes:\s+(.*)").group(1).strip(),
        cpu_seconds=cpu_seconds,
    )


def tree_cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and every live descendant (NSD serves from a child)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        ppid = int(fields[1])
        children.setdefault(ppid, []).append(int(entry.name))
        ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += ticks.get(current, 0)
        stack.extend(children.get(current, []))
    return total / os.sysconf("SC_CLK_TCK")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def valis_server(work: Path, zone_file: Path, port: int) -> Server:
    valis = Path(sys.executable).with_name("valis")
    return Server("valis", [str(valis), "serve", "--zone", f"{ZONE}={zone_file}",
                            "--listen", f"127.0.0.1:{port}"], port)


def nsd_server(work: Path, zone_file: Path, port: int) -> Server:
    home = work / "nsd"
    home.mkdir()
    conf = home / "nsd.conf"
    conf.write_text(f"""\
server:
    ip-address: 127.0.0.1@{port}
    port: {port}
    server-count: 1
    username: ""
    chroot: ""
    zonesdir: "{home}"
    database: ""
    pidfile: "{home}/nsd.pid"
    xfrdfile: "{home}/xfrd.state"
    xfrdir: "{home}"
    zonelistfile: "{home}/zone.list"
    logfile: "{home}/nsd.log"
    verbosity: 0
    hide-version: yes
    rrl-ratelimit: 0
    minimal-responses: yes
remote-control:
    control-enable: no
zone:
    name: {ZONE}
    zonefile: "{zone_file}"
""")
    return Server("nsd", [which("nsd"), "-d", "-c", str(conf)], port)


def knot_server(work: Path, zone_file: Path, port: int) -> Server:
    home = work / "knot"
    home.mkdir()
    conf = home / "knot.conf"
    conf.write_text(f"""\
server:
    rundir: "{home}"
    listen: 127.0.0.1@{port}
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "{home}"
log:
  - target: stderr
    any: warning
zone:
  - domain: {ZONE}
    file: "{zone_file}"
    journal-content: none
    zonefile-sync: -1
""")
    return Server("knot", [which("knotd"), "-c", str(conf)], port)


def which(command: str) -> str:
    found = shutil.which(command) or shutil.which(command, path="/usr/sbin:/sbin")
    if found is None:
        raise SystemExit(f"{command} is not installed; run benchmarks/dns_qps")
    return found


def free_port() -> int:
    """A loopback port free for both UDP and TCP right now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = int(tcp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise SystemExit("no free loopback port")


def generate_zone(names: int) -> str:
    lines = [
        f"$ORIGIN {ZONE}",
        "$TTL 3600",
        "@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300",
        "@ IN NS ns1",
        "@ IN NS ns2",
        "@ IN MX 10 mail",
        "ns1 IN A 192.0.2.1",
        "ns2 IN A 192.0.2.2",
        "mail IN A 192.0.2.25",
    ]
    for i in range(1, names + 1):
        lines.append(f"host{i} IN A 198.51.100.{i % 254 + 1}")
        if i % 10 == 0:
            lines.append(f"host{i} IN AAAA 2001:db8::{i:x}")
        if i % 20 == 0:
            lines.append(f"alias{i} IN CNAME host{i}")
    return "\n".join(lines) + "\n"


def generate_queries(names: int, count: int) -> str:
    """The fixed mix (seeded): 60% A of a host, 10% AAAA that exists, 10% A via a CNAME,
    10% NXDOMAIN, 5% NODATA (MX of a host), 5% apex SOA/NS/MX."""
    rng = random.Random(1)
    lines = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.60:
            lines.append(f"host{rng.randint(1, names)}.{ZONE} A")
        elif roll < 0.70:
            lines.append(f"host{rng.randint(1, names // 10) * 10}.{ZONE} AAAA")
        elif roll < 0.80:
            lines.append(f"alias{rng.randint(1, names // 20) * 20}.{ZONE} A")
        elif roll < 0.90:
            lines.append(f"missing{rng.randint(1, names)}.{ZONE} A")
        elif roll < 0.95:
            lines.append(f"host{rng.randint(1, names)}.{ZONE} MX")
        else:
            lines.append(f"{ZONE} {rng.choice(['SOA', 'NS', 'MX'])}")
    return "\n".join(lines) + "\n"


def random_names(names: int, count: int) -> str:
    """A random-name flood inside the zone (seeded): every line a distinct nonexistent
    name (NXDOMAIN), more of them than the response cache holds."""
    rng = random.Random(2)
    return "".join(f"r{rng.getrandbits(48):x}.{ZONE} A\n" for _ in range(count))


def random_types(names: int, count: int) -> str:
    """A random-qtype flood at existing names (seeded): unassigned types 1000-60000 at
    random hosts (NODATA), nearly every (name, type) pair distinct."""
    rng = random.Random(3)
    return "".join(f"host{rng.randint(1, names)}.{ZONE} TYPE{rng.randrange(1000, 60000)}\n"
                   for _ in range(count))


MIXES: dict[str, Callable[[int, int], str]] = {
    "normal": generate_queries,
    "random-name": random_names,
    "random-qtype": random_types,
}


def median_by(runs: Sequence[Run], key: Callable[[Run], float]) -> Run:
    return sorted(runs, key=key)[len(runs) // 2]


def report(runs: dict[str, tuple[list[Run], list[Run]]], args: argparse.Namespace) -> None:
    """Medians over the rounds, with the spread, as a Markdown table."""
    print()
    print(f"| server | q/s, saturation (median; range) | avg latency | lost | "
          f"CPU per query at -Q {args.rate} (median; range) |")
    print("|---|---:|---:|---:|---:|")
    medians: dict[str, tuple[Run, Run]] = {}
    for name, (saturated, paced) in runs.items():
        top = median_by(saturated, lambda run: run.qps)
        frugal = median_by(paced, lambda run: run.cpu_per_query)
        medians[name] = (top, frugal)
        qps = [run.qps for run in saturated]
        cpu = [run.cpu_per_query * 1e6 for run in paced]
        print(f"| {name} | {top.qps:,.0f} ({min(qps):,.0f}-{max(qps):,.0f}) | "
              f"{top.latency_avg * 1e6:,.0f} us | {sum(run.lost for run in saturated)} | "
              f"{frugal.cpu_per_query * 1e6:.1f} us ({min(cpu):.1f}-{max(cpu):.1f}) |")
    if "valis" in medians and "nsd" in medians:
        valis, nsd = medians["valis"], medians["nsd"]
        print()
        best_valis = max(run.qps for run in runs["valis"][0])
        best_nsd = max(run.qps for run in runs["nsd"][0])
        print(f"valis/NSD throughput: {valis[0].qps / nsd[0].qps:.2f}x (medians), "
              f"{best_valis / best_nsd:.2f}x (best runs); CPU per query valis/NSD: "
              f"{valis[1].cpu_per_query / nsd[1].cpu_per_query:.2f}x")
    print()
    for name, (top, _) in medians.items():
        print(f"{name} response codes: {top.rcodes}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Signed answers per second and CPU per signed answer: `valis serve --sign-key` beside
Knot's mod-onlinesign, under dnsperf with DO=1 on loopback.

Both servers serve the zone `make bench` uses (``dns_qps_queries``), signed online with
one combined signing key of algorithm 13 (ECDSA P-256; ``--algorithm 15``: Ed25519):
valis with a key this script makes (`--sign-key`), Knot with the key its policy makes
(`single-type-signing`). Each is pinned to one core and dnsperf (``-D``: DO=1) to
another, as in dns_qps. Before anything is measured, a sample of answers from each
server (data, CNAME, NODATA, nonexistent names, the DNSKEY RRset) is validated with
dnspython against the DNSKEY the server publishes: every RRset in the answer and
authority sections must carry an RRSIG that verifies.

Two mixes: ``cached``, dns_qps's normal mix (10 000 names asked again and again: valis
makes each signature and signed response once and serves it from memory), and
``uncached``, a flood of random nonexistent names, each asked once (each answer's denial
is made and signed for that query: valis's compact denial, Knot's NSEC white lie; every
run asks names of its own, so valis's signature cache never holds one asked before).
For each, two passes as in dns_qps, ``--rounds`` runs each, round-robin over the
servers, after one unmeasured run per server in the cached mix (so it is measured
cached):

1. saturation: 100 queries outstanding, no rate limit: signed answers per second;
2. a fixed offered rate both sustain (``--rate``; by default half the slower server's
   median saturation, rounded down to a thousand): CPU seconds per answer, from the
   server's utime+stime in /proc read before and after the run.

Run through ``benchmarks/signed_qps`` (installs dnsperf and Knot when missing).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
from dns_qps import (  # beside this script
    Server,
    free_port,
    parse_dnsperf,
    start,
    stop_all,
    tree_cpu_seconds,
    which,
)
from dns_qps import knot_server as knot_unsigned
from dns_qps_queries import ZONE, generate_zone, mix_queries
from dns_qps_report import Run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dns_ask import over_udp  # noqa: E402
from tests.property.dnssec_check import validate, validate_sections  # noqa: E402

from valis_core.dns import dnssec  # noqa: E402
from valis_core.dns.dnssec.zone_keys import encode_key  # noqa: E402

KNOT_ALGORITHMS = {13: "ecdsap256sha256", 15: "ed25519"}
UNCACHED_LINES = 1_000_000
"""Random names in the uncached mix: more than the fastest server answers in a run, so
no name is asked twice."""
QUERY_LINES = 100_000
MIXES = {"cached": "normal", "uncached": "random-name"}
"""Each mix here and the dns_qps mix it asks."""
SAMPLES = [("host1", "A"), ("host10", "AAAA"), ("alias20", "A"), ("host3", "MX"),
           ("missing1", "A"), ("r1a2b3c4d5e6", "A"), ("", "SOA"), ("", "NS")]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=10_000, help="host names in the zone")
    parser.add_argument("--duration", type=int, default=10, help="seconds per dnsperf run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per server and pass")
    parser.add_argument("--rate", type=int, default=None,
                        help="offered rate of pass 2 (default: half the slower saturation)")
    parser.add_argument("--mixes", default="cached,uncached", help="comma-separated subset")
    parser.add_argument("--algorithm", type=int, choices=sorted(KNOT_ALGORITHMS), default=13,
                        help="13: ECDSA P-256 (default), 15: Ed25519")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--client-core", default="1")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    mixes = [name.strip() for name in args.mixes.split(",") if name.strip()]
    unknown = sorted(set(mixes) - set(MIXES))
    if unknown:
        parser.error(f"unknown mixes: {', '.join(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="valis-signed-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        zone_file = work / "bench.example.zone"
        zone_file.write_text(generate_zone(args.names))
        servers = [valis_server(work, zone_file, free_port(), args.algorithm),
                   knot_server(work, zone_file, free_port(), args.algorithm)]
        running: list[tuple[Server, int]] = []
        for server in servers:
            process = start(server, args, work)
            processes.append(process)
            checked = check_signed(server.port)
            print(f"{server.name}: {checked}", flush=True)
            running.append((server, process.pid))
        print(f"valis at {describe_checkout()}; {which('knotd')} {knot_version()}; load "
              f"average {os.getloadavg()[0]:.2f}", flush=True)
        print(f"zone {ZONE} with {args.names} names, signed with algorithm {args.algorithm}; "
              f"{args.rounds} rounds of {args.duration}s runs; servers on core "
              f"{args.server_core}, dnsperf -D on core {args.client_core}", flush=True)
        results = {mix: measure(running, args, Queries(work, mix, args.names), mix)
                   for mix in mixes}
        for mix, (runs, rate) in results.items():
            report(mix, runs, rate)
    finally:
        stop_all(processes, work, keep=args.keep)
    return 0


class Queries:
    """The query file for each run of a mix: the cached mix's one file every time, the
    uncached mix's random names under a label of the run's own."""

    def __init__(self, work: Path, mix: str, names: int) -> None:
        self.path = work / f"{mix}.txt"
        self.fresh = mix == "uncached"
        lines = UNCACHED_LINES if self.fresh else QUERY_LINES
        self.base = mix_queries(MIXES[mix], names, lines)
        self.runs = 0

    def next(self) -> Path:
        if self.fresh or not self.path.exists():
            self.runs += 1
            text = self.base
            if self.fresh:
                text = "".join(f"u{self.runs}{line}\n" for line in text.splitlines())
            self.path.write_text(text)
        return self.path


def measure(
    running: Sequence[tuple[Server, int]], args: argparse.Namespace, queries: Queries, mix: str
) -> tuple[dict[str, tuple[list[Run], list[Run]]], int]:
    """Saturation rounds, then rounds at the fixed rate, each round-robin over the
    servers; the rate used."""
    runs: dict[str, tuple[list[Run], list[Run]]] = {s.name: ([], []) for s, _ in running}
    for server, pid in running if not queries.fresh else ():
        warm = dnsperf_signed(server, args, queries.next(), pid, rate=None)
        print(f"{mix} warm-up {server.name:6}: {warm.qps:9.0f} q/s", flush=True)
    for round_ in range(1, args.rounds + 1):
        for server, pid in running:
            saturated = dnsperf_signed(server, args, queries.next(), pid, rate=None)
            runs[server.name][0].append(saturated)
            print(f"{mix} round {round_} {server.name:6} saturation: {saturated.qps:9.0f} "
                  f"q/s, latency avg {saturated.latency_avg * 1e6:7.0f} us", flush=True)
    rate = args.rate or fixed_rate(runs)
    for round_ in range(1, args.rounds + 1):
        for server, pid in running:
            paced = dnsperf_signed(server, args, queries.next(), pid, rate=rate)
            runs[server.name][1].append(paced)
            print(f"{mix} round {round_} {server.name:6} at {rate} q/s offered: "
                  f"{paced.qps:9.0f} q/s, {paced.cpu_per_query * 1e6:6.1f} us CPU/answer",
                  flush=True)
    return runs, rate


def fixed_rate(runs: dict[str, tuple[list[Run], list[Run]]]) -> int:
    """Half the slower server's median saturation, rounded down to a thousand (at least
    500): a rate both answer with CPU to spare."""
    slower = min(median_by(saturated, lambda run: run.qps).qps for saturated, _ in runs.values())
    return max(500, int(slower / 2) // 1000 * 1000)


def dnsperf_signed(
    server: Server, args: argparse.Namespace, queries: Path, pid: int, *, rate: int | None
) -> Run:
    command = ["taskset", "-c", args.client_core, "dnsperf", "-D", "-s", "127.0.0.1",
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


def ask(port: int, name: str, rdtype: str) -> dns.message.Message:
    return over_udp(port, name, rdtype, do=True, timeout=2)


def check_signed(port: int) -> str:
    """Validate the DNSKEY RRset and a sample of answers against it; say what was seen.
    Raises SystemExit at the first RRset that does not verify."""
    apex = dns.name.from_text(ZONE)
    keys = ask(port, ZONE, "DNSKEY")
    dnskey = keys.get_rrset(keys.answer, apex, dns.rdataclass.IN, dns.rdatatype.DNSKEY)
    sig = keys.get_rrset(keys.answer, apex, dns.rdataclass.IN, dns.rdatatype.RRSIG,
                         dns.rdatatype.DNSKEY)
    if dnskey is None or sig is None:
        raise SystemExit(f"the server on port {port} publishes no signed DNSKEY RRset")
    now = time.time()
    name, rdtype = ZONE, "DNSKEY"
    try:
        validate(dnskey, sig, {apex: dnskey}, now=now)
        checked, seen = 1, []
        for label, rdtype in SAMPLES:
            name = f"{label}.{ZONE}" if label else ZONE
            response = ask(port, name, rdtype)
            checked += validate_sections(response, {apex: dnskey}, now=now)
            nsec = any(r.rdtype == dns.rdatatype.NSEC for r in response.authority)
            seen.append(f"{label or '@'} {rdtype} {dns.rcode.to_text(response.rcode())}"
                        + (" +NSEC" if nsec else ""))
    except (dns.dnssec.ValidationFailure, AssertionError) as exc:
        raise SystemExit(f"the server on port {port} answers {name} {rdtype} with a "
                         f"signature that does not validate: {exc}") from None
    tags = ", ".join(str(dns.dnssec.key_id(key)) for key in dnskey)
    return f"{checked} RRsets validated under DNSKEY {tags}; " + "; ".join(seen)


def valis_server(work: Path, zone_file: Path, port: int, algorithm: int) -> Server:
    key = dnssec.ZoneKey(dnssec.generate_key(algorithm))
    key_file = work / f"K{ZONE.rstrip('.')}+{algorithm:03d}+{key.tag:05d}.pem"
    key_file.write_bytes(encode_key(key))
    key_file.chmod(0o600)
    valis = Path(sys.executable).with_name("valis")
    return Server("valis", [str(valis), "serve", "--zone", f"{ZONE}={zone_file}",
                            "--listen", f"127.0.0.1:{port}",
                            "--sign-key", f"{ZONE}={key_file}"], port)


def knot_server(work: Path, zone_file: Path, port: int, algorithm: int) -> Server:
    """knotd with mod-onlinesign: the key its policy makes (one CSK of ``algorithm``)."""
    return knot_unsigned(work, zone_file, port, sections=f"""\
policy:
  - id: bench
    algorithm: {KNOT_ALGORITHMS[algorithm]}
    single-type-signing: on
mod-onlinesign:
  - id: bench
    policy: bench
""", module="mod-onlinesign/bench")


def describe_checkout() -> str:
    """The commit measured, and whether the working tree differs from it."""
    done = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "an unknown commit"


def knot_version() -> str:
    done = subprocess.run([which("knotd"), "-V"], capture_output=True, text=True, check=False)
    return done.stdout.strip().rpartition(" ")[2]


def median_by(runs: Sequence[Run], key: Callable[[Run], float]) -> Run:
    return sorted(runs, key=key)[len(runs) // 2]


def report(mix: str, runs: dict[str, tuple[list[Run], list[Run]]], rate: int) -> None:
    """Medians over the rounds, with the spread, as a Markdown table."""
    print()
    print(f"{mix}:")
    print(f"| server | signed answers/s, saturation (median; range) | avg latency | lost | "
          f"CPU per answer at saturation | CPU per answer at -Q {rate} (median; range) |")
    print("|---|---:|---:|---:|---:|---:|")
    medians: dict[str, tuple[Run, Run]] = {}
    for name, (saturated, paced) in runs.items():
        top = median_by(saturated, lambda run: run.qps)
        frugal = median_by(paced, lambda run: run.cpu_per_query)
        medians[name] = (top, frugal)
        qps = [run.qps for run in saturated]
        cpu = [run.cpu_per_query * 1e6 for run in paced]
        print(f"| {name} | {top.qps:,.0f} ({min(qps):,.0f}-{max(qps):,.0f}) | "
              f"{top.latency_avg * 1e6:,.0f} us | {sum(run.lost for run in saturated)} | "
              f"{top.cpu_per_query * 1e6:.1f} us | "
              f"{frugal.cpu_per_query * 1e6:.1f} us ({min(cpu):.1f}-{max(cpu):.1f}) |")
    if "valis" in medians and "knot" in medians:
        valis, knot = medians["valis"], medians["knot"]
        cpu_ratio = valis[1].cpu_per_query / knot[1].cpu_per_query
        print(f"valis/Knot: throughput {valis[0].qps / knot[0].qps:.2f}x, CPU per answer "
              f"{cpu_ratio if math.isfinite(cpu_ratio) else float('nan'):.2f}x")
    for name, (top, _) in medians.items():
        print(f"{name} response codes: {top.rcodes}; lost at the fixed rate: "
              f"{sum(run.lost for run in runs[name][1])}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

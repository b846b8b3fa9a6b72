"""Compare `valis serve` with NSD and Knot under dnsperf on loopback.

Each server serves the same generated zone and is pinned to one core (``taskset``);
dnsperf is pinned to another. All servers run at once (idle unless under load) and are
measured round-robin, ``--rounds`` times each; for every workload (a query file, see
``dns_qps_queries``) and pass the servers take their turn one after another, so a noisy
neighbour on the machine spreads over all of them rather than one:

1. saturation (the mixes: normal, random-name flood, random-qtype flood): dnsperf with
   100 queries outstanding and no rate limit; queries per second and latency;
2. fixed offered rate (``dnsperf -Q``; the mixes and each query kind on its own): the
   server's CPU seconds per answered query, from utime+stime in /proc/PID/stat of the
   server's whole process tree, read before and after the run.

Before measuring, every server is asked a sample of every workload and must answer it
as the others do. The report (``dns_qps_report``) gives the median and the range and
valis/NSD; the results go to a JSON document and, with ``--plot``, to a PNG of CPU per
query by kind (``dns_qps_plot.py``, run by Debian's python3 with matplotlib).

``--workers N`` runs each server on N cores (issue 29): valis with ``--workers N`` (N UDP
sockets sharing the port, each drained by a worker thread answering what its compiled
table holds without the GIL), NSD with ``server-count: N``, Knot with ``udp-workers: N``;
the servers are then pinned to every core (``--server-core``, default all of them) and
dnsperf, still on its own core, shares one with them, and acts as ``--clients`` clients
(8 by default with more than one worker: the kernel spreads a shared port's datagrams by
their source address, so one client would reach one worker). Compare 1 and 2 workers with
the same ``--clients`` for each server's scaling.

``--changes-per-second N`` measures something else: the normal mix's queries per second
with and without N single-record changes a second to one zone of a 100-zone node, valis
serving from PostgreSQL beside Knot taking the changes by DDNS (``dns_qps_live.py``;
root; ``make bench-live``).

Run through ``benchmarks/dns_qps`` (``make bench``), which installs the tools.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
from dns_qps_queries import (  # beside this script, as dns_qps_report
    KINDS,
    MIXES,
    SINGLE_KINDS,
    ZONE,
    generate_zone,
    kind_queries,
    mix_queries,
)
from dns_qps_report import (
    PACED,
    SATURATION,
    Measured,
    Results,
    Run,
    Workload,
    from_document,
    live_document,
    live_runs,
    live_tables,
    tables,
    to_document,
)

from valis_core.atomic import write_atomic

ROOT = Path(__file__).resolve().parent.parent
QUERY_LINES = 100_000
READY_LIMIT = 30.0
SAMPLES = 12  # questions of each workload every server is asked before measuring
SYSTEM_PYTHON = "/usr/bin/python3"
DEFAULT_JSON = ROOT / "build" / "bench" / "dns_qps.json"
MIX_ORDER = ("normal", "random-name", "random-qtype")
SIGNED_OTHER = "signed.example."


@attrs.frozen
class Server:
    name: str
    command: list[str]
    port: int


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=10_000, help="host names in the zone")
    parser.add_argument("--rounds", type=int, help="runs per server, workload and pass "
                        "(default 3; 1 with --quick)")
    parser.add_argument("--duration", type=int, help="seconds per run of a mix "
                        "(default 6; 2 with --quick)")
    parser.add_argument("--kind-duration", type=int, help="seconds per run of one query "
                        "kind (default 4; 2 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of about two minutes: one short round")
    parser.add_argument("--rate", type=int, default=30_000,
                        help="offered rate (q/s) of the CPU-per-query runs")
    parser.add_argument("--servers", default="valis,nsd,knot", help="comma-separated subset")
    parser.add_argument("--mixes", "--mix", default=",".join(MIX_ORDER),
                        help=f"comma-separated mixes to measure ({', '.join(MIX_ORDER)}), "
                        "or none")
    parser.add_argument("--kinds", default=",".join(SINGLE_KINDS),
                        help=f"comma-separated query kinds to measure alone at the fixed "
                        f"rate ({', '.join(SINGLE_KINDS)}), or none")
    parser.add_argument("--transport", choices=("udp", "tcp"), default="udp",
                        help="what dnsperf asks over (dnsperf -m): tcp keeps its clients' "
                        "connections open and pipelines up to 100 queries on them")
    parser.add_argument("--workers", type=int, default=1,
                        help="cores each server answers on (valis --workers, NSD "
                        "server-count, Knot udp-workers)")
    parser.add_argument("--clients", type=int,
                        help="dnsperf's clients (source ports); default 1, 8 with --workers "
                        "above 1")
    parser.add_argument("--server-core", help="cores the servers are pinned to (default 0; "
                        "every core with --workers above 1)")
    parser.add_argument("--client-core", default="1")
    parser.add_argument("--json", type=Path,
                        help="where the results go (default build/bench/dns_qps.json; "
                        "dns_qps_live.json with --changes-per-second)")
    parser.add_argument("--plot", type=Path,
                        help="also draw CPU per query by kind to this PNG "
                        "(docs/performance-cpu-per-query.png for the docs)")
    parser.add_argument("--from", dest="source", type=Path, metavar="JSON",
                        help="measure nothing: report (and plot) a results document")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--sign", choices=("none", "other", "bench"), default="none",
                        help="valis signs online (algorithm 13, compact denial) another zone "
                        f"it also serves ({SIGNED_OTHER}), or the benchmark's zone itself")
    parser.add_argument("--changes-per-second", type=float, metavar="N",
                        help="measure instead the normal mix's q/s with and without N "
                        "single-record changes a second to one zone of a 100-zone node: "
                        "valis from PostgreSQL, Knot by DDNS (root; dns_qps_live.py)")
    parser.add_argument("--database-core", choices=("server", "client"), default="server",
                        help="with --changes-per-second: where valis's PostgreSQL runs. "
                        "server (default): on the server's core, counted as the node's "
                        "own cost of a change as Knot's DDNS work is; client: beside "
                        "dnsperf, which it then starves")
    parser.add_argument("--query-rate", type=int, metavar="Q",
                        help="with --changes-per-second: dnsperf asks at most Q q/s (-Q) "
                        "instead of saturating, so each phase's server CPU per query (and "
                        "per change) compares at one load")
    args = parser.parse_args(argv)
    if args.source is not None:
        try:
            document = json.loads(args.source.read_text())
            if document.get("benchmark") == "dns_qps_live":
                again = live_document(live_runs(document), document["settings"],
                                      document["environment"])
                print(live_tables(again), end="")
                return 0
            results = from_document(document)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"{args.source}: not a make bench results document "
                             f"({type(error).__name__}: {error})") from None
        print(tables(results), end="")
        if args.plot is not None:
            plot(args.source, args.plot)
        return 0
    if args.workers < 1:
        parser.error("--workers is at least 1")
    builders: dict[str, Callable[[Path, Path, int], Server]] = {
        "valis": functools.partial(valis_server, workers=args.workers),
        "nsd": functools.partial(nsd_server, workers=args.workers),
        "knot": functools.partial(knot_server, workers=args.workers),
    }
    wanted = picked(parser, "servers", args.servers, builders)
    mixes = picked(parser, "mixes", args.mixes, MIX_ORDER)
    kinds = picked(parser, "kinds", args.kinds, SINGLE_KINDS)
    if not wanted or not (mixes or kinds):
        parser.error("nothing to measure")
    quick = args.quick
    args.clients = args.clients or (1 if args.workers == 1 else 8)
    if args.server_core is None:
        args.server_core = "0" if args.workers == 1 else f"0-{(os.cpu_count() or 1) - 1}"
    args.rounds = args.rounds or (1 if quick else 3)
    args.duration = args.duration or (2 if quick else 6)
    args.kind_duration = args.kind_duration or (2 if quick else 4)
    if args.changes_per_second is not None:
        from dns_qps_live import run_live

        return run_live(args)
    args.json = args.json or DEFAULT_JSON
    if args.plot is not None:
        check_plotter()
    workloads = ordered_workloads(mixes, kinds)
    runs_each = sum(args.duration * (1 + w.saturation) if w.name in MIXES
                    else args.kind_duration for w in workloads)
    work = Path(tempfile.mkdtemp(prefix="valis-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        zone_file = work / "bench.example.zone"
        zone_file.write_text(generate_zone(args.names))
        files = {w.name: work / f"{w.name}.queries" for w in workloads}
        for w in workloads:
            text = (mix_queries(w.name, args.names, QUERY_LINES) if w.name in MIXES
                    else kind_queries(w.name, args.names, QUERY_LINES))
            files[w.name].write_text(text)
        print(f"zone {ZONE} with {args.names} names; {len(workloads)} query files of "
              f"{QUERY_LINES} lines ({', '.join(w.name for w in workloads)}); "
              f"{args.rounds} rounds; servers on core {args.server_core}, dnsperf on core "
              f"{args.client_core}; about {args.rounds * len(wanted) * runs_each / 60:.1f} "
              f"min of runs", flush=True)
        environment = describe_environment()
        running: list[tuple[Server, int]] = []
        for name in wanted:
            server = builders[name](work, zone_file, free_port())
            if name == "valis" and args.sign != "none":
                server = signing(server, work, args.sign)
            processes.append(start(server, args, work))
            running.append((server, processes[-1].pid))
        check_answers(running, workloads, files)
        measured = measure_rounds(running, workloads, files, args)
        environment["load_average_after"] = list(os.getloadavg())
        results = Results(
            servers=tuple(wanted),
            workloads=tuple(workloads),
            settings={"names": args.names, "rounds": args.rounds, "duration": args.duration,
                      "kind_duration": args.kind_duration, "rate": args.rate,
                      "outstanding": 100, "query_lines": QUERY_LINES,
                      "server_core": args.server_core, "client_core": args.client_core,
                      "sign": args.sign, "workers": args.workers, "clients": args.clients,
                      "transport": args.transport},
            environment=environment,
            runs=tuple(measured),
        )
    finally:
        stop_all(processes, work, keep=args.keep)
    print()
    print(tables(results), end="")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.json, (json.dumps(to_document(results), indent=1) + "\n").encode())
    print(f"\nresults: {args.json}")
    if args.plot is not None:
        plot(args.json, args.plot)
    return 0


def picked(
    parser: argparse.ArgumentParser,
    what: str,
    text: str,
    known: Sequence[str] | Mapping[str, object],
) -> list[str]:
    """The comma-separated names of ``text`` in the order given; "none" is none."""
    names = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return list(dict.fromkeys(names))


def ordered_workloads(mixes: Sequence[str], kinds: Sequence[str]) -> list[Workload]:
    """The normal mix, then each kind alone, then the floods: the order of the tables and
    of the plot's bars."""
    out = []
    if "normal" in mixes:
        out.append(Workload("normal", "normal mix", saturation=True))
    out += [Workload(kind, KINDS[kind][0], saturation=False) for kind in SINGLE_KINDS
            if kind in kinds]
    out += [Workload(mix, KINDS[mix][0], saturation=True) for mix in MIX_ORDER
            if mix != "normal" and mix in mixes]
    return out


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
    running: Sequence[tuple[Server, int]],
    workloads: Sequence[Workload],
    files: dict[str, Path],
    args: argparse.Namespace,
) -> list[Measured]:
    """Round after round; within one, workload after workload and pass after pass, each
    server in turn (the others idle), so they share the machine's good and bad moments."""
    measured: list[Measured] = []
    for round_ in range(1, args.rounds + 1):
        for w in workloads:
            duration = args.duration if w.name in MIXES else args.kind_duration
            passes = [SATURATION, PACED] if w.saturation else [PACED]
            for pass_ in passes:
                for server, pid in running:
                    rate = args.rate if pass_ == PACED else None
                    run = dnsperf(server, args, files[w.name], pid, rate=rate,
                                  duration=duration)
                    measured.append(Measured(server.name, w.name, pass_, round_, run))
                    if pass_ == SATURATION:
                        figure = (f"{run.qps:9,.0f} q/s, latency avg "
                                  f"{run.latency_avg * 1e6:6,.0f} us")
                    else:
                        figure = (f"{run.qps:9,.0f} q/s at {args.rate:,} offered, "
                                  f"{run.cpu_per_query * 1e6:6.2f} us CPU/query")
                    print(f"round {round_}/{args.rounds} {w.name:12} {pass_:10} "
                          f"{server.name:5}: {figure}", flush=True)
    return measured


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


def check_answers(
    running: Sequence[tuple[Server, int]], workloads: Sequence[Workload], files: dict[str, Path]
) -> None:
    """Every server answers the first distinct questions of every workload alike: the
    same RCODE, AA flag, answer and authority sections. The additional section may differ
    (NSD runs with minimal-responses and so adds no optional glue): counted and shown."""
    asked, extra = 0, dict.fromkeys((s.name for s, _ in running), 0)
    differing: list[str] = []
    for w in workloads:
        questions = list(dict.fromkeys(files[w.name].read_text().splitlines()))[:SAMPLES]
        for line in questions:
            name, rdtype = line.split()
            query = dns.message.make_query(name, rdtype)  # no EDNS, as dnsperf asks
            answers = {s.name: ask(s, query) for s, _ in running}
            sections = {s: strict_sections(r) for s, r in answers.items()}
            if len(set(sections.values())) > 1:
                shown = "\n".join(f"--- {s}:\n{text}" for s, text in sections.items())
                raise SystemExit(f"the servers answer {line} ({w.label}) differently; "
                                 f"fix the zone or the configuration before measuring:\n"
                                 f"{shown}")
            asked += 1
            for s, response in answers.items():
                extra[s] += sum(len(rrset) for rrset in response.additional)
            if len({tuple(sorted(r.to_text() for r in m.additional))
                    for m in answers.values()}) > 1:
                differing.append(line)
    print(f"answers agree on {asked} questions ({len(workloads)} workloads): RCODE, AA, "
          f"answer and authority sections", flush=True)
    if differing:
        counts = ", ".join(f"{s} {n}" for s, n in extra.items())
        print(f"additional sections differ on {len(differing)} of them (records in all: "
              f"{counts}; NSD runs minimal-responses), e.g. {differing[0]}", flush=True)


def strict_sections(response: dns.message.Message) -> str:
    """What must be the same from every server: RCODE, AA and the answer and authority
    sections, each section's RRsets in a stable order."""
    aa = "aa" if response.flags & dns.flags.AA else "-"
    answer = sorted(rrset.to_text() for rrset in response.answer)
    authority = sorted(rrset.to_text() for rrset in response.authority)
    return "\n".join([f"{dns.rcode.to_text(response.rcode())} {aa}", *answer, ";;", *authority])


def ask(server: Server, query: dns.message.Message) -> dns.message.Message:
    try:
        return dns.query.udp(query, "127.0.0.1", port=server.port, timeout=2)
    except (dns.exception.DNSException, OSError) as error:
        raise SystemExit(f"{server.name} did not answer {query.question[0]}: {error}") from None


def describe_environment() -> dict[str, object]:
    """What the figures depend on besides the code: machine, versions, load, the valis
    commit (and whether its source had uncommitted changes: `valis serve` runs the tree)."""
    def output(*command: str) -> str:
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=30, cwd=ROOT)
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        return (done.stdout + done.stderr).strip()

    commit = output("git", "rev-parse", "--short=10", "HEAD")
    changed = [line.split(maxsplit=1)[-1] for line in
               output("git", "status", "--porcelain", "--", "src").splitlines() if line]
    if changed:
        commit += " with uncommitted changes to src"
    udp_path = output(sys.executable, "-c", "from valis_core.dns.answer.fastpath import path_name; "
                      "print(path_name())")
    model = next((line.split(":", 1)[1].strip()
                  for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "valis": commit,
        "uncommitted_src": changed,
        "valis_udp_path": udp_path if "Error" not in udp_path else "?",
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "nsd": output(which("nsd"), "-v").splitlines()[0],
        "knot": output(which("knotd"), "-V"),
        "dnsperf": next((line.strip() for line in output("dnsperf", "-h").splitlines()
                         if "ersion" in line), "?"),
        "load_average_before": list(os.getloadavg()),
    }


def check_plotter() -> None:
    done = subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], capture_output=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"--plot needs Debian's python3-matplotlib for {SYSTEM_PYTHON}; "
                         "benchmarks/dns_qps and benchmarks/live install it (as root)")


def plot(source: Path, out: Path, *, drawer: str = "dns_qps_plot.py") -> None:
    """Draw with Debian's python3 and matplotlib (``drawer``, a script beside this one),
    then put the PNG in place atomically."""
    check_plotter()
    with tempfile.TemporaryDirectory(prefix="valis-bench-plot-") as scratch:
        drawn = Path(scratch) / "plot.png"
        done = subprocess.run([SYSTEM_PYTHON, str(Path(__file__).with_name(drawer)),
                               str(source), str(drawn)], check=False, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"{drawer} failed (exit {done.returncode})")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, drawn.read_bytes())
    print(f"plot: {out}")


def dnsperf(
    server: Server, args: argparse.Namespace, queries: Path, pid: int, *, rate: int | None,
    duration: int,
) -> Run:
    command = ["taskset", "-c", args.client_core, "dnsperf", "-s", "127.0.0.1",
               "-p", str(server.port), "-d", str(queries), "-l", str(duration),
               "-c", str(getattr(args, "clients", None) or 1), "-T", "1", "-q", "100",
               "-t", "2", "-m", getattr(args, "transport", "udp")]
    if rate is not None:
        command += ["-Q", str(rate)]
    before = tree_cpu_seconds(pid)
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          timeout=duration + 60)
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


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    return list(_process_table(pid)[1])


def tree_cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and every live descendant (NSD serves from a child)."""
    ticks, tree = _process_table(pid)
    return sum(ticks.get(each, 0) for each in tree) / os.sysconf("SC_CLK_TCK")


def stat_fields(stat: str) -> list[str]:
    """The fields of a ``/proc/PID/stat`` (or ``task/TID/stat``) line after the command
    name, which may hold spaces and parentheses: the state is the first."""
    return stat[stat.rindex(")") + 2 :].split()


def stat_ticks(fields: Sequence[str]) -> int:
    """utime+stime, in clock ticks, of ``stat_fields``."""
    return int(fields[11]) + int(fields[12])


def _process_table(pid: int) -> tuple[dict[int, int], list[int]]:
    """The CPU ticks of every live process, and ``pid`` with its descendants."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat_fields(stat)
        ppid = int(fields[1])
        children.setdefault(ppid, []).append(int(entry.name))
        ticks[int(entry.name)] = stat_ticks(fields)
    tree, stack = [], [pid]
    while stack:
        current = stack.pop()
        tree.append(current)
        stack.extend(children.get(current, []))
    return ticks, tree


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stop_all(processes: Sequence[subprocess.Popen[bytes]], work: Path, *, keep: bool) -> None:
    """Stop every server started and remove the work directory, unless it is to be kept
    for a look at the servers' files."""
    for process in processes:
        stop(process)
    if keep:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def valis_server(work: Path, zone_file: Path, port: int, *, workers: int = 1) -> Server:
    valis = Path(sys.executable).with_name("valis")
    more = ["--workers", str(workers)] if workers > 1 else []
    return Server("valis", [str(valis), "serve", "--zone", f"{ZONE}={zone_file}",
                            "--listen", f"127.0.0.1:{port}", *more], port)


def signing(server: Server, work: Path, sign: str) -> Server:
    """``server`` (valis) signing a zone with a key made here: ``other``, a small zone it
    also serves (so the benchmark's zone is answered on a node signing some zones);
    ``bench``, the benchmark's zone itself."""
    from valis_core.dns import dnssec
    from valis_core.dns.dnssec.zone_keys import encode_key

    zone = SIGNED_OTHER if sign == "other" else ZONE
    key_file = work / "signing.pem"
    key_file.write_bytes(encode_key(dnssec.ZoneKey(dnssec.generate_key(13))))
    extra = ["--sign-key", f"{zone}={key_file}"]
    if sign == "other":
        other = work / "signed.zone"
        other.write_text(f"$ORIGIN {zone}\n$TTL 3600\n@ IN SOA ns1 hostmaster 1 7200 3600 "
                         "1209600 300\n@ IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.80\n")
        extra = ["--zone", f"{zone}={other}", *extra]
    return attrs.evolve(server, command=[*server.command, *extra])


def nsd_conf(home: Path, port: int, zones: Sequence[tuple[str, Path]], *extra: str,
             workers: int = 1) -> Path:
    """``home/nsd.conf`` for NSD on 127.0.0.1 ``port`` as the benchmarks run it: one
    server process (``workers``: that many, ``server-count``), run as the caller, every
    file under ``home``, no rate limit, no control channel, serving ``zones`` (origin,
    file); ``extra`` are further ``server:`` lines."""
    more = "".join(f"    {line}\n" for line in extra)
    body = "".join(f"zone:\n    name: {origin}\n    zonefile: \"{path}\"\n"
                   for origin, path in zones)
    conf = home / "nsd.conf"
    conf.write_text(f"""\
server:
    ip-address: 127.0.0.1@{port}
    port: {port}
    server-count: {workers}
{more}    username: ""
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
remote-control:
    control-enable: no
{body}""")
    return conf


def nsd_server(work: Path, zone_file: Path, port: int, *, workers: int = 1) -> Server:
    home = work / "nsd"
    home.mkdir()
    conf = nsd_conf(home, port, [(ZONE, zone_file)], "minimal-responses: yes",
                    workers=workers)
    return Server("nsd", [which("nsd"), "-d", "-c", str(conf)], port)


def knot_conf(home: Path, port: int, zones: Sequence[tuple[str, Path]], *,
              sections: str = "", module: str = "", workers: int = 1) -> Path:
    """``home/knot.conf`` for knotd on 127.0.0.1 ``port`` as the benchmarks run it: one
    worker of each kind (``workers`` UDP workers), storage under ``home``, serving
    ``zones`` (origin, file) as they are; ``sections`` are further top-level sections and
    ``module`` each zone's query module."""
    zone_module = f"    module: {module}\n" if module else ""
    body = "".join(f"  - domain: {origin}\n    file: \"{path}\"\n    journal-content: none\n"
                   f"    zonefile-sync: -1\n{zone_module}" for origin, path in zones)
    conf = home / "knot.conf"
    conf.write_text(f"""\
server:
    rundir: "{home}"
    listen: 127.0.0.1@{port}
    udp-workers: {workers}
    tcp-workers: {workers}
    background-workers: 1
database:
    storage: "{home}"
log:
  - target: stderr
    any: warning
{sections}zone:
{body}""")
    return conf


def knot_server(work: Path, zone_file: Path, port: int, *, sections: str = "",
                module: str = "", workers: int = 1) -> Server:
    """knotd serving ``zone_file`` (``knot_conf``; ``module`` is signed_qps's online
    signing)."""
    home = work / "knot"
    home.mkdir()
    conf = knot_conf(home, port, [(ZONE, zone_file)], sections=sections, module=module,
                     workers=workers)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`dns_qps.py --changes-per-second N`: the normal mix's queries per second on one core
while one zone of a 100-zone node takes N single-record changes a second, beside the same
without changes; valis serving from PostgreSQL, Knot taking the changes by DDNS.

The node: ``bench.example.`` (the zone every query asks, ``dns_qps_queries``) and 99
small zones (``z{i}.other.example.``, eight hosts each).

- valis runs as a real resident (the scenario tests' ``tests.scenario.pg.private_cluster``
  and ``tests.scenario.resident_harness``: root, the ``valis`` run account), serving the
  100 zones from a private PostgreSQL cluster; a change is one committed ``UPDATE`` of a
  host's address in ``records`` (the operator-state path: the resident hears it by
  ``NOTIFY`` and patches the zone it is in).
- Knot serves the same 100 zones from files, updates allowed from 127.0.0.1; a change is
  one DDNS update (delete the host's A, add the new one) sent by one long-running
  ``knsupdate`` (knot-dnsutils) fed a ``send`` per change.
- NSD cannot change a zone without a reload (``nsd-control reload`` re-reads the zone
  file whole): it is named in the table, not measured.

The server under test is pinned to ``--server-core`` (the resident with every thread);
dnsperf, this script (the pacing loop) and ``knsupdate`` to ``--client-core``.
valis's PostgreSQL runs on the server's core (``--database-core server``, the default):
a change's cost to the node is the resident's work and the database's, as Knot's is its
own DDNS work, and the client core stays dnsperf's; ``--database-core client`` puts it
beside dnsperf instead, which then starves the load generator. Each round, each
server takes its turn in every phase: no changes, N changes/s to another zone of the
node, N changes/s to the zone the queries ask (each change to another host, each time a
new address); a phase is one saturation run of dnsperf (100 outstanding, as dns_qps).
The pacing loop is bounded by the run's length and N x that many changes; after a
changing run the last change must be answered (within ``SETTLE`` seconds) or the run is
refused. Queries and changes go to loopback only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import dns.message
import dns.query
from dns_qps import (  # beside this script
    Server,
    check_answers,
    describe_environment,
    dnsperf,
    free_port,
    knot_conf,
    process_tree,
    start,
    stat_fields,
    stat_ticks,
    stop_all,
    which,
)
from dns_qps_queries import ZONE, generate_zone, mix_queries
from dns_qps_report import (
    LIVE_PHASES,
    LiveRun,
    Workload,
    live_document,
    live_tables,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.scenario.pg import PgCluster, private_cluster  # noqa: E402
from tests.scenario.resident_harness import harness, make_state_dir, site_facts  # noqa: E402

from valis_core.atomic import write_atomic  # noqa: E402
from valis_core.dns import parse_zone_text  # noqa: E402
from valis_core.operator_state.schema import migrate  # noqa: E402
from valis_core.operator_state.zones import replace_zone  # noqa: E402

DEFAULT_JSON = ROOT / "build" / "bench" / "dns_qps_live.json"
QUERY_LINES = 100_000
OTHER_ZONES = 99
OTHER_HOSTS = 8
OWNER_STEP = 7919
"""Each change moves to the host this many on (a prime: every host in turn)."""
WARM_UP = 2
"""Seconds of the normal mix each server answers, unmeasured, before the first round."""
SETTLE = 10.0
"""Seconds after a changing run within which its last change must be answered."""


def other_zone(i: int) -> str:
    return f"z{i}.other.example."


def other_zone_text(origin: str) -> str:
    hosts = "".join(f"h{i} IN A 192.0.2.{i + 10}\n" for i in range(OTHER_HOSTS))
    return (f"$ORIGIN {origin}\n$TTL 3600\n@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n"
            f"@ IN NS ns1\nns1 IN A 192.0.2.1\n{hosts}")


def change_target(phase: str, names: int, n: int) -> tuple[str, str, str]:
    """Change ``n`` of a phase: (zone, owner, new address)."""
    address = f"198.{18 + (n >> 16 & 1)}.{n >> 8 & 255}.{n & 255}"
    if phase == "queried":
        return ZONE, f"host{n * OWNER_STEP % names + 1}.{ZONE}", address
    zone = other_zone(0)
    return zone, f"h{n * OWNER_STEP % OTHER_HOSTS}.{zone}", address


def round_offset(round_: int, rate: float, seconds: float) -> int:
    """Where round ``round_``'s changes start (``change_target``'s ``n``): each round goes
    on from the last one's, which repeated would write each host the address it already
    holds, a change that changes nothing."""
    return (round_ - 1) * (int(rate * seconds) + 1)


def paced(rate: float, seconds: float, change: Callable[[int], None]) -> int:
    """Call ``change(0)``, ``change(1)`` ... at ``rate`` a second for ``seconds`` (never
    more than rate x seconds + 1 calls); how many were made. Late calls are not made up
    in a burst beyond the schedule: each waits for its own time."""
    began = time.monotonic()
    limit = int(rate * seconds) + 1
    made = 0
    while made < limit:
        due = began + made / rate
        now = time.monotonic()
        if now - began > seconds:
            break
        if due > now:
            time.sleep(due - now)
        change(made)
        made += 1
    return made


class ValisChanges:
    """Changes committed to the node's PostgreSQL, one ``UPDATE`` each."""

    def __init__(self, pg: PgCluster, dsn: str) -> None:
        self.conn = pg.connect(dsn, autocommit=True)

    def __call__(self, zone: str, owner: str, address: str) -> None:
        self.conn.execute(
            "UPDATE records SET rdata = %s WHERE zone = %s AND owner = %s AND rtype = 'A'",
            (address, zone, owner),
        )

    def close(self) -> None:
        self.conn.close()


class KnotChanges:
    """DDNS updates sent to Knot by one ``knsupdate`` read from a pipe."""

    def __init__(self, port: int, log: Path) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen([which("knsupdate")], stdin=subprocess.PIPE,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = port

    def __call__(self, zone: str, owner: str, address: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            f"server 127.0.0.1 {self.port}\nzone {zone}\nupdate delete {owner} A\n"
            f"update add {owner} 300 A {address}\nsend\n".encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(b"quit\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=SETTLE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def answered(port: int, owner: str, address: str) -> bool:
    """Whether ``owner`` A is answered with ``address`` within ``SETTLE`` seconds."""
    deadline = time.monotonic() + SETTLE
    query = dns.message.make_query(owner, "A")
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            response = dns.query.udp(query, "127.0.0.1", port=port, timeout=0.5)
            if any(r.to_text() == address for rrset in response.answer for r in rrset):
                return True
        time.sleep(0.02)
    return False


def pin(pid: int, core: str) -> None:
    """Pin ``pid``, its threads and its descendants to ``core`` (later threads and
    children inherit it)."""
    for each in process_tree(pid):
        subprocess.run(["taskset", "-a", "-p", "-c", core, str(each)], check=False,
                       capture_output=True, timeout=30)


@contextlib.contextmanager
def valis_node(
    work: Path, zones: dict[str, str], core: str, database_core: str
) -> Iterator[tuple[Server, int, ValisChanges, Parts]]:
    """A resident serving ``zones`` (origin: master file text) from a private cluster,
    the cluster's processes on ``database_core``."""
    with private_cluster() as pg, harness() as running:
        postmaster = int(pg.cluster.postmaster_pid())
        pin(postmaster, database_core)
        dsn = pg.new_database("live")
        with pg.connect(dsn) as conn:
            migrate(conn)
            for origin, text in zones.items():
                replace_zone(conn, parse_zone_text(text, origin))
        # The harness gives the resident a clean environment: a PYTHONPATH this run was
        # given (another checkout's src, for a before/after) goes to it too.
        source = os.environ.get("PYTHONPATH")
        resident = running.start(make_state_dir(running.workdir),
                                 site_facts(dsn, zones=",".join(zones)),
                                 extra_env={"PYTHONPATH": source} if source else None)
        resident.wait_ready()
        assert resident.port is not None
        pin(resident.pid, core)
        changes = ValisChanges(pg, dsn)
        try:
            yield (Server("valis", [], resident.port), resident.pid, changes,
                   valis_parts(resident.pid, postmaster))
        finally:
            changes.close()


def knot_node(work: Path, zones: dict[str, str], args: argparse.Namespace) -> tuple[
        Server, subprocess.Popen[bytes]]:
    """knotd serving ``zones`` from files, DDNS allowed from 127.0.0.1 (every zone)."""
    home = work / "knot"
    home.mkdir()
    files = []
    for origin, text in zones.items():
        path = home / f"{origin}zone"
        path.write_text(text)
        files.append((origin, path))
    port = free_port()
    sections = ("acl:\n  - id: local-update\n    address: 127.0.0.1\n    action: update\n"
                "template:\n  - id: default\n    acl: local-update\n")
    conf = knot_conf(home, port, files, sections=sections)
    server = Server("knot", [which("knotd"), "-c", str(conf)], port)
    return server, start(server, args, work)


Change = Callable[[str, str, str], None]
"""Commit one change to a server's zone: (zone, owner, new address)."""
Parts = Callable[[], dict[str, int]]
"""A server's CPU so far in clock ticks, by part: which threads and processes a change's
cost lands on (``valis_parts``, ``whole_part``)."""
TICK = 1.0 / os.sysconf("SC_CLK_TCK")


def thread_ticks(pid: int) -> dict[int, int]:
    """Each live thread of ``pid``: its user and system clock ticks so far."""
    out: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                out[int(tid)] = stat_ticks(stat_fields(stat))
    return out


def valis_parts(resident: int, postmaster: int) -> Parts:
    """The resident's trio thread (its main thread), its other threads (the UDP worker
    answering, and ``trio.to_thread``'s), and every process of its PostgreSQL cluster."""
    def parts() -> dict[str, int]:
        threads = thread_ticks(resident)
        return {"resident: trio thread": threads.get(resident, 0),
                "resident: other threads": sum(ticks for tid, ticks in threads.items()
                                               if tid != resident),
                "PostgreSQL": sum(sum(thread_ticks(each).values())
                                  for each in process_tree(postmaster))}
    return parts


def whole_part(name: str, pid: int) -> Parts:
    """Every thread of ``pid`` as one part."""
    return lambda: {name: sum(thread_ticks(pid).values())}


def spent(before: dict[str, int], after: dict[str, int]) -> tuple[tuple[str, float], ...]:
    """CPU seconds of each part between two readings (a part gone since: none)."""
    return tuple((name, (ticks - before.get(name, 0)) * TICK) for name, ticks in after.items())


def one_run(
    server: Server, pid: int, change: Change, parts: Parts, *, phase: str, round_: int,
    queries: Path, args: argparse.Namespace,
) -> LiveRun:
    """One run of dnsperf (saturating, or at ``--query-rate``), the phase's changes paced
    beside it in a thread."""
    made: list[int] = []
    last: list[tuple[str, str, str]] = []
    offset = round_offset(round_, args.changes_per_second, args.duration)

    def one(n: int) -> None:
        target = change_target(phase, args.names, offset + n)
        change(*target)
        last[:] = [target]

    pacer = threading.Thread(
        target=lambda: made.append(paced(args.changes_per_second, args.duration, one)),
        daemon=True)
    if phase != "none":
        pacer.start()
    began, parts_began = core_times(), parts()
    run = dnsperf(server, args, queries, pid, rate=getattr(args, "query_rate", None),
                  duration=args.duration)
    cores, cpu = busy_shares(began, core_times()), spent(parts_began, parts())
    if phase != "none":
        pacer.join(args.duration + 60)
        if not made or not last or not answered(server.port, *last[0][1:]):
            raise SystemExit(f"{server.name}: the last change of the {phase} phase was not "
                             f"answered within {SETTLE:.0f}s")
    return LiveRun(server.name, phase, round_, run, made[0] if made else 0, cores, cpu)


def core_times() -> list[tuple[int, int]]:
    """Each core's (busy, all) jiffies so far, from /proc/stat (idle and iowait not busy)."""
    out = []
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(f) for f in fields[:8]]
            out.append((sum(ticks) - ticks[3] - ticks[4], sum(ticks)))
    return out


def busy_shares(began: list[tuple[int, int]], ended: list[tuple[int, int]]) -> tuple[float, ...]:
    """Each core's busy share between two ``core_times``."""
    return tuple((b1 - b0) / (a1 - a0) if a1 > a0 else 0.0
                 for (b0, a0), (b1, a1) in zip(began, ended, strict=True))


def measure(
    running: Sequence[tuple[Server, int, Change, Parts]], queries: Path,
    args: argparse.Namespace,
) -> list[LiveRun]:
    """Round after round, phase after phase, each server in turn (the others idle)."""
    out: list[LiveRun] = []
    for round_ in range(1, args.rounds + 1):
        for phase in LIVE_PHASES:
            for server, pid, change, parts in running:
                out.append(one_run(server, pid, change, parts, phase=phase, round_=round_,
                                   queries=queries, args=args))
                print(f"round {round_}/{args.rounds} {phase:8} {server.name:5}: "
                      f"{out[-1].run.qps:9,.0f} q/s, {out[-1].changes} changes, cores busy "
                      f"{' / '.join(f'{c:.2f}' for c in out[-1].cores)}", flush=True)
    return out


def run_live(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise SystemExit("--changes-per-second needs root: valis runs as a real resident "
                         "(the run account) on a private PostgreSQL cluster")
    if args.changes_per_second <= 0:
        raise SystemExit("--changes-per-second is above 0")
    wanted = [s.strip() for s in args.servers.split(",") if s.strip() in ("valis", "knot")]
    os.sched_setaffinity(0, {int(args.client_core)})
    database_core = args.server_core if args.database_core == "server" else args.client_core
    zones = {ZONE: generate_zone(args.names)}
    zones |= {other_zone(i): other_zone_text(other_zone(i)) for i in range(OTHER_ZONES)}
    work = Path(tempfile.mkdtemp(prefix="valis-bench-live-"))
    processes: list[subprocess.Popen[bytes]] = []
    environment = describe_environment()
    try:
        queries = work / "normal.queries"
        queries.write_text(mix_queries("normal", args.names, QUERY_LINES))
        with contextlib.ExitStack() as stack:
            running: list[tuple[Server, int, Change, Parts]] = []
            if "valis" in wanted:
                running.append(stack.enter_context(
                    valis_node(work, zones, args.server_core, database_core)))
            if "knot" in wanted:
                server, process = knot_node(work, zones, args)
                processes.append(process)
                knot_changes = KnotChanges(server.port, work / "knsupdate.log")
                stack.callback(knot_changes.close)
                running.append((server, process.pid, knot_changes,
                                whole_part("knotd", process.pid)))
            check_answers([(s, p) for s, p, _, _ in running],
                          [Workload("normal", "normal mix", saturation=True)],
                          {"normal": queries})
            print(f"{len(zones)} zones; {args.changes_per_second} changes/s; "
                  f"{args.rounds} rounds of {args.duration}s; servers on core "
                  f"{args.server_core}, dnsperf and the changes on {args.client_core}, "
                  f"valis's PostgreSQL on {database_core}",
                  flush=True)
            for server, pid, _, _ in running:  # unmeasured: every server warm alike
                dnsperf(server, args, queries, pid, rate=None, duration=WARM_UP)
            runs = measure(running, queries, args)
    finally:
        stop_all(processes, work, keep=args.keep)
    environment["load_average_after"] = list(os.getloadavg())
    settings = {"names": args.names, "zones": len(zones), "rounds": args.rounds,
                "duration": args.duration, "changes_per_second": args.changes_per_second,
                "outstanding": 100, "server_core": args.server_core,
                "client_core": args.client_core, "database_core": database_core,
                "query_rate": getattr(args, "query_rate", None)}
    document = live_document(runs, settings, environment)
    print()
    print(live_tables(document), end="")
    target = args.json or DEFAULT_JSON
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, (json.dumps(document, indent=1) + "\n").encode())
    print(f"\nresults: {target}")
    return 0

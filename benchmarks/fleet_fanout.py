"""A fleet of real secondaries following one node: a committed change to every
secondary's answer, the node's own UDP latency meanwhile, and a restart in the middle.

Stands up a private PostgreSQL cluster holding ``--zones`` small zones, a real resident as
the ``valis`` account in one network namespace (``tests/scenario/transfer_wire.py``'s
``Wire`` and ``start_node``), and ``--secondaries`` real secondaries in the other,
alternately Knot and NSD (Debian's), each on its own address (192.0.2.10 on) with its own
TSIG key, listed for every zone; NSD's zone list is what ``valis zone secondary nsd-conf``
writes from operator state. Once every secondary answers every zone's SOA, each
round commits one new record to a zone drawn at random (the commit raises the serial) and
asks every secondary for it over UDP from its namespace every 5 ms until all answer (at
most 30 s); a prober beside it asks the node itself (a record of another zone) every
2 ms, before any secondary starts, through the first sync, idle, and throughout the
rounds, and times each reply to the kernel's
arrival stamp (the prober's own wait for a core is not the node's latency). With
``--node-core`` the node runs on one core and everything else on the others, as
secondaries on other hosts would leave it. Then the node is restarted on its state
directory while the secondaries keep running, and ``--rounds`` more changes are made:
the node's log says how many transfers after the restart were whole zones.

Reported: per server kind, the seconds from the commit returning to each secondary's
first answer (median, p99, max over every secondary and round); the node's UDP p50/p99
idle and during the rounds; transfers by kind before and after the restart. Needs root.
Every loop is bounded in count and time. Figures for docs/transfers.md, not a test.

    .venv/bin/python benchmarks/fleet_fanout.py --zones 200 --secondaries 20 --rounds 20
    .venv/bin/python benchmarks/fleet_fanout.py ... --node-core 0
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import multiprocessing
import os
import random
import re
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import dns.message
import dns.rcode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.nsd_conf import nsd_server
from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user, private_cluster
from tests.scenario.proving_ground import run
from tests.scenario.resident_harness import Resident, inside_netns, make_state_dir, site_facts
from tests.scenario.transfer_wire import NODE_IP, Wire, start_node

from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.nsd_secondary import nsd_conf as nsd_secondary_conf
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.secondaries import Secondary, add_secondary, serving_secondaries
from valis_core.operator_state.zones import replace_zone

BOUND = 30.0
SYNC_BOUND = 180.0
POLL = 0.005
PROBE_EVERY = 0.002
FIRST_ADDRESS = 10


def zone_name(i: int) -> str:
    return f"z{i}.fleet.test."


def address(i: int) -> str:
    return f"192.0.2.{FIRST_ADDRESS + i}"


def key_name(i: int) -> str:
    return f"fleet-{i}."


def secret(i: int) -> bytes:
    return bytes((i + k) % 256 for k in range(32))


def knot_conf(directory: Path, i: int, zones: list[str]) -> str:
    entries = "".join(f"  - domain: {zone}\n" for zone in zones)
    return f"""server:
    listen: {address(i)}@53
    rundir: "{directory}"
    user: root:root
    background-workers: 1
    udp-workers: 1
    tcp-workers: 1
log:
  - target: "{directory}/knot.log"
    any: info
database:
    storage: "{directory}"
control:
    listen: "{directory}/knot.sock"
key:
  - id: {key_name(i)}
    algorithm: hmac-sha256
    secret: {base64.b64encode(secret(i)).decode()}
remote:
  - id: primary
    address: {NODE_IP}@53
    via: {address(i)}
    key: {key_name(i)}
acl:
  - id: notify-from-primary
    address: {NODE_IP}
    key: {key_name(i)}
    action: notify
template:
  - id: default
    storage: "{directory}"
    master: primary
    acl: notify-from-primary
zone:
{entries}"""


def nsd_conf(directory: Path, i: int, listed: Sequence[Secondary]) -> str:
    """NSD's configuration as ``valis zone secondary nsd-conf`` writes it from operator
    state, each zone's transfers sent from the secondary's own address (its namespace
    holds all twenty; a host of its own would not need it)."""
    zones = nsd_secondary_conf(listed, address(i), [NODE_IP]).replace(
        "    request-xfr:", f"    outgoing-interface: {address(i)}\n    request-xfr:")
    return nsd_server(directory, address(i), "port: 53", "server-count: 1") + zones


def kind(i: int) -> str:
    return "knot" if i % 2 == 0 else "nsd"


def start_secondary(wire: Wire, workdir: Path, i: int, zones: list[str],
                    listed: Sequence[Secondary], *, core: str | None) -> subprocess.Popen[bytes]:
    directory = Path(tempfile.mkdtemp(prefix=f"{kind(i)}-{i}-", dir=workdir))
    conf = directory / "server.conf"
    if kind(i) == "knot":
        conf.write_text(knot_conf(directory, i, zones))
        command = ["knotd", "-c", str(conf)]
    else:
        conf.write_text(nsd_conf(directory, i, listed))
        command = ["nsd", "-d", "-c", str(conf)]
    pinned = [] if core is None else ["taskset", "-c", core]
    return subprocess.Popen(
        ["ip", "netns", "exec", wire.secondary, *pinned, *command],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def answered(reply: bytes, query_id: int | None) -> bool:
    """Whether ``reply`` answers the query ``query_id`` with NOERROR and an answer, read
    from its header alone: the asker parses thousands of replies a second on the cores
    it shares, and a whole parse would be load the node's latency then shows."""
    if len(reply) < 12:
        return False
    reply_id, flags, _, answers = struct.unpack("!HHHH", reply[:8])
    return bool(reply_id == query_id and flags & 0x800F == 0x8000 and answers > 0)


class Asker:
    """UDP sockets in the secondaries' namespace, one per secondary address."""

    def __init__(self, wire: Wire, count: int) -> None:
        self.socks: list[socket.socket] = []
        with inside_netns(wire.secondary):
            for _ in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self.socks.append(sock)

    def until_all_answer(self, name: str, rdtype: str, bound: float) -> dict[int, float]:
        """Ask every secondary for ``name`` every ``POLL`` s until each answers it
        (NOERROR with an answer); the seconds each took. Raises past ``bound``."""
        started = time.monotonic()
        took: dict[int, float] = {}
        waiting: dict[int, int] = {}
        last_sent = 0.0
        for _ in range(int(bound / POLL) + 1):
            now = time.monotonic()
            if now - started > bound:
                break
            if now - last_sent >= POLL:
                last_sent = now
                for i, sock in enumerate(self.socks):
                    if i in took:
                        continue
                    query = dns.message.make_query(name, rdtype)
                    waiting[i] = query.id
                    sock.sendto(query.to_wire(), (address(i), 53))
            readable, _, _ = select.select(
                [s for i, s in enumerate(self.socks) if i not in took], [], [], POLL)
            for sock in readable:
                i = self.socks.index(sock)
                while True:
                    try:
                        data = sock.recv(65535)
                    except BlockingIOError:
                        break
                    if answered(data, waiting.get(i)) and i not in took:
                        took[i] = time.monotonic() - started
            if len(took) == len(self.socks):
                return took
        missing = sorted(set(range(len(self.socks))) - set(took))
        raise SystemExit(f"secondaries {missing} did not answer {name} {rdtype} within "
                         f"{bound:.0f}s")

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


SO_TIMESTAMPNS = 35
"""Linux's option (``asm-generic/socket.h``) for the time a datagram reached the socket,
which Python's ``socket`` module does not name."""


def arrival(ancillary: list[tuple[int, int, bytes]], sent_ns: int) -> float:
    """Seconds from ``sent_ns`` (``time.time_ns``) to the kernel's arrival stamp of the
    reply: the node's latency, not the prober's own wait to be scheduled after it."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return float(seconds * 1_000_000_000 + nanoseconds - sent_ns) / 1e9
    return (time.time_ns() - sent_ns) / 1e9


class Prober:
    """Asks the node for one name every ``PROBE_EVERY`` s, from the secondaries'
    namespace; keeps each latency (a lost query counts as 1 s), to the kernel's arrival
    stamp of the reply (``arrival``). In a process of its own:
    a thread here would take each latency only once it had the GIL back from the
    threads asking the secondaries (milliseconds while they parse answers), timing the
    benchmark rather than the node."""

    def __init__(self, wire: Wire, name: str) -> None:
        with inside_netns(wire.secondary):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(1.0)
        self.name = name
        context = multiprocessing.get_context("fork")
        self._ours, self._theirs = context.Pipe()
        self._process = context.Process(target=self._run, daemon=True)

    def start(self) -> None:
        self._process.start()

    def _run(self) -> None:
        latencies: list[float] = []
        limit = time.monotonic() + 3600.0
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        while time.monotonic() < limit:
            if self._theirs.poll():
                if self._theirs.recv() == "stop":
                    return
                self._theirs.send(latencies)
                latencies = []
            query = dns.message.make_query(self.name, "A")
            wire = query.to_wire()
            sent = time.time_ns()
            self.sock.sendto(wire, (NODE_IP, 53))
            try:
                while True:
                    data, ancillary, _, _ = self.sock.recvmsg(65535, socket.CMSG_SPACE(16))
                    took = arrival(ancillary, sent)
                    if dns.message.from_wire(data).id == query.id:
                        break
                latencies.append(took)
            except (TimeoutError, OSError):
                latencies.append(1.0)
            time.sleep(PROBE_EVERY)

    def take(self) -> list[float]:
        """The latencies since the last take."""
        self._ours.send("take")
        if not self._ours.poll(10.0):
            raise SystemExit("the prober did not answer within 10s")
        taken: list[float] = self._ours.recv()
        return taken

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._ours.send("stop")
        self._process.join(5.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5.0)


def pin(node: Resident, core: str | None) -> None:
    """Every thread of ``node`` (and each it starts later, which inherits it) on ``core``."""
    if core is not None:
        run(["taskset", "-a", "-c", "-p", core, str(node.pid)])


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def transfers(log: str) -> dict[str, int]:
    return {
        "AXFR": len(re.findall(r"zone transfer: AXFR of ", log)),
        "IXFR from the journal": len(re.findall(r"zone transfer: IXFR from serial ", log)),
        "IXFR answered whole": len(re.findall(r"zone transfer: IXFR \(whole zone\)", log)),
    }


def commit_rounds(pg: PgCluster, dsn: str, asker: Asker, zones: list[str], rounds: int, *,
                  tag: str, seconds: dict[str, list[float]]) -> None:
    rng = random.Random(rounds)
    for r in range(rounds):
        zone = rng.choice(zones)
        name = f"{tag}{r}.{zone}"
        with pg.connect(dsn) as conn, conn.transaction():
            conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                         " VALUES (%s, %s, 'A', 300, '203.0.113.7')", (zone, name))
        for i, took in asker.until_all_answer(name, "A", BOUND).items():
            seconds[kind(i)].append(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zones", type=int, default=200)
    parser.add_argument("--secondaries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--secondaries-core", metavar="CORES",
                        help="run the secondaries on these cores only (taskset -c), as "
                        "secondaries elsewhere would leave the node's cores to it; default: "
                        "anywhere, sharing the node's")
    parser.add_argument("--node-core", metavar="CORE",
                        help="run the node on this core and everything else (the "
                        "secondaries, the askers, the prober, PostgreSQL) on the others, so "
                        "the node's latency shows its own work rather than the benchmark's; "
                        "default: no pinning")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (logs of the node and secondaries)")
    args = parser.parse_args()
    zones = [zone_name(i) for i in range(args.zones)]
    if args.node_core is not None:
        others = os.sched_getaffinity(0) - {int(args.node_core)}
        if not others:
            raise SystemExit("--node-core leaves no core for the rest")
        os.sched_setaffinity(0, others)  # what starts from here on inherits it
    with private_cluster("postgres") as pg:
        dsn = pg.new_database("fleet")
        with pg.connect(dsn) as conn:
            migrate(conn)
            for zone in zones:
                replace_zone(conn, parse_zone_text(soa_zone(zone, extra="www IN A 192.0.2.80\n")))
            for i in range(args.secondaries):
                for zone in zones:
                    add_secondary(conn, Secondary(zone, address(i), key_name(i), "hmac-sha256",
                                                  secret(i)))
        account = ensure_system_user(RUN_USER)
        workdir = Path(tempfile.mkdtemp(prefix="valis-fleet-", dir="/tmp"))
        os.chown(workdir, account.pw_uid, account.pw_gid)
        os.chmod(workdir, 0o755)
        wire = Wire()
        secondaries: list[subprocess.Popen[bytes]] = []
        node: Resident | None = None
        asker = prober = None
        try:
            wire.build()
            for i in range(args.secondaries):
                run(["ip", "-n", wire.secondary, "addr", "add", f"{address(i)}/24", "dev",
                     f"vxs-{wire.tag}"])
            state_dir = make_state_dir(workdir)
            facts = site_facts(dsn, zones=",".join(zones))
            node = start_node(wire, state_dir, facts, workdir)
            pin(node, args.node_core)
            node.wait_ready(120.0)
            with pg.connect(dsn) as conn:
                listed = serving_secondaries(conn)
            prober = Prober(wire, f"www.{zones[0]}")
            prober.start()
            time.sleep(5.0)
            alone = prober.take()
            secondaries = [start_secondary(wire, workdir, i, zones, listed,
                                           core=args.secondaries_core)
                           for i in range(args.secondaries)]
            asker = Asker(wire, args.secondaries)
            synced = time.monotonic()
            for zone in zones:
                asker.until_all_answer(zone, "SOA", SYNC_BOUND)
            syncing = prober.take()
            print(f"{args.secondaries} secondaries ({(args.secondaries + 1) // 2} Knot, "
                  f"{args.secondaries // 2} NSD), {args.zones} zones: all answering every "
                  f"zone {time.monotonic() - synced:.1f}s after start")
            ratio = quantile(syncing, 0.99) / quantile(alone, 0.99)
            print(f"node UDP latency (ms): no secondaries p50 {1000 * quantile(alone, 0.5):.2f} "
                  f"p99 {1000 * quantile(alone, 0.99):.2f}; during the first sync p50 "
                  f"{1000 * quantile(syncing, 0.5):.2f} p99 {1000 * quantile(syncing, 0.99):.2f} "
                  f"({len(syncing)} queries; {ratio:.1f}x)")
            time.sleep(5.0)
            idle = prober.take()
            seconds: dict[str, list[float]] = {"knot": [], "nsd": []}
            commit_rounds(pg, dsn, asker, zones, args.rounds, tag="r", seconds=seconds)
            busy = prober.take()
            before = transfers(node.stderr())

            # A change committed, and the node stopped before its NOTIFYs are all answered.
            middle = f"mid.{zones[-1]}"
            committed = time.monotonic()
            with pg.connect(dsn) as conn, conn.transaction():
                conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                             " VALUES (%s, %s, 'A', 300, '203.0.113.8')", (zones[-1], middle))
            node.stop()
            node.notify.close()
            node = start_node(wire, state_dir, facts, workdir)
            pin(node, args.node_core)
            node.wait_ready(120.0)
            restarted = time.monotonic() - committed
            caught_up = max(asker.until_all_answer(middle, "A", BOUND).values())
            after_seconds: dict[str, list[float]] = {"knot": [], "nsd": []}
            commit_rounds(pg, dsn, asker, zones, args.rounds, tag="s", seconds=after_seconds)
            after = transfers(node.stderr())

            print(f"node UDP latency (ms): idle p50 {1000 * quantile(idle, 0.5):.2f} "
                  f"p99 {1000 * quantile(idle, 0.99):.2f} ({len(idle)} queries); during the "
                  f"rounds p50 {1000 * quantile(busy, 0.5):.2f} p99 "
                  f"{1000 * quantile(busy, 0.99):.2f} ({len(busy)} queries; "
                  f"{quantile(busy, 0.99) / quantile(idle, 0.99):.1f}x idle)")
            print(f"node UDP latency during the rounds (ms): p90 "
                  f"{1000 * quantile(busy, 0.9):.2f} p99.9 {1000 * quantile(busy, 0.999):.2f} "
                  f"max {1000 * max(busy):.2f}; over 1 ms: "
                  f"{sum(1 for took in busy if took > 0.001)}")
            for label, figures in (("before the restart", seconds),
                                   ("after the restart", after_seconds)):
                for server, values in figures.items():
                    if values:
                        print(f"{label}, {server}: commit to answer median "
                              f"{statistics.median(values):.3f}s p99 "
                              f"{quantile(values, 0.99):.3f}s max {max(values):.3f}s "
                              f"({len(values)} answers)")
            print(f"a change committed as the node stopped: the node ready again "
                  f"{restarted:.2f}s after the commit, every secondary answering it "
                  f"{restarted + caught_up:.2f}s after the commit")
            print(f"transfers before the restart: {before}")
            print(f"transfers after the restart: {after}")
        finally:
            if prober is not None:
                prober.close()
            if asker is not None:
                asker.close()
            for proc in secondaries:
                proc.terminate()
            for proc in secondaries:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if node is not None:
                node.stop()
                node.notify.close()
            wire.cleanup()
            if args.keep:
                print(f"kept: {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Hostile clients against `valis serve` and NSD on loopback: what each costs the server
and whether honest clients are still served.

Each server serves tests/scenario/data/example.com.zone on its own loopback port, pinned
to one core (``taskset``); the clients run on another. Per server, in turn:

1. cost per message: the server's CPU time (utime+stime of its process tree, from
   /proc) over a run of one kind of message, sent one at a time and each answered
   before the next: a plain UDP query, a UDP query carrying 75 records in its additional
   section, a plain TCP query, and a 65 KB TCP message (a query whose additional
   section is stuffed with A records);
2. honest UDP latency: p50 and p99 of the round-trip time of plain UDP queries sent one
   at a time (the prober at a real-time priority when run as root), with the server
   idle, then while 50 TCP clients pipeline queries as fast as the server reads them
   (a lost query counts as its 1 s timeout);
3. slow clients: 130 TCP clients each sending one query every 8 s (reconnecting at
   their next query when the server closes them) hold the server's connections, while
   new clients arrive every half second, each asking one query with a 2 s limit:
   how many are served.

Every loop is bounded in count and time; every address is 127.0.0.1. NSD runs in the
foreground from a generated configuration (``tcp-count: 128``, the same cap as valis),
as an ordinary process this script starts and stops. Run from the repository root as
root (NSD is installed when missing):

    .venv/bin/python benchmarks/hostile_clients.py
    .venv/bin/python benchmarks/hostile_clients.py --baseline-src /tmp/valis-old/src

``--baseline-src`` also measures `valis serve` from another source tree (e.g. an older
commit unpacked with ``git archive``), run with this venv's interpreter.

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path

import attrs
import dns.message
import dns.rcode
from dns_qps import free_port, nsd_conf, tree_cpu_seconds, which  # beside this script

ROOT = Path(__file__).resolve().parent.parent
ZONE = "example.com."
ZONE_FILE = ROOT / "tests" / "scenario" / "data" / "example.com.zone"
READY_LIMIT = 30.0
REPLY_LIMIT = 1.0
A_RECORD = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + bytes((192, 0, 2, 7))


@attrs.frozen
class Server:
    name: str
    command: list[str]
    port: int
    env: dict[str, str] | None = None


@attrs.frozen
class Cost:
    """Server CPU per message over a run, the RCODE of the first reply, and how many
    messages got no reply within ``REPLY_LIMIT``."""

    seconds_per_message: float
    messages: int
    rcode: str
    unanswered: int


@attrs.frozen
class Latency:
    p50: float
    p99: float
    answered: int
    lost: int


@attrs.frozen
class Result:
    costs: dict[str, Cost]
    idle: Latency
    abused: Latency
    pipelined_answers_per_second: float
    newcomers_served: int
    newcomers: int
    slow_clients: dict[str, int]


# --- messages --------------------------------------------------------------------------


def plain_query(qid: int = 1) -> bytes:
    message = dns.message.make_query(f"www.{ZONE}", "A", use_edns=False)
    message.id = qid
    return message.to_wire()


def stuffed(records: int) -> bytes:
    """A plain query with ``records`` A records in its additional section."""
    wire = plain_query()
    return wire[:10] + struct.pack("!H", records) + wire[12:] + A_RECORD * records


def framed(message: bytes) -> bytes:
    return len(message).to_bytes(2, "big") + message


def rcode_text(reply: bytes | None) -> str:
    if reply is None:
        return "no reply"
    if len(reply) < 4:
        return "short reply"
    return dns.rcode.to_text(dns.rcode.Rcode.make(reply[3] & 0x0F))


# --- servers ---------------------------------------------------------------------------


def valis_server(port: int, src: Path | None) -> Server:
    listen = ["--zone", str(ZONE_FILE), "--listen", f"127.0.0.1:{port}"]
    if src is None:
        valis = Path(sys.executable).with_name("valis")
        return Server("valis", [str(valis), "serve", *listen], port)
    env = dict(os.environ, PYTHONPATH=str(src))
    command = [sys.executable, "-c", "from valis_cli.main import main; main()", "serve"]
    return Server("valis@baseline", [*command, *listen], port, env)


def nsd_server(work: Path, port: int) -> Server:
    home = work / "nsd"
    home.mkdir()
    conf = nsd_conf(home, port, [(ZONE, ZONE_FILE)], "tcp-count: 128")
    return Server("nsd", [which("nsd"), "-d", "-c", str(conf)], port)


@contextlib.contextmanager
def running(server: Server, core: str, work: Path) -> Iterator[int]:
    """Start ``server`` pinned to ``core``; yield its pid once it answers; stop it."""
    log_path = work / f"{server.name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["taskset", "-c", core, *server.command],
            stdout=log, stderr=subprocess.STDOUT, env=server.env,
        )
    try:
        limit = time.monotonic() + READY_LIMIT
        while udp_ask(server.port, plain_query()) is None:
            if process.poll() is not None or time.monotonic() > limit:
                raise SystemExit(f"{server.name} did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield process.pid
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --- one client at a time ---------------------------------------------------------------

Exchanges = Generator[Callable[[], "bytes | None"], None, None]
"""Yields one function that sends a message and returns the reply (``None``: none)."""


def udp_ask(port: int, message: bytes) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_LIMIT)
        sock.sendto(message, ("127.0.0.1", port))
        try:
            return sock.recv(65535)
        except OSError:
            return None


def receive_frame(sock: socket.socket) -> bytes | None:
    """One length-prefixed message, or ``None`` on EOF, reset or timeout."""
    buffer = b""
    try:
        while len(buffer) < 2 or len(buffer) < 2 + int.from_bytes(buffer[:2], "big"):
            chunk = sock.recv(65535)
            if not chunk:
                return None
            buffer += chunk
    except OSError:
        return None
    return buffer[2:]


def udp_exchanger(port: int, message: bytes) -> Exchanges:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_LIMIT)
        sock.connect(("127.0.0.1", port))

        def exchange() -> bytes | None:
            sock.send(message)
            try:
                return sock.recv(65535)
            except OSError:
                return None

        yield exchange


def tcp_exchanger(port: int, message: bytes) -> Exchanges:
    """One connection, reopened if the server closes it."""
    data = framed(message)
    held: list[socket.socket] = []

    def exchange() -> bytes | None:
        if not held:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=REPLY_LIMIT))
        sock = held[0]
        try:
            sock.sendall(data)
        except OSError:
            reply = None
        else:
            reply = receive_frame(sock)
        if reply is None:
            held.pop().close()
        return reply

    try:
        yield exchange
    finally:
        for sock in held:
            sock.close()


def cost(pid: int, exchangers: Exchanges, count: int, seconds: float) -> Cost:
    """Server CPU per message over up to ``count`` exchanges in up to ``seconds``."""
    with contextlib.closing(exchangers):
        exchange = next(exchangers)
        first = exchange()
        sent = unanswered = 0
        before = tree_cpu_seconds(pid)
        deadline = time.monotonic() + seconds
        while sent < count and time.monotonic() < deadline:
            if exchange() is None:
                unanswered += 1
            sent += 1
        spent = tree_cpu_seconds(pid) - before
    return Cost(spent / sent, sent, rcode_text(first), unanswered)


def probe(port: int, count: int, seconds: float, gap: float = 0.002) -> Latency:
    """Round-trip times of up to ``count`` plain UDP queries, one at a time."""
    with realtime():
        return probe_now(port, count, seconds, gap)


@contextlib.contextmanager
def realtime() -> Iterator[None]:
    """Run the prober at a real-time priority (as root), so other work on the client's
    core does not add its scheduling delays to the round-trip times. The prober never
    spins: it sleeps between queries and blocks for each reply."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def probe_now(port: int, count: int, seconds: float, gap: float) -> Latency:
    times: list[float] = []
    lost = 0
    deadline = time.monotonic() + seconds
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("127.0.0.1", port))
        for qid in range(count):
            if time.monotonic() > deadline:
                break
            message = plain_query(qid & 0xFFFF)
            start = time.perf_counter()
            sock.send(message)
            if await_reply(sock, message[:2], start + REPLY_LIMIT):
                times.append(time.perf_counter() - start)
            else:
                lost += 1
                times.append(REPLY_LIMIT)
            time.sleep(gap)
    times.sort()
    return Latency(
        p50=statistics.median(times),
        p99=times[min(len(times) - 1, int(len(times) * 0.99))],
        answered=len(times) - lost,
        lost=lost,
    )


def await_reply(sock: socket.socket, qid: bytes, until: float) -> bool:
    """Whether the reply with ID ``qid`` arrives before ``until`` (late replies to
    earlier queries are skipped)."""
    for _ in range(1000):
        left = until - time.perf_counter()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            reply = sock.recv(65535)
        except OSError:
            return False
        if reply[:2] == qid:
            return True
    return False


# --- crowds of clients (run as child processes) -----------------------------------------


def pipeline_crowd(port: int, clients: int, seconds: float) -> dict[str, int]:
    """``clients`` TCP connections writing pipelined queries whenever the server will
    take them and reading every answer, for ``seconds``; the bytes of answers read."""
    chunk = framed(plain_query()) * 1800  # about 60 KB per write
    selector = selectors.DefaultSelector()
    received = 0
    for _ in range(clients):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, [0])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and selector.get_map():
        for key, events in selector.select(timeout=0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if events & selectors.EVENT_WRITE:
                sent = key.data
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    sent[0] = (sent[0] + sock.send(chunk[sent[0] :])) % len(chunk)
            if events & selectors.EVENT_READ:
                try:
                    data = sock.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(sock)
                    sock.close()
                    continue
                received += len(data)
    for key in list(selector.get_map().values()):
        selector.unregister(key.fileobj)
        key.fileobj.close()  # type: ignore[union-attr]
    return {"bytes": received}


@attrs.define
class SlowClient:
    sock: socket.socket | None
    next_query: float


def slow_crowd(port: int, clients: int, interval: float, seconds: float) -> dict[str, int]:
    """``clients`` TCP clients each asking one query every ``interval`` seconds on a
    connection it keeps open; one the server closes reconnects at its next query."""
    stats = {"connects": 0, "closed_by_server": 0, "answers": 0, "connect_failures": 0}
    query = framed(plain_query())
    start = time.monotonic()
    crowd = [SlowClient(None, start + interval * i / clients) for i in range(clients)]
    for client in crowd:  # all connect at once and hold their connection
        client.sock = connect(port, stats)
    deadline = start + seconds
    selector = selectors.DefaultSelector()
    for client in crowd:
        if client.sock is not None:
            selector.register(client.sock, selectors.EVENT_READ, client)
    while time.monotonic() < deadline:
        now = time.monotonic()
        for client in crowd:
            if now < client.next_query:
                continue
            client.next_query = now + interval
            if client.sock is None:
                client.sock = connect(port, stats)
                if client.sock is None:
                    continue
                selector.register(client.sock, selectors.EVENT_READ, client)
            try:
                client.sock.send(query)
            except OSError:
                drop(selector, client, stats)
        for key, _ in selector.select(timeout=0.05):
            client = key.data
            assert client.sock is not None
            try:
                data = client.sock.recv(65535)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                stats["answers"] += 1
            else:
                drop(selector, client, stats)
    for client in crowd:
        if client.sock is not None:
            client.sock.close()
    return stats


def connect(port: int, stats: dict[str, int]) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        stats["connect_failures"] += 1
        return None
    sock.setblocking(False)
    stats["connects"] += 1
    return sock


def drop(selector: selectors.BaseSelector, client: SlowClient, stats: dict[str, int]) -> None:
    assert client.sock is not None
    selector.unregister(client.sock)
    client.sock.close()
    client.sock = None
    stats["closed_by_server"] += 1


def newcomers(port: int, count: int, gap: float) -> int:
    """How many of ``count`` new clients, one every ``gap`` seconds, get their one TCP
    query answered within 2 s."""
    served = 0
    for _ in range(count):
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(framed(plain_query()))
                reply = receive_frame(sock)
        except OSError:
            reply = None
        if reply is not None and rcode_text(reply) == "NOERROR":
            served += 1
        time.sleep(max(0.0, gap - (time.monotonic() - start)))
    return served


def crowd_process(role: str, port: int, core: str, **options: float) -> subprocess.Popen[str]:
    args = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    return subprocess.Popen(
        ["taskset", "-c", core, sys.executable, __file__, "--role", role,
         f"--port={port}", *args],
        stdout=subprocess.PIPE, text=True,
    )


def crowd_report(process: subprocess.Popen[str], limit: float) -> dict[str, int]:
    try:
        out, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return {}
    try:
        report: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return report


# --- the campaign -------------------------------------------------------------------------


def measure(server: Server, args: argparse.Namespace, work: Path) -> Result:
    port = server.port
    with running(server, args.server_core, work) as pid:
        print(f"{server.name}: cost per message", flush=True)
        costs = {
            "plain UDP query": cost(pid, udp_exchanger(port, plain_query()), 20_000, 10),
            "UDP query, 75 additional records": cost(
                pid, udp_exchanger(port, stuffed(75)), 20_000, 10
            ),
            "plain TCP query": cost(pid, tcp_exchanger(port, plain_query()), 20_000, 10),
            "65 KB TCP message": cost(pid, tcp_exchanger(port, stuffed(4093)), 3_000, 15),
        }
        print(f"{server.name}: honest UDP latency, idle", flush=True)
        idle = probe(port, args.probes, 20)
        print(f"{server.name}: honest UDP latency, {args.pipeliners} TCP clients pipelining",
              flush=True)
        crowd = crowd_process("pipeline", port, args.client_core, clients=args.pipeliners,
                              seconds=args.abuse_seconds)
        time.sleep(1.0)
        abused = probe(port, args.probes, args.abuse_seconds - 2)
        pipelined = crowd_report(crowd, args.abuse_seconds + 30)
        answer = udp_ask(port, plain_query()) or b""
        print(f"{server.name}: {args.slow_clients} slow clients and newcomers", flush=True)
        slow = crowd_process("slow", port, args.client_core, clients=args.slow_clients,
                             interval=8, seconds=args.slow_seconds)
        time.sleep(3.0)
        served = newcomers(port, args.newcomers, 0.5)
        slow_stats = crowd_report(slow, args.slow_seconds + 30)
    rate = pipelined.get("bytes", 0) / (2 + len(answer)) / args.abuse_seconds
    return Result(costs, idle, abused, rate, served, args.newcomers, slow_stats)


def report(results: dict[str, Result], args: argparse.Namespace) -> None:
    names = list(results)
    print()
    print("| measure | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))

    def row(label: str, cell: Callable[[Result], str]) -> None:
        print(f"| {label} | " + " | ".join(cell(results[name]) for name in names) + " |")

    for label in next(iter(results.values())).costs:
        row(f"server CPU per {label}",
            lambda r, label=label: cost_cell(r.costs[label]))
    row("honest UDP p50 / p99, idle",
        lambda r: f"{r.idle.p50 * 1e3:.2f} / {r.idle.p99 * 1e3:.2f} ms")
    row(f"honest UDP p50 / p99, {args.pipeliners} TCP clients pipelining",
        lambda r: f"{r.abused.p50 * 1e3:.2f} / {r.abused.p99 * 1e3:.2f} ms"
                  f"{f' ({r.abused.lost} lost)' if r.abused.lost else ''}")
    row("p99 under TCP abuse / p99 idle", lambda r: f"{r.abused.p99 / r.idle.p99:.1f}x")
    row("answers/s to the pipelining clients",
        lambda r: f"{r.pipelined_answers_per_second:,.0f}")
    row(f"new TCP clients served while {args.slow_clients} slow clients hold connections",
        lambda r: f"{r.newcomers_served}/{r.newcomers}")
    row("slow clients' connections closed by the server",
        lambda r: str(r.slow_clients.get("closed_by_server", "?")))


def cost_cell(measured: Cost) -> str:
    lost = f", {measured.unanswered} unanswered" if measured.unanswered else ""
    return (f"{measured.seconds_per_message * 1e6:,.1f} us "
            f"({measured.rcode}, n={measured.messages}{lost})")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="valis,nsd", help="valis and/or nsd")
    parser.add_argument("--baseline-src", type=Path, help="also run valis from this src/")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--client-core", default="1")
    parser.add_argument("--probes", type=int, default=2000, help="honest queries per run")
    parser.add_argument("--pipeliners", type=int, default=50)
    parser.add_argument("--abuse-seconds", type=float, default=12.0)
    parser.add_argument("--slow-clients", type=int, default=130)
    parser.add_argument("--slow-seconds", type=float, default=22.0)
    parser.add_argument("--newcomers", type=int, default=30)
    # The crowds, when this script runs itself as a child process.
    parser.add_argument("--role", choices=("pipeline", "slow"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "pipeline":
        print(json.dumps(pipeline_crowd(args.port, int(args.clients), args.seconds)))
        return 0
    if args.role == "slow":
        print(json.dumps(slow_crowd(args.port, int(args.clients), args.interval, args.seconds)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="valis-hostile-"))
    try:
        servers: list[Server] = []
        for name in (n.strip() for n in args.servers.split(",") if n.strip()):
            if name == "valis":
                servers.append(valis_server(free_port(), None))
            elif name == "nsd":
                servers.append(nsd_server(work, free_port()))
            else:
                parser.error(f"unknown server {name}")
        if args.baseline_src is not None:
            servers.append(valis_server(free_port(), args.baseline_src.resolve()))
        raise_file_limit(4096)
        results = {server.name: measure(server, args, work) for server in servers}
        report(results, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def raise_file_limit(wanted: int) -> None:
    """Room for the crowds' sockets (the children inherit the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

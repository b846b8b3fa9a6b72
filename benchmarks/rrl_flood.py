"""Response rate limiting under a reflection flood, on loopback: how many replies reach
the victim, and how honest clients from other prefixes fare.

The server is valis's serve loops (UDP and TCP on one 127.0.0.1 port) serving
tests/scenario/data/example.com.zone, pinned to core 0 (``taskset``), in turn with rate
limiting off and on (``--rate`` responses/s, ``--slip``; IPv4 /24). On core 1:

- the flood: queries for www.example.com A from eight addresses in 127.0.1.0/24 (on
  loopback the "spoofed" victim is simply the source; a real spoofed flood looks the
  same to the server), paced at ``--offered`` queries/s for ``--seconds`` (with
  ``--random-names``, 1000 random names in the zone instead, all NXDOMAIN; with
  ``--wildcard``, 1000 random names under a wildcard the zone is given, ``*.w``, all
  answered, and a third run limits with each name its own bucket, as valis did before
  wildcard answers were classed by their wildcard); the flooder also reads what comes
  back, as the victim would: answers, TC replies, bytes;
- honest clients: one query at a time from 127.0.2.0/24 (www A) and 127.0.3.0/24 (a
  missing name), alternately, each prefix asking ``HONEST_RATE`` a second (under the
  limit, as a resolver with a cache would), 1 s timeout each: the share answered (a TC
  reply or none counts as unanswered) and the p50/p99 round trip.

Every loop is bounded in count and time; every address is on loopback. Run from the
repository root (root is not needed):

    .venv/bin/python benchmarks/rrl_flood.py
    .venv/bin/python benchmarks/rrl_flood.py --offered 30000 --rate 20 --slip 2
    .venv/bin/python benchmarks/rrl_flood.py --wildcard

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import dns.flags
import dns.message
from dns_qps import free_port, tree_cpu_seconds  # beside this script

ROOT = Path(__file__).resolve().parent.parent
ZONE_FILE = ROOT / "tests" / "scenario" / "data" / "example.com.zone"
VICTIMS = tuple(f"127.0.1.{n}" for n in range(2, 10))
HONEST = ("127.0.2.9", "127.0.3.9")
READY_LIMIT = 30.0
REPLY_LIMIT = 1.0
HONEST_RATE = 10
WILDCARD_RECORD = "*.w IN A 192.0.2.99\n"


@attrs.frozen
class Outcome:
    label: str
    offered: int
    answers: int
    truncated: int
    reply_bytes: int
    honest_asked: int
    honest_answered: int
    p50_ms: float
    p99_ms: float
    server_cpu: float
    seconds: float


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offered", type=int, default=20000, help="flood queries/s")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--slip", type=int, default=2)
    parser.add_argument("--random-names", action="store_true",
                        help="flood random names in the zone (NXDOMAIN) instead of www A")
    parser.add_argument("--wildcard", action="store_true",
                        help="flood random names under a wildcard (answered) instead")
    parser.add_argument("--role", choices=("serve", "flood"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--per-name", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "serve":
        return serve(args.port, args.rate, args.slip, args.wildcard, args.per_name)
    if args.role == "flood":
        return flood(args.port, args.offered, args.seconds, args.random_names, args.wildcard)
    outcomes = [run("off", None, args), run("on", args.rate, args)]
    if args.wildcard:
        outcomes.insert(1, run("on, a bucket per name", args.rate, args, per_name=True))
    report(outcomes, args)
    return 0


def serve(port: int, rate: int, slip: int, wildcard: bool, per_name: bool) -> int:
    """The server role: both serve loops, the UDP one limited when ``rate`` > 0 (as the
    resident limits, or with ``per_name`` without looking wildcards up)."""
    import trio

    from valis_core.dns.answer.snapshot import IndexHolder
    from valis_core.dns.serve import serve_tcp, serve_udp
    from valis_core.dns.serve.limited_udp import limiter_for
    from valis_core.dns.serve.rrl import RateLimiter, RrlSettings
    from valis_core.dns.zone import ZoneIndex

    text = ZONE_FILE.read_text() + (WILDCARD_RECORD if wildcard else "")
    holder = IndexHolder(ZoneIndex.from_zone_text(text, "example.com."))
    settings = RrlSettings(rate=rate, slip=slip) if rate > 0 else None
    limiter = limiter_for(settings, holder)
    if per_name and settings is not None:
        limiter = RateLimiter(settings, os.urandom(16))

    async def main() -> None:
        udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        await udp.bind(("127.0.0.1", port))
        await tcp.bind(("127.0.0.1", port))
        tcp.listen(128)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(serve_udp, udp, holder, limiter=limiter))
            nursery.start_soon(serve_tcp, tcp, holder)
            print("ready", flush=True)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)
    return 0


def flood(port: int, offered: int, seconds: float, random_names: bool, wildcard: bool) -> int:
    """The flood role: paced queries from the victim prefix; prints what came back."""
    names = ["www.example.com."]
    if random_names or wildcard:
        under = "w.example.com." if wildcard else "example.com."
        names = [f"{os.urandom(6).hex()}.{under}" for _ in range(1000)]
    queries = [dns.message.make_query(n, "A", use_edns=False).to_wire() for n in names]
    sockets = []
    for source in VICTIMS:
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind((source, 0))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        client.setblocking(False)
        sockets.append(client)
    answers = truncated = size = sent = 0

    def drain() -> None:
        nonlocal answers, truncated, size
        for client in sockets:
            for _ in range(10000):
                try:
                    reply = client.recv(65535)
                except BlockingIOError:
                    break
                size += len(reply)
                if reply[2] & 0x02:
                    truncated += 1
                else:
                    answers += 1

    start = time.monotonic()
    total = int(offered * seconds)
    while sent < total:
        due = min(total, int((time.monotonic() - start) * offered))
        while sent < due:
            query = queries[sent % len(queries)]
            with_id = (sent & 0xFFFF).to_bytes(2, "big") + query[2:]
            with contextlib.suppress(BlockingIOError):
                sockets[sent % len(sockets)].sendto(with_id, ("127.0.0.1", port))
            sent += 1
        drain()
        time.sleep(0.0005)
    settle = time.monotonic() + REPLY_LIMIT
    while time.monotonic() < settle:
        drain()
        time.sleep(0.01)
    print(json.dumps({"sent": sent, "answers": answers, "truncated": truncated,
                      "bytes": size, "seconds": time.monotonic() - start}), flush=True)
    return 0


def run(
    label: str, rate: int | None, args: argparse.Namespace, *, per_name: bool = False
) -> Outcome:
    port = free_port()
    me = [sys.executable, __file__, "--port", str(port)]
    wildcard = ["--wildcard"] if args.wildcard else []
    server = subprocess.Popen(
        ["taskset", "-c", "0", *me, "--role", "serve", "--rate", str(rate or 0),
         "--slip", str(args.slip), *wildcard, *(["--per-name"] if per_name else [])],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        assert server.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(server.stdout, selectors.EVENT_READ)
        if not selector.select(READY_LIMIT) or server.stdout.readline().strip() != "ready":
            raise SystemExit(f"the {label} server did not come up")
        cpu_before = tree_cpu_seconds(server.pid)
        flooder = subprocess.Popen(
            ["taskset", "-c", "1", *me, "--role", "flood", "--offered", str(args.offered),
             "--seconds", str(args.seconds), *wildcard,
             *(["--random-names"] if args.random_names else [])],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        times, asked = honest_probe(port, args.seconds)
        out, _ = flooder.communicate(timeout=args.seconds + 30)
        cpu = tree_cpu_seconds(server.pid) - cpu_before
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    figures = json.loads(out)
    ordered = sorted(times) or [float("nan")]
    return Outcome(
        label=label,
        offered=figures["sent"],
        answers=figures["answers"],
        truncated=figures["truncated"],
        reply_bytes=figures["bytes"],
        honest_asked=asked,
        honest_answered=len(times),
        p50_ms=statistics.median(ordered) * 1000,
        p99_ms=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        server_cpu=cpu,
        seconds=figures["seconds"],
    )


def honest_probe(port: int, seconds: float) -> tuple[list[float], int]:
    """One query at a time from the honest prefixes while the flood runs: the round
    trips of those answered (a TC or no reply counts as unanswered), and how many asked."""
    os.sched_setaffinity(0, {1})
    clients = []
    for source in HONEST:
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind((source, 0))
        client.settimeout(REPLY_LIMIT)
        clients.append(client)
    names = ("www.example.com.", "nope.example.com.")
    times: list[float] = []
    asked = 0
    time.sleep(0.2)  # let the flood start first
    end = time.monotonic() + seconds - 0.4
    try:
        for n in range(100000):
            if time.monotonic() >= end:
                break
            query = dns.message.make_query(names[n % 2], "A", use_edns=False)
            client = clients[n % 2]
            asked += 1
            began = time.perf_counter()
            client.sendto(query.to_wire(), ("127.0.0.1", port))
            try:
                reply = dns.message.from_wire(client.recv(65535))
            except TimeoutError:
                continue
            if reply.id == query.id and not reply.flags & dns.flags.TC:
                times.append(time.perf_counter() - began)
            time.sleep(max(0.0, began + 1 / (2 * HONEST_RATE) - time.perf_counter()))
    finally:
        for client in clients:
            client.close()
    return times, asked


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    what = "random names in example.com" if args.random_names else "www.example.com A"
    if args.wildcard:
        what = "random names under *.w.example.com"
    print(f"flood: {what} from {len(VICTIMS)} addresses of 127.0.1.0/24 at "
          f"{args.offered}/s for {args.seconds:g} s; rate limit {args.rate}/s, slip "
          f"{args.slip}; server on core 0, clients on core 1")
    print("| RRL | offered | answers to victim | TC replies | bytes to victim | "
          "honest answered | honest p50 | honest p99 | server CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for o in outcomes:
        print(
            f"| {o.label} | {o.offered} | {o.answers} | {o.truncated} | {o.reply_bytes} | "
            f"{o.honest_answered}/{o.honest_asked} | {o.p50_ms:.2f} ms | {o.p99_ms:.2f} ms | "
            f"{o.server_cpu:.2f} s |"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""UDP latency on :53 while the DoH edge is abused, the edge and :53 in one trio loop.

A server process runs what the resident runs on its one thread: ``serve_udp`` and
``serve_tcp`` on a loopback DNS pair and ``serve_edge`` (the node's default bounds) on a
loopback TLS listener, over tests/scenario/data/example.com.zone, with a certificate
from a throwaway CA; it is pinned to core 0 (``taskset``). An abuser process on core 1
runs one kind of abuse at a time, and this process (also on core 1, at a real-time
priority when run as root) probes :53 over UDP with one query at a time, recording each
round trip (a lost query counts as its 1 s timeout). Abuses:

- ``idle``: none (the baseline);
- ``stall``: 300 TCP connections that never start TLS (more than the 256 the edge
  serves at once), reopened when the edge closes them at its handshake bound;
- ``slowloris``: 200 TLS connections dribbling an HTTP/1.1 request head, one byte a
  second, reconnecting when cut off;
- ``garbage``: 32 clients sending 4 KiB of random bytes instead of a TLS hello, again
  and again;
- ``bigpost``: 16 HTTP/1.1 clients POSTing 64 KiB bodies that are not DNS messages, as
  fast as the edge takes them;
- ``h2flood``: 4 HTTP/2 connections keeping 32 DoH GETs in flight each (honest load
  at the edge's limit), counting the answers;
- ``h2reset``: 4 HTTP/2 connections opening streams and resetting them at once
  ("rapid reset").

Every loop is bounded in count and time; every address is 127.0.0.1. Run from the
repository root (as root for the real-time prober):

    .venv/bin/python benchmarks/edge_abuse.py
    .venv/bin/python benchmarks/edge_abuse.py --seconds 5 --abuse idle,h2flood

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import dns.message
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.scenario.edge_ca import make_test_ca  # noqa: E402

from valis_core.dns.answer.snapshot import IndexHolder  # noqa: E402
from valis_core.dns.serve import serve_tcp, serve_udp  # noqa: E402
from valis_core.dns.zone import ZoneIndex  # noqa: E402
from valis_core.edge.certificate import CertificateSlot  # noqa: E402
from valis_core.edge.server import serve_edge  # noqa: E402
from valis_core.edge.stats import EdgeStats  # noqa: E402

ZONE_FILE = ROOT / "tests" / "scenario" / "data" / "example.com.zone"
ABUSES = ("idle", "stall", "slowloris", "garbage", "bigpost", "h2flood", "h2reset")
REPLY_LIMIT = 1.0
READY_LIMIT = 30.0
MAX_TASK_ROUNDS = 1_000_000
"""Rounds any one abuser task makes at most (each is also bounded by the run's time)."""

_Abuser = Callable[[int, ssl.SSLContext, float], Awaitable[int]]


# -- the server --------------------------------------------------------------------------


async def run_server(cafile: Path) -> None:
    ca = make_test_ca()
    cafile.write_bytes(ca.root_pem)
    slot = CertificateSlot(ca.issue(("example.com",)))
    holder = IndexHolder(ZoneIndex.from_zone_text(ZONE_FILE.read_text(), "example.com."))
    udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    edge = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await udp.bind(("127.0.0.1", 0))
    await tcp.bind(("127.0.0.1", udp.getsockname()[1]))
    tcp.listen(128)
    await edge.bind(("127.0.0.1", 0))
    edge.listen(128)
    stats = EdgeStats()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_udp, udp, holder)
        nursery.start_soon(serve_tcp, tcp, holder)
        await nursery.start(partial(serve_edge, edge, slot, holder, stats=stats))
        print(json.dumps({"dns": udp.getsockname()[1], "edge": edge.getsockname()[1]}),
              flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)  # until the parent closes stdin
        print(json.dumps({"connections": stats.connections,
                          "handshakes_failed": stats.handshakes_failed}), flush=True)
        nursery.cancel_scope.cancel()


# -- the abusers -------------------------------------------------------------------------


def client_context(cafile: Path, alpn: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cafile))
    context.set_alpn_protocols([alpn])
    return context


async def tls(port: int, context: ssl.SSLContext) -> trio.SSLStream[trio.SocketStream]:
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
    await stream.do_handshake()
    return stream


async def stall(port: int, _: ssl.SSLContext, until: float) -> int:
    opened = 0
    async def one() -> None:
        nonlocal opened
        for _ in range(MAX_TASK_ROUNDS):
            if trio.current_time() >= until:
                return
            with contextlib.suppress(OSError):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                opened += 1
                async with stream:
                    with trio.move_on_at(until):
                        await stream.receive_some(1)  # until the edge closes it
    async with trio.open_nursery() as nursery:
        for _ in range(300):
            nursery.start_soon(one)
    return opened


async def slowloris(port: int, context: ssl.SSLContext, until: float) -> int:
    cut = 0
    head = b"GET /dns-query?dns=" + b"A" * 4000
    async def one() -> None:
        nonlocal cut
        for _ in range(MAX_TASK_ROUNDS):
            if trio.current_time() >= until:
                return
            try:
                stream = await tls(port, context)
                async with stream:
                    for byte in head:
                        if trio.current_time() >= until:
                            return
                        await stream.send_all(bytes([byte]))
                        await trio.sleep(1.0)
            except (trio.BrokenResourceError, OSError):
                cut += 1
                await trio.sleep(0.1)
    async with trio.open_nursery() as nursery:
        for _ in range(200):
            nursery.start_soon(one)
    return cut


async def garbage(port: int, _: ssl.SSLContext, until: float) -> int:
    sent = 0
    async def one() -> None:
        nonlocal sent
        for _ in range(MAX_TASK_ROUNDS):
            if trio.current_time() >= until:
                return
            with contextlib.suppress(OSError, trio.BrokenResourceError):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(random.randbytes(4096))
                    sent += 1
                    with trio.move_on_after(2.0):
                        while await stream.receive_some(4096):
                            pass
    async with trio.open_nursery() as nursery:
        for _ in range(32):
            nursery.start_soon(one)
    return sent


async def bigpost(port: int, context: ssl.SSLContext, until: float) -> int:
    answered = 0
    body = random.randbytes(65535)
    request = (b"POST /dns-query HTTP/1.1\r\nHost: example.com\r\n"
               b"Content-Type: application/dns-message\r\nContent-Length: 65535\r\n\r\n" + body)
    async def one() -> None:
        nonlocal answered
        for _ in range(MAX_TASK_ROUNDS):
            if trio.current_time() >= until:
                return
            with contextlib.suppress(OSError, trio.BrokenResourceError):
                stream = await tls(port, context)
                async with stream:
                    for _ in range(1000):
                        if trio.current_time() >= until:
                            return
                        await stream.send_all(request)
                        data = await stream.receive_some(4096)
                        if not data:
                            break
                        answered += 1
    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(one)
    return answered


def _h2_client() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding=None))
    conn.initiate_connection()
    return conn


def _doh_headers() -> list[tuple[bytes, bytes]]:
    wire = dns.message.make_query("www.example.com.", "A").to_wire()
    path = b"/dns-query?dns=" + base64.urlsafe_b64encode(wire).rstrip(b"=")
    return [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"example.com"),
            (b":path", path), (b"accept", b"application/dns-message")]


async def h2flood(port: int, context: ssl.SSLContext, until: float) -> int:
    answered = 0
    headers = _doh_headers()
    async def one() -> None:
        nonlocal answered
        for _ in range(MAX_TASK_ROUNDS):
            if trio.current_time() >= until:
                return
            with contextlib.suppress(OSError, trio.BrokenResourceError, h2.exceptions.H2Error):
                stream = await tls(port, context)
                async with stream:
                    conn = _h2_client()
                    in_flight = 0
                    for _ in range(MAX_TASK_ROUNDS):
                        if trio.current_time() >= until:
                            return
                        while in_flight < 32:
                            conn.send_headers(conn.get_next_available_stream_id(), headers,
                                              end_stream=True)
                            in_flight += 1
                        await stream.send_all(conn.data_to_send())
                        data = await stream.receive_some(65536)
                        if not data:
                            break
                        for event in conn.receive_data(data):
                            if isinstance(event, h2.events.StreamEnded):
                                answered += 1
                                in_flight -= 1
                            elif isinstance(event, h2.events.StreamReset):
                                in_flight -= 1
                            elif isinstance(event, h2.events.DataReceived):
                                conn.acknowledge_received_data(
                                    event.flow_controlled_length, event.stream_id)
                            elif isinstance(event, h2.events.ConnectionTerminated):
                                break
    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(one)
    return answered


async def h2reset(port: int, context: ssl.SSLContext, until: float) -> int:
    opened = 0
    headers = _doh_headers()
    async def one() -> None:
        nonlocal opened
        for _ in range(MAX_TASK_ROUNDS):
            if trio.current_time() >= until:
                return
            with contextlib.suppress(OSError, trio.BrokenResourceError, h2.exceptions.H2Error):
                stream = await tls(port, context)
                async with stream:
                    conn = _h2_client()
                    for _ in range(MAX_TASK_ROUNDS):
                        if trio.current_time() >= until:
                            return
                        for _ in range(32):
                            sid = conn.get_next_available_stream_id()
                            conn.send_headers(sid, headers, end_stream=True)
                            conn.reset_stream(sid)
                            opened += 1
                        await stream.send_all(conn.data_to_send())
                        with trio.move_on_after(0.01):
                            data = await stream.receive_some(65536)
                            if not data:
                                break
                            conn.receive_data(data)
    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(one)
    return opened


ABUSERS: dict[str, tuple[_Abuser, str]] = {
    "stall": (stall, "http/1.1"),
    "slowloris": (slowloris, "http/1.1"),
    "garbage": (garbage, "http/1.1"),
    "bigpost": (bigpost, "http/1.1"),
    "h2flood": (h2flood, "h2"),
    "h2reset": (h2reset, "h2"),
}


async def run_abuser(kind: str, port: int, cafile: Path, seconds: float) -> None:
    abuser, alpn = ABUSERS[kind]
    until = trio.current_time() + seconds
    with trio.move_on_at(until + 5.0):
        count = await abuser(port, client_context(cafile, alpn), until)
        print(json.dumps({"count": count}), flush=True)


# -- the prober --------------------------------------------------------------------------


def probe(port: int, seconds: float) -> list[float]:
    """Round trips (ms) of one UDP query at a time for ``seconds``."""
    wire = bytearray(dns.message.make_query("www.example.com.", "A").to_wire())
    rtts: list[float] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_LIMIT)
        end = time.monotonic() + seconds
        for qid in range(1_000_000):
            if time.monotonic() >= end:
                break
            wire[0:2] = (qid & 0xFFFF).to_bytes(2, "big")
            start = time.monotonic()
            sock.sendto(wire, ("127.0.0.1", port))
            try:
                while True:
                    data = sock.recv(65535)
                    if data[:2] == wire[:2]:
                        break
                rtts.append((time.monotonic() - start) * 1000)
            except TimeoutError:
                rtts.append(REPLY_LIMIT * 1000)
            time.sleep(0.002)
    return rtts


def realtime() -> contextlib.AbstractContextManager[None]:
    @contextlib.contextmanager
    def scope() -> object:
        raised = False
        if os.geteuid() == 0:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            raised = True
        try:
            yield
        finally:
            if raised:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return scope()  # type: ignore[return-value]


def pinned(core: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", core, *argv] if shutil.which("taskset") else argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--abuse", default=",".join(ABUSES))
    parser.add_argument("--role", choices=("server", "abuser"), help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cafile", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "server":
        trio.run(run_server, args.cafile)
        return
    if args.role == "abuser":
        trio.run(run_abuser, args.kind, args.port, args.cafile, args.seconds)
        return
    with tempfile.TemporaryDirectory(prefix="edge-abuse-") as scratch:
        cafile = Path(scratch) / "root.pem"
        server = subprocess.Popen(
            pinned("0", [sys.executable, __file__, "--role", "server", "--cafile", str(cafile)]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert server.stdout is not None
            assert server.stdin is not None
            ports = json.loads(server.stdout.readline())
            os.sched_setaffinity(0, {1} if os.cpu_count() and os.cpu_count() > 1 else {0})
            print(f"{'abuse':<10} {'queries':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
                  f"{'lost':>5}  abuser's count")
            for kind in args.abuse.split(","):
                abuser = None
                if kind != "idle":
                    abuser = subprocess.Popen(
                        pinned("1", [sys.executable, __file__, "--role", "abuser", "--kind",
                                     kind, "--port", str(ports["edge"]), "--cafile",
                                     str(cafile), "--seconds", str(args.seconds + 2)]),
                        stdout=subprocess.PIPE, text=True,
                    )
                    time.sleep(2.0)  # let the abuse reach its full weight
                with realtime():
                    rtts = probe(ports["dns"], args.seconds)
                count = ""
                if abuser is not None:
                    out, _ = abuser.communicate(timeout=args.seconds + 30)
                    count = out.strip()
                rtts.sort()
                lost = sum(1 for r in rtts if r >= REPLY_LIMIT * 1000)
                p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
                print(f"{kind:<10} {len(rtts):>8} {statistics.median(rtts):>8.3f} "
                      f"{p99:>8.3f} {rtts[-1]:>8.3f} {lost:>5}  {count}", flush=True)
            server.stdin.close()
            print("edge:", server.stdout.readline().strip())
            server.wait(timeout=READY_LIMIT)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()

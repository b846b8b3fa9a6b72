"""Time an AXFR of a generated zone (100 000 records by default) out of the TCP serve
loop, signed, over loopback, and what it does to UDP queries answered meanwhile.

The node is the in-process serve loops (``serve_tcp`` with ``Transfers``, ``serve_udp``)
on 127.0.0.1; the secondary is ``dig AXFR -y`` (it checks every message's TSIG) in a
subprocess, and a second client asks one UDP query after another throughout, so the
figures say how long the transfer takes, how many messages and bytes it is, and the UDP
latency percentiles while it runs against those of a quiet server. Run from the
repository root:

    .venv/bin/python benchmarks/zone_transfer.py [--records N] [--runs N]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import base64
import re
import socket
import statistics
import sys
import time
from collections.abc import Sequence

import dns.message
import trio
from answer_micro import ZONE, master_lines

from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import serve_tcp, serve_udp
from valis_core.dns.serve.transfer_serve import Transfers
from valis_core.dns.transfer import Listed
from valis_core.dns.zone import ZoneIndex

KEY_NAME = "bench-xfr."
SECRET = bytes(range(32))


async def udp_latencies(port: int, stop: trio.Event) -> list[float]:
    """Ask one query at a time until ``stop``; the round-trip of each, in ms."""
    query = dns.message.make_query(f"host7.{ZONE}", "A").to_wire()
    found: list[float] = []
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.connect(("127.0.0.1", port))
        while not stop.is_set() and len(found) < 1_000_000:
            started = time.perf_counter()
            await sock.send(query)
            with trio.move_on_after(1.0):
                await sock.recv(4096)
                found.append((time.perf_counter() - started) * 1000)
    return found


def percentiles(values: Sequence[float]) -> str:
    if len(values) < 2:
        return "n/a"
    cuts = statistics.quantiles(values, n=100)
    return f"p50 {cuts[49]:.3f} ms, p99 {cuts[98]:.3f} ms ({len(values)} queries)"


async def run(records: int, runs: int) -> None:
    started = time.perf_counter()
    index = ZoneIndex.from_zone_text("".join(master_lines(records)), ZONE)
    print(f"zone: {index.record_count} records, indexed in {time.perf_counter() - started:.2f}s")
    holder = IndexHolder(index)
    listed = (Listed(ZONE, "127.0.0.1", KEY_NAME, "hmac-sha256", SECRET),)

    async def secondaries() -> Sequence[Listed]:
        return listed

    transfers = Transfers(secondaries, lambda: listed)
    with trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, \
            trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        await tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        await udp.bind(("127.0.0.1", 0))
        port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: serve_tcp(tcp, holder, transfers=transfers))
            nursery.start_soon(lambda: serve_udp(udp, holder))
            quiet = trio.Event()
            baseline: list[list[float]] = []

            async def quietly() -> None:
                baseline.append(await udp_latencies(udp_port, quiet))

            nursery.start_soon(quietly)
            await trio.sleep(2.0)
            quiet.set()
            while not baseline:
                await trio.sleep(0.01)
            print(f"UDP, no transfer: {percentiles(baseline[0])}")
            key = f"hmac-sha256:{KEY_NAME}:{base64.b64encode(SECRET).decode()}"
            for attempt in range(runs):
                stop = trio.Event()
                box: list[list[float]] = []

                async def ask(box: list[list[float]] = box, stop: trio.Event = stop) -> None:
                    box.append(await udp_latencies(udp_port, stop))

                nursery.start_soon(ask)
                started = time.perf_counter()
                result = await trio.run_process(
                    ["dig", "@127.0.0.1", "-p", str(port), ZONE, "AXFR", "-y", key,
                     "+noall", "+stats"], capture_stdout=True, check=False)
                took = time.perf_counter() - started
                stop.set()
                while not box:
                    await trio.sleep(0.01)
                out = result.stdout.decode()
                size = re.search(r"XFR size: (\d+) records \(messages (\d+), bytes (\d+)\)", out)
                failed = "failed" in out or result.returncode != 0 or size is None
                shown = "FAILED" if failed or size is None else (
                    f"{size[1]} records, {size[2]} messages, {int(size[3]) / 1e6:.1f} MB")
                print(f"AXFR run {attempt + 1}: {took:.2f}s wall (dig included), {shown}; "
                      f"UDP meanwhile: {percentiles(box[0])}")
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    trio.run(run, args.records, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The push boot: how long a push takes, and that each one steers at once.

As root, in a network namespace of its own (the script re-runs itself under
``unshare --net``; 203.0.113.10 on its loopback stands for the unit address): the steer
object compiled from packaging/bpf by the build's own script and attached there,
fulcrum's control server (``fulcrum.control.serve_control``) with the real checks, and
the resident's own push (``valis_core.resident.push``) run ``--pushes`` times, each a
fresh listening socket on an ephemeral loopback port replacing the last. It reports the
push's wall time (connect, declare, SCM_RIGHTS, fulcrum's checks and ``assign``, the
reply) as median, 95th percentile and maximum, and how many of the connections made to
unit-address:443 right after each push reached that push's socket.

    sudo .venv/bin/python benchmarks/push_exchange.py [--pushes 500]

Figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from ipaddress import ip_address
from pathlib import Path

import trio

from fulcrum.control import PushGate, open_control_socket, serve_control
from fulcrum.pushed import namespace_of_path
from fulcrum.steer import Steer
from valis_core.resident.push import mint_listener, push_listener

REPO = Path(__file__).resolve().parents[1]
UNIT, PORT = "203.0.113.10", 443
TIMEOUT = 120.0


async def measure(pushes: int, directory: Path) -> dict[str, object]:
    obj = directory / "steer.bpf.o"
    subprocess.run([sys.executable, str(REPO / "packaging/bpf/compile.py"), "--out", str(obj)],
                   check=True, timeout=TIMEOUT, capture_output=True)
    netns_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        steer = Steer.attach(str(obj), netns_fd, ip_address(UNIT), frozenset({PORT}))
    finally:
        os.close(netns_fd)
    control = open_control_socket(str(directory / "control.sock"), {}, uid=0, gid=0)
    gate = PushGate(0, namespace_of_path("/proc/self/ns/net"), frozenset({PORT}), steer.assign)
    times, reached = [], 0
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, control.sock, gate)
            for _ in range(pushes):
                listener = mint_listener(socket.AF_INET)
                with listener:
                    started = time.perf_counter()
                    await push_listener(control.path, frozenset({PORT}), listener)
                    times.append(time.perf_counter() - started)
                    reached += await trio.to_thread.run_sync(_reaches, listener)
            nursery.cancel_scope.cancel()
    finally:
        control.close()
        steer.close()
    ms = sorted(t * 1000 for t in times)
    return {
        "pushes": pushes,
        "push_ms_median": round(statistics.median(ms), 3),
        "push_ms_p95": round(ms[int(len(ms) * 0.95) - 1], 3),
        "push_ms_max": round(ms[-1], 3),
        "connections_reaching_the_new_socket": reached,
    }


def _reaches(listener: socket.socket) -> int:
    with socket.create_connection((UNIT, PORT), timeout=2):
        listener.settimeout(2)
        conn, _ = listener.accept()
        conn.close()
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=500)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.inside:
        os.execvp("unshare", ["unshare", "--net", sys.executable, __file__, "--inside",
                              "--pushes", str(args.pushes)])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=TIMEOUT)
    subprocess.run(["ip", "addr", "add", f"{UNIT}/32", "dev", "lo"], check=True,
                   timeout=TIMEOUT)
    with tempfile.TemporaryDirectory(prefix="valis-push-bench-") as directory:
        print(json.dumps(trio.run(measure, args.pushes, Path(directory)), indent=2))


if __name__ == "__main__":
    main()

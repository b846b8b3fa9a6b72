"""The sk_lookup steer: what attaching costs, and whether a swap ever refuses anyone.

As root: two network namespaces joined by a veth pair (203.0.113.10 the unit,
203.0.113.100 the client), the steer object compiled from packaging/bpf by the build's
own script, and two listening sockets made inside the unit netns on ephemeral ports.
It reports

- ``Steer.attach`` (open, load, fill the maps, attach) and ``close`` (link first), the
  median of ``--attaches`` rounds;
- ``assign``'s cost per call (one SOCKMAP update);
- a client in the other namespace connecting ``--connections`` times in a row to the
  declared port while the SOCKMAP entry is swapped between the two sockets as fast as
  this process can: how many connections succeeded, were refused or timed out, and how
  many each socket accepted. The steer's promise is that none is refused.

    sudo .venv/bin/python benchmarks/steer_swap.py [--connections 3000] [--attaches 20]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fulcrum.steer import Steer

REPO = Path(__file__).resolve().parents[1]
UNIT, CLIENT, PORT = "203.0.113.10", "203.0.113.100", 443
TIMEOUT = 120.0

_MAKE_LISTENER = r"""
import socket, sys
s = socket.create_server((sys.argv[1], 0), backlog=4096)
socket.send_fds(socket.socket(fileno=int(sys.argv[2])), [b"x"], [s.fileno()])
"""

_CONNECT_LOOP = r"""
import json, socket, sys
outcomes = {}
for _ in range(int(sys.argv[3])):
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
        key = "ok"
    except OSError as exc:
        key = type(exc).__name__
    outcomes[key] = outcomes.get(key, 0) + 1
print(json.dumps(outcomes), flush=True)
"""


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=TIMEOUT, capture_output=True)


def listener(netns: str) -> socket.socket:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-I", "-c", _MAKE_LISTENER, UNIT,
             str(theirs.fileno())],
            pass_fds=[theirs.fileno()], check=True, timeout=TIMEOUT,
        )
        ours.settimeout(10)
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    sock = socket.socket(fileno=fds[0])
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def measure(obj: Path, unit: str, client: str, connections: int, attaches: int) -> None:
    address = ipaddress.ip_address(UNIT)
    ports = frozenset({PORT})
    attach_s, close_s = [], []
    for _ in range(attaches):
        fd = os.open(f"/run/netns/{unit}", os.O_RDONLY)
        started = time.perf_counter()
        steer = Steer.attach(str(obj), fd, address, ports)
        attach_s.append(time.perf_counter() - started)
        os.close(fd)
        started = time.perf_counter()
        steer.close()
        close_s.append(time.perf_counter() - started)
    print(f"attach: median {statistics.median(attach_s) * 1e3:.2f} ms; "
          f"close: median {statistics.median(close_s) * 1e3:.2f} ms ({attaches} rounds)")

    old, new = listener(unit), listener(unit)
    fd = os.open(f"/run/netns/{unit}", os.O_RDONLY)
    steer = Steer.attach(str(obj), fd, address, ports)
    os.close(fd)
    try:
        rounds = 10_000
        started = time.perf_counter()
        for _ in range(rounds):
            steer.assign(old.fileno())
        print(f"assign: {(time.perf_counter() - started) / rounds * 1e6:.1f} us per call")

        loop = subprocess.Popen(
            ["ip", "netns", "exec", client, sys.executable, "-I", "-c", _CONNECT_LOOP, UNIT,
             str(PORT), str(connections)],
            stdout=subprocess.PIPE, text=True,
        )
        swaps, accepted = 0, [0, 0]
        deadline = time.monotonic() + TIMEOUT
        started = time.perf_counter()
        while loop.poll() is None and time.monotonic() < deadline:
            steer.assign((new if swaps % 2 == 0 else old).fileno())
            swaps += 1
            accepted[0] += drain(old)
            accepted[1] += drain(new)
        elapsed = time.perf_counter() - started
        out, _ = loop.communicate(timeout=TIMEOUT)
        accepted[0] += drain(old)
        accepted[1] += drain(new)
        print(f"swapping: {json.loads(out)} over {swaps} swaps in {elapsed:.2f} s; "
              f"accepted by the two sockets: {accepted[0]} / {accepted[1]}")
    finally:
        steer.close()
        old.close()
        new.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--attaches", type=int, default=20)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("steer_swap: run as root (network namespaces, BPF)", file=sys.stderr)
        return 2
    tag = secrets.token_hex(3)
    unit, client = f"vl-bsu-{tag}", f"vl-bsc-{tag}"
    with tempfile.TemporaryDirectory() as scratch:
        obj = Path(scratch) / "sk-lookup-catchall.bpf.o"
        run(sys.executable, str(REPO / "packaging" / "bpf" / "compile.py"), "--out", str(obj))
        try:
            run("ip", "netns", "add", unit)
            run("ip", "netns", "add", client)
            run("ip", "-n", unit, "link", "add", "eth0", "type", "veth", "peer", "name",
                "eth0", "netns", client)
            for ns, address in ((unit, UNIT), (client, CLIENT)):
                run("ip", "-n", ns, "link", "set", "lo", "up")
                run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
                run("ip", "-n", ns, "link", "set", "eth0", "up")
            measure(obj, unit, client, args.connections, args.attaches)
        finally:
            for ns in (unit, client):
                subprocess.run(["ip", "netns", "del", ns], check=False, timeout=TIMEOUT,
                               capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

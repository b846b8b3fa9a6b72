"""``valis serve`` as an operator runs it, as a real process on loopback: ``start_server``
returns once its start line names the port and it answers (both bounded), ``stop_server``
sends SIGTERM and waits (bounded) for its exit status; ``run_valis`` runs one ``valis``
command to its end."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

from tests.dns_ask import over_udp

DATA = Path(__file__).parent / "data"
ZONE_FILE = DATA / "example.com.zone"
STARTUP_LIMIT = 20.0
STOP_LIMIT = 10.0
ASK_TIMEOUT = 3.0
_START_LINE = re.compile(r"on 127\.0\.0\.1:(\d+) udp\+tcp")


@attrs.frozen
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def valis_command() -> list[str]:
    script = Path(sys.executable).with_name("valis")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from valis_cli.main import main; main()"]


def start_server(log: Path, *zone_args: str, extra: tuple[str, ...] = ()) -> Server:
    """Start `valis serve` on a free loopback port; return once its start line names
    the port and it answers a query (both bounded)."""
    args = [*valis_command(), "serve", "--listen", "127.0.0.1:0", *extra]
    for zone in zone_args or (str(ZONE_FILE),):
        args += ["--zone", zone]
    with log.open("wb") as sink:
        process = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT)
    limit = time.monotonic() + STARTUP_LIMIT
    port = None
    while port is None:
        match = _START_LINE.search(log.read_text(encoding="utf-8", errors="replace"))
        if match:
            port = int(match.group(1))
        elif process.poll() is not None or time.monotonic() > limit:
            process.kill()
            process.wait()
            pytest.fail(f"valis serve did not start:\n{log.read_text()}")
        else:
            time.sleep(0.05)
    server = Server(process=process, port=port, log=log)
    over_udp(server.port, "example.com.", "SOA", timeout=ASK_TIMEOUT)
    return server


def stop_server(server: Server) -> int:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    try:
        return server.process.wait(timeout=STOP_LIMIT)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        raise


def run_valis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*valis_command(), *args], capture_output=True, text=True, timeout=30, check=False
    )

"""``make demo``: a whole node on one machine without root — a private cluster under the
user's cache directory, the example zone, a genesis state directory, and the resident
serving through descriptors the launcher stand-in bound."""

from __future__ import annotations

import os
import pwd
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rcode

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, ensure_system_user
from tests.scenario.resident_harness import (
    REPO,
    bind_dns_pair,
    port_is_free,
    resident_runtime,
    session_processes,
)

READY_TIMEOUT = 120.0


def free_port() -> int:
    udp, tcp = bind_dns_pair()
    port = int(udp.getsockname()[1])
    udp.close()
    tcp.close()
    return port


def read_until(proc: subprocess.Popen[bytes], marker: str, timeout: float) -> str:
    """Read the demo's output (unbuffered, from the descriptor) until ``marker``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while marker.encode() not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {marker!r} within {timeout}s:\n{seen.decode()}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"demo exited {proc.wait()}:\n{seen.decode()}"
            seen += chunk
    return seen.decode()


def test_the_demo_serves_the_example_zone_as_an_ordinary_user_and_stops_cleanly() -> None:
    require_root()
    account = ensure_system_user(RUN_USER)
    home = Path(tempfile.mkdtemp(prefix="valis-demo-home-", dir="/tmp"))
    os.chown(home, account.pw_uid, account.pw_gid)
    os.chmod(home, 0o755)
    zone = home / "example.test.zone"
    shutil.copy(REPO / "docs" / "examples" / "example.test.zone", zone)
    os.chmod(zone, 0o644)
    port = free_port()
    proc = subprocess.Popen(
        [
            "setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
            "--init-groups", "--",
            resident_runtime(), "demo", "--zone", str(zone), "--listen", f"127.0.0.1:{port}",
        ],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C.UTF-8"},
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output = read_until(proc, "Ctrl-C stops", READY_TIMEOUT)
        assert f"dig @127.0.0.1 -p {port} example.test SOA" in output
        assert str(home / ".cache" / "valis-demo") in output
        assert "condensed from genesis, generation 0" in output
        query = dns.message.make_query("www.example.test.", "A")
        reply = dns.query.tcp(query, "127.0.0.1", port=port, timeout=5)
        assert reply.rcode() == dns.rcode.NOERROR
        assert {r.to_text() for rrset in reply.answer for r in rrset} == {"192.0.2.80"}
        assert pwd.getpwuid((home / ".cache" / "valis-demo" / "state").stat().st_uid).pw_name \
            == RUN_USER

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert proc.stdout is not None
        rest = proc.stdout.read().decode()
        assert "stopping PostgreSQL" in rest
        assert port_is_free(port)
        assert session_processes(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in session_processes(proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(home, ignore_errors=True)

"""``make demo``: a whole node on one machine without root — a private cluster under the
user's cache directory, the example zone, a genesis state directory, and the resident
serving through descriptors the launcher stand-in bound. A newcomer pastes what it
prints: ``dig`` answers, ``valis status`` says ready, and the ``nsupdate`` line changes a
record that then answers on the wire; a re-run keeps that change, another ``--zone``
is served, a taken port is refused before initdb, and a closed terminal stops the
database too."""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import pytest

from tests.conftest import require_root
from tests.dns_ask import over_tcp, rdata_texts
from tests.scenario.loopback_serve import free_port
from tests.scenario.pg import RUN_USER, ensure_system_user
from tests.scenario.resident_harness import (
    REPO,
    bind_dns_pair,
    port_is_free,
    resident_runtime,
    session_processes,
)

READY_TIMEOUT = 120.0
READY_MARKER = "Ctrl-C stops"
OTHER_ZONE = """$ORIGIN other.test.
$TTL 300
@    IN SOA ns1.other.test. hostmaster.other.test. 7 7200 900 1209600 300
@    IN NS  ns1.other.test.
ns1  IN A   198.51.100.1
www  IN A   203.0.113.80
"""


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


def as_user(account: pwd.struct_passwd) -> list[str]:
    return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
            "--init-groups", "--"]


class Newcomer:
    """An ordinary account with a home of its own, running the demo as a newcomer would."""

    def __init__(self, home: Path, account: pwd.struct_passwd) -> None:
        self.home = home
        self.account = account
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C.UTF-8"}
        self.started: list[subprocess.Popen[bytes]] = []

    @property
    def demo_dir(self) -> Path:
        return self.home / ".cache" / "valis-demo"

    def zone(self, name: str, text: str) -> Path:
        path = self.home / name
        path.write_text(text)
        os.chmod(path, 0o644)
        return path

    def start(self, zone: Path, port: int, owner_port: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [*as_user(self.account), resident_runtime(), "demo", "--zone", str(zone),
             "--listen", f"127.0.0.1:{port}", "--owner-port", str(owner_port)],
            env=self.env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.started.append(proc)
        return proc

    def paste(self, line: str) -> subprocess.CompletedProcess[str]:
        """Run one printed line in a shell, as this account, from its home."""
        return subprocess.run(
            [*as_user(self.account), "sh", "-c", line.strip()], env=self.env, cwd=self.home,
            capture_output=True, text=True, timeout=60, check=False,
        )

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in session_processes(proc.pid):
                os.kill(pid, signal.SIGKILL)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def newcomer() -> Iterator[Newcomer]:
    require_root()
    account = ensure_system_user(RUN_USER)
    home = Path(tempfile.mkdtemp(prefix="valis-demo-home-", dir="/tmp"))
    os.chown(home, account.pw_uid, account.pw_gid)
    os.chmod(home, 0o755)
    person = Newcomer(home, account)
    try:
        yield person
    finally:
        person.cleanup()
        shutil.rmtree(home, ignore_errors=True)


def stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    assert proc.stdout is not None
    return proc.stdout.read().decode()


def ask(port: int, name: str, rtype: str = "A") -> dns.message.Message:
    return over_tcp(port, name, rtype, timeout=5)


def answers(port: int, name: str, rtype: str = "A") -> set[str]:
    return rdata_texts(ask(port, name, rtype))


def printed(output: str, start: str) -> str:
    (line,) = [line for line in output.splitlines() if line.strip().startswith(start)]
    return line


def test_a_newcomer_pastes_what_the_demo_prints_and_a_live_change_reaches_the_wire(
    newcomer: Newcomer,
) -> None:
    zone = newcomer.zone("example.test.zone",
                         (REPO / "docs" / "examples" / "example.test.zone").read_text())
    port, owner_port = free_port(), free_port()
    proc = newcomer.start(zone, port, owner_port)
    output = read_until(proc, READY_MARKER, READY_TIMEOUT)
    assert f"dig @127.0.0.1 -p {port} example.test SOA" in output
    assert str(newcomer.demo_dir) in output
    assert "condensed from genesis, generation 0" in output
    assert f"imported {zone}: example.test." in output
    assert "postgresql://valis@/valis_state?host=" in output
    assert answers(port, "www.example.test.") == {"192.0.2.80"}
    assert pwd.getpwuid((newcomer.demo_dir / "state").stat().st_uid).pw_name == RUN_USER

    status = newcomer.paste(printed(output, resident_runtime() + " status"))
    assert status.returncode == 0, status.stdout + status.stderr
    nsupdate = newcomer.paste(printed(output, "printf "))
    assert nsupdate.returncode == 0, nsupdate.stderr
    assert f"dig @127.0.0.1 -p {port} hello.example.test A" in output
    assert answers(port, "hello.example.test.") == {"192.0.2.7"}
    rest = stop(proc)
    assert "stopping PostgreSQL" in rest
    assert port_is_free(port)
    assert port_is_free(owner_port)
    assert session_processes(proc.pid) == []

    # The same file again: the database keeps the live change.
    again = newcomer.start(zone, port, owner_port)
    output = read_until(again, READY_MARKER, READY_TIMEOUT)
    assert "kept example.test. as the database holds it" in output
    assert "(kept, generation 0)" in output
    assert answers(port, "hello.example.test.") == {"192.0.2.7"}
    stop(again)

    # Another zone, as the README shows: the node serves it, not the first list.
    other = newcomer.zone("other.test.zone", OTHER_ZONE)
    third = newcomer.start(other, port, owner_port)
    output = read_until(third, READY_MARKER, READY_TIMEOUT)
    assert "serving other.test. now (the store said example.test.)" in output
    reply = ask(port, "other.test.", "SOA")
    assert reply.rcode() == dns.rcode.NOERROR
    assert answers(port, "www.other.test.") == {"203.0.113.80"}
    assert ask(port, "www.example.test.").rcode() == dns.rcode.REFUSED
    stop(third)

    # The first file, edited: imported again, and the demo says it replaced the zone.
    zone.write_text(zone.read_text().replace("192.0.2.80", "192.0.2.81"))
    fourth = newcomer.start(zone, port, owner_port)
    output = read_until(fourth, READY_MARKER, READY_TIMEOUT)
    assert "re-imported (the file changed since the last import" in output
    assert answers(port, "www.example.test.") == {"192.0.2.81"}
    assert answers(port, "hello.example.test.") == set()
    stop(fourth)


def test_a_taken_port_is_refused_in_one_line_before_initdb(newcomer: Newcomer) -> None:
    zone = newcomer.zone("example.test.zone",
                         (REPO / "docs" / "examples" / "example.test.zone").read_text())
    udp, tcp = bind_dns_pair()
    port = int(udp.getsockname()[1])
    with contextlib.closing(udp), contextlib.closing(tcp):
        proc = newcomer.start(zone, port, free_port())
        assert proc.wait(60) != 0
        assert proc.stdout is not None
        lines = proc.stdout.read().decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert "PORT=" in lines[0]
    assert not (newcomer.demo_dir / "postgres").exists()


def test_closing_the_terminal_stops_the_node_and_postgresql(newcomer: Newcomer) -> None:
    zone = newcomer.zone("example.test.zone",
                         (REPO / "docs" / "examples" / "example.test.zone").read_text())
    port = free_port()
    proc = newcomer.start(zone, port, free_port())
    read_until(proc, READY_MARKER, READY_TIMEOUT)
    pid_file = newcomer.demo_dir / "postgres" / "data" / "postmaster.pid"
    assert pid_file.is_file()
    # A closed terminal: nothing reads the output any more, and the session is hung up.
    assert proc.stdout is not None
    proc.stdout.close()
    os.killpg(proc.pid, signal.SIGHUP)
    proc.wait(60)
    assert not pid_file.exists()
    assert port_is_free(port)
    assert session_processes(proc.pid) == []


def test_a_second_demo_on_the_same_directory_is_refused_naming_the_first(
    newcomer: Newcomer,
) -> None:
    """Two demos would share one cluster and state directory, and one's Ctrl-C would stop
    the other's PostgreSQL: the second is refused in one line naming the first's PID, and
    the first serves on."""
    zone = newcomer.zone("example.test.zone",
                         (REPO / "docs" / "examples" / "example.test.zone").read_text())
    port = free_port()
    first = newcomer.start(zone, port, free_port())
    read_until(first, READY_MARKER, READY_TIMEOUT)
    second = newcomer.start(zone, free_port(), free_port())
    assert second.wait(60) != 0
    assert second.stdout is not None
    lines = second.stdout.read().decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"{newcomer.demo_dir} is in use by another demo (PID " in lines[0]
    assert "--cache-dir" in lines[0]
    named = int(lines[0].split("(PID ", 1)[1].split(")", 1)[0])
    assert named in {first.pid, *session_processes(first.pid)}
    assert (newcomer.demo_dir / "postgres" / "data" / "postmaster.pid").is_file()
    assert ask(port, "www.example.test.").rcode() == dns.rcode.NOERROR
    stop(first)

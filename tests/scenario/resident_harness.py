"""Running ``valis --resident`` the way the launcher does, and watching it from outside.

The harness plays the launcher: it binds the DNS pair on a loopback port (and, when
asked, owner and edge listeners on others, as for ``owner-port`` and ``edge-port``),
hands the descriptors down with ``pass_fds`` (closing its own copies, so the resident is
their only holder), binds a real ``NOTIFY_SOCKET`` listener, and runs the resident as
the real ``valis`` account under ``setpriv`` in a session of its own — so afterwards "no
process left behind" is a question about that session. The resident's stderr goes to a file.

The ``valis`` it runs is the one ``scripts/resident-runtime`` names (the test command
exports it as ``VALIS_TEST_RUNTIME``): an executable the run account can reach. A test may
name another (``runtime=``), such as the frozen program ``make build`` produces.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import dns.message
import dns.query
import dns.rdatatype

from tests.dns_ask import over_tcp, over_udp
from tests.scenario.bounded_wait import until
from tests.scenario.pg import RUN_USER
from valis_core.dns.serve import listen

REPO = Path(__file__).resolve().parents[2]
RUNTIME_ENV = "VALIS_TEST_RUNTIME"
BOOT_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0
ASK_TIMEOUT = 5.0


@functools.cache
def resident_runtime() -> str:
    """The ``valis`` executable the run account can run."""
    given = os.environ.get(RUNTIME_ENV)
    if given:
        return given
    result = subprocess.run(
        [str(REPO / "scripts" / "resident-runtime")],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"scripts/resident-runtime failed: {result.stderr.strip()}")
    return result.stdout.strip()


def site_facts(dsn: str, zones: str = "example.test.", **extra: str) -> dict[str, str]:
    facts = {
        "VALIS_NODE_NAME": "node-a",
        "VALIS_LOCATION": "loopback",
        "VALIS_OPERATOR_STATE_DSN": dsn,
        "VALIS_SERVED_ZONES": zones,
    }
    facts.update(extra)
    return facts


def make_state_dir(parent: Path) -> Path:
    """A fresh state directory owned by the run account (0700), under ``parent``."""
    account = pwd.getpwnam(RUN_USER)
    path = Path(tempfile.mkdtemp(prefix="state-", dir=parent))
    os.chown(path, account.pw_uid, account.pw_gid)
    os.chmod(path, 0o700)
    return path


def bind_dns_pair(host: str = "127.0.0.1", port: int = 0) -> tuple[socket.socket, socket.socket]:
    """A UDP socket and a listening TCP socket on one free port of ``host``."""
    return listen.bind_dns_pair(socket.AF_INET, host, port)


@contextlib.contextmanager
def inside_netns(netns: str | None) -> Iterator[None]:
    """Sockets made in the block belong to ``netns`` (``None``: this namespace)."""
    if netns is None:
        yield
        return
    from pyroute2 import netns as pyroute2_netns

    pyroute2_netns.pushns(netns)
    try:
        yield
    finally:
        pyroute2_netns.popns()


def port_is_free(port: int) -> bool:
    """Nothing holds ``port`` on 127.0.0.1 for UDP or as a TCP listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        try:
            udp.bind(("127.0.0.1", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        # SO_REUSEADDR lets a bind past TIME_WAIT leftovers but never past a listener.
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def session_processes(sid: int) -> list[int]:
    """Live processes in session ``sid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields: state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


class NotifyListener:
    """A supervisor's ``NOTIFY_SOCKET``: a UNIX datagram socket the run account may write."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        os.chmod(self.path, 0o666)
        self.messages: list[dict[str, str]] = []

    def close(self) -> None:
        self.sock.close()

    def collect(self, timeout: float) -> None:
        """Read every datagram arriving within ``timeout`` seconds (at least one wait)."""
        self.sock.settimeout(timeout)
        with contextlib.suppress(TimeoutError):
            data = self.sock.recv(65536)
            self.messages.append(_fields(data))
        self.sock.setblocking(False)
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            self.messages.append(_fields(data))

    def seen(self, key: str) -> bool:
        return any(key in message for message in self.messages)

    def statuses(self) -> list[str]:
        return [m["STATUS"] for m in self.messages if "STATUS" in m]


def _fields(data: bytes) -> dict[str, str]:
    fields = {}
    for line in data.decode("utf-8").splitlines():
        key, _, value = line.partition("=")
        fields[key] = value
    return fields


@attrs.define
class Resident:
    """One run of the resident."""

    proc: subprocess.Popen[bytes]
    notify: NotifyListener
    stderr_path: Path
    state_dir: Path
    port: int | None
    owner_port: int | None = None
    edge_port: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def last_line(self) -> str:
        lines = self.stderr().strip().splitlines()
        return lines[-1] if lines else ""

    def wait_ready(self, timeout: float = BOOT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.notify.seen("READY"):
            if self.proc.poll() is not None:
                raise AssertionError(f"resident exited {self.proc.returncode}: {self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no READY=1 within {timeout}s: {self.stderr()}")
            self.notify.collect(0.2)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT) -> int:
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            message = f"resident did not exit within {timeout}s: {self.stderr()}"
            raise AssertionError(message) from None
        self.notify.collect(0.05)
        return status

    def fabric(self) -> tuple[str, str]:
        info = json.loads((self.state_dir / "fabric.json").read_text())
        token = Path(info["token_file"]).read_text().strip()
        return info["url"], token

    def fabric_get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        url, real = self.fabric()
        headers = {} if token == "" else {"Authorization": f"Bearer {token or real}"}
        request = urllib.request.Request(url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def status(self) -> dict[str, Any]:
        code, body = self.fabric_get("/status")
        assert code == 200, body
        document: dict[str, Any] = json.loads(body)
        return document

    def ask(self, name: str, rtype: str = "A", *, tcp: bool = False) -> dns.message.Message:
        assert self.port is not None
        return (over_tcp if tcp else over_udp)(self.port, name, rtype, timeout=ASK_TIMEOUT)

    def reload(self, done_when: str) -> None:
        """SIGHUP the resident and wait (bounded) for the log line that ends the reload."""
        seen = self.stderr().count(done_when)
        self.proc.send_signal(signal.SIGHUP)
        until(lambda: self.stderr().count(done_when) > seen, f"{done_when!r} logged")

    def stop(self) -> None:
        """Make sure the process and its session are gone (test cleanup)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in session_processes(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def assert_failed_closed(
    resident: Resident, stage: str, cause: str, *, status: int | None = None
) -> None:
    """The resident failed closed at ``stage``, its last line naming ``cause`` (with exit
    ``status`` when given): never ready, its port free, no fabric, no process left."""
    exited = resident.wait_exit()
    assert exited != 0, resident.stderr()
    if status is not None:
        assert exited == status, resident.stderr()
    line = resident.last_line()
    assert line.startswith(f"valis: {stage}: "), resident.stderr()
    assert cause in line
    assert not resident.notify.seen("READY")
    if resident.port is not None:
        assert port_is_free(resident.port)
    assert not (resident.state_dir / "fabric.json").exists()
    assert session_processes(resident.pid) == []


@attrs.define
class Harness:
    """Starts residents with a fresh notify socket each; stops them all at the end."""

    workdir: Path
    started: list[Resident] = attrs.field(factory=list)

    def start(
        self,
        state_dir: Path,
        facts: Mapping[str, str],
        *,
        ports: str | None = None,
        pass_pair: bool = True,
        swap_pair: bool = False,
        extra_argv: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
        as_root: bool = False,
        owner: bool = False,
        edge: bool = False,
        runtime: str | None = None,
        control_socket: str = "/run/fulcrum/none.sock",
        netns: str | None = None,
        host: str = "127.0.0.1",
        dns_port: int = 0,
        dns_workers: int = 1,
    ) -> Resident:
        """Start a resident; with ``netns`` it runs in that network namespace, its
        descriptors bound there on ``host`` (as fulcrum binds them in the unit's)."""
        notify_dir = Path(tempfile.mkdtemp(prefix="notify-", dir=self.workdir))
        os.chmod(notify_dir, 0o755)
        notify = NotifyListener(notify_dir)
        argv = [runtime or resident_runtime(), "--resident", "--control-socket",
                control_socket]
        fds: list[int] = []
        port = None
        pair: tuple[socket.socket, ...] | None = None
        if pass_pair:
            with inside_netns(netns):
                udps, tcp = listen.bind_dns_sockets(socket.AF_INET, host, dns_port,
                                                    dns_workers)
            pair = (*udps, tcp)
            udp = udps[0]
            port = udp.getsockname()[1]
            fds = [udp.fileno(), tcp.fileno()]
            udp_fd, tcp_fd = (tcp.fileno(), udp.fileno()) if swap_pair else tuple(fds)
            if dns_workers == 1:
                argv += ["--dns-udp-fd", str(udp_fd), "--dns-tcp-fd", str(tcp_fd)]
            else:
                fds += [sock.fileno() for sock in udps[1:]]
                argv += ["--dns-udp-fds", ",".join(str(sock.fileno()) for sock in udps),
                         "--dns-tcp-fd", str(tcp_fd)]
        listeners: dict[str, socket.socket] = {}
        for flag, wanted in (("--owner-fd", owner), ("--edge-tcp-fd", edge)):
            if wanted:
                with inside_netns(netns):
                    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.bind((host, 0))
                listener.listen(16)
                fds.append(listener.fileno())
                argv += [flag, str(listener.fileno())]
                listeners[flag] = listener
        # ``ports`` may name the DNS pair's port, bound just above, as ``{port}``.
        argv += ["--ports", ports.format(port=port) if ports is not None else str(port)]
        argv += [*extra_argv, "--state-dir", str(state_dir)]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LC_ALL": "C.UTF-8",
            "NOTIFY_SOCKET": str(notify.path),
            **facts,
            **(extra_env or {}),
        }
        if not as_root:
            account = pwd.getpwnam(RUN_USER)
            argv = [
                "setpriv",
                f"--reuid={account.pw_uid}",
                f"--regid={account.pw_gid}",
                "--init-groups",
                "--",
                *argv,
            ]
        if netns is not None:
            argv = ["ip", "netns", "exec", netns, *argv]
        stderr_path = Path(tempfile.mkstemp(prefix="stderr-", dir=self.workdir)[1])
        with stderr_path.open("wb") as stderr:
            proc = subprocess.Popen(
                argv,
                pass_fds=fds,
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                start_new_session=True,
            )
        if pair is not None:
            for sock in pair:
                sock.close()
        bound = {flag: listener.getsockname()[1] for flag, listener in listeners.items()}
        for listener in listeners.values():
            listener.close()
        resident = Resident(proc, notify, stderr_path, state_dir, port,
                            bound.get("--owner-fd"), bound.get("--edge-tcp-fd"))
        self.started.append(resident)
        return resident

    def close(self) -> None:
        for resident in self.started:
            resident.stop()
            resident.notify.close()


@contextlib.contextmanager
def harness() -> Iterator[Harness]:
    workdir = Path(tempfile.mkdtemp(prefix="valis-resident-", dir="/tmp"))
    os.chmod(workdir, 0o755)
    running = Harness(workdir)
    try:
        yield running
    finally:
        running.close()
        shutil.rmtree(workdir, ignore_errors=True)

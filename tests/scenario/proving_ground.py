"""The proving ground: a node's surroundings stood up as network namespaces on one host.

One ``Ground`` is an "internet" namespace holding a bridge with the public gateway
(198.51.100.1/24), a veth pair whose host-side end is the node's dedicated NIC (left in
the host namespace for fulcrum to claim; its peer is on the bridge) and a client
namespace on the bridge (198.51.100.100/24) from which the node is asked questions, as
an outside client would.

Every name carries a tag unique to the ground, so parallel test runs never collide,
and the tag is recorded with its owner's pid under ``STATE_DIR``: ``sweep_stale()``
removes grounds whose owner died without cleaning up. ``Ground.cleanup()`` is bounded,
idempotent, and safe on a ground that was only half built.

The harness drives ``ip``, ``nsenter`` and a stock Python only, never the code under
test, so what it observes is independent of what fulcrum believes it did. A started
unit's netns is entered by its resident's pid (``nsenter -t PID -n``), not by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

GATEWAY = "198.51.100.1"
UNIT_IP = "198.51.100.10"
CLIENT_IP = "198.51.100.100"
PREFIX = 24
STATE_DIR = Path("/run/valis-proving-ground")
COMMAND_TIMEOUT = 30.0
PYTHON = "/usr/bin/python3"
T = TypeVar("T")

# Runs in a namespace as a stock interpreter: one exchange with a peer, reported as JSON.
_PROBE = r"""
import json, socket, sys
kind, host, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
payload = sys.argv[5].encode() if len(sys.argv) > 5 else b""
out = {"ok": False}
try:
    if kind == "udp":
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        s.sendto(payload, (host, port))
        data, peer = s.recvfrom(65535)
        out = {"ok": True, "reply": data.decode("latin-1"), "peer": list(peer)}
    elif kind == "tcp":
        s = socket.create_connection((host, port), timeout=timeout)
        if payload:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                chunk = s.recv(65535)
                if not chunk:
                    break
                chunks.append(chunk)
            out = {"ok": True, "reply": b"".join(chunks).decode("latin-1")}
        else:
            out = {"ok": True}
except OSError as exc:
    out = {"ok": False, "error": type(exc).__name__, "errno": exc.errno}
print(json.dumps(out))
"""

# Runs in a namespace: listen on a TCP port until killed (bounded by a lifetime).
_LISTENER = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("listening", flush=True)
s.settimeout(float(sys.argv[2]))
try:
    while True:
        conn, _ = s.accept()
        conn.close()
except OSError:
    pass
"""


def run(argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT, check: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command, bounded; with ``check`` a failure raises with its stderr."""
    result = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, input=input
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


def run_in(netns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command inside the named namespace."""
    return run(["ip", "netns", "exec", netns, *argv], **kwargs)


def run_in_pid(pid: int, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command inside the network namespace of process ``pid``."""
    return run(["nsenter", "-t", str(pid), "-n", *argv], **kwargs)


def ip_json(argv: Sequence[str], *, netns: str | None = None, pid: int | None = None
            ) -> list[dict[str, Any]]:
    """``ip -j ...`` parsed, in the host, a named namespace or a process's namespace."""
    cmd = ["ip", "-j", *argv]
    if pid is not None:
        result = run_in_pid(pid, cmd)
    elif netns is not None:
        result = run_in(netns, cmd)
    else:
        result = run(cmd)
    return json.loads(result.stdout or "[]")  # type: ignore[no-any-return]


def host_has_link(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def netns_names() -> set[str]:
    return {entry["name"] for entry in ip_json(["netns", "list"])}


def udp_exchange(netns: str, host: str, port: int, payload: str,
                 timeout: float = 2.0) -> dict[str, Any]:
    """Send one datagram from ``netns`` and wait (bounded) for one reply."""
    return _probe(netns, ["udp", host, str(port), str(timeout), payload], timeout)


def tcp_exchange(netns: str, host: str, port: int, payload: str = "",
                 timeout: float = 2.0) -> dict[str, Any]:
    """Connect from ``netns`` (bounded); send ``payload`` and read the reply if given."""
    return _probe(netns, ["tcp", host, str(port), str(timeout), payload], timeout)


def tcp_exchange_in_pid(pid: int, host: str, port: int, timeout: float = 2.0
                        ) -> dict[str, Any]:
    out = run_in_pid(pid, [PYTHON, "-I", "-c", _PROBE, "tcp", host, str(port), str(timeout)],
                     timeout=timeout + COMMAND_TIMEOUT)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _probe(netns: str, args: list[str], timeout: float) -> dict[str, Any]:
    out = run_in(netns, [PYTHON, "-I", "-c", _PROBE, *args], timeout=timeout + COMMAND_TIMEOUT)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@contextlib.contextmanager
def listener_in_pid(pid: int, port: int, lifetime: float = 60.0) -> Any:
    """A root TCP listener on ``port`` inside process ``pid``'s netns, for the block."""
    proc = subprocess.Popen(
        ["nsenter", "-t", str(pid), "-n", PYTHON, "-I", "-c", _LISTENER, str(port),
         str(lifetime)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded by the listener's own lifetime
        if line.strip() != "listening":
            raise RuntimeError(f"listener on {port} did not start")
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=COMMAND_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@attrs.define
class Ground:
    """One proving ground's names; ``build()`` stands it up, ``cleanup()`` takes it down."""

    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))

    @property
    def internet(self) -> str:
        return f"vl-inet-{self.tag}"

    @property
    def client(self) -> str:
        return f"vl-cli-{self.tag}"

    @property
    def nic(self) -> str:
        """The node's dedicated NIC, in the host namespace until fulcrum claims it."""
        return f"vl-nic-{self.tag}"

    @property
    def unit_netns(self) -> str:
        """The netns name the unit under test is given (fulcrum creates it)."""
        return f"vlu-{self.tag}"

    def build(self) -> Ground:
        STATE_DIR.mkdir(mode=0o700, exist_ok=True)
        (STATE_DIR / self.tag).write_text(f"{os.getpid()}\n")
        try:
            self._build()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _build(self) -> None:
        inet, cli = self.internet, self.client
        run(["ip", "netns", "add", inet])
        run(["ip", "netns", "add", cli])
        run(["ip", "-n", inet, "link", "set", "lo", "up"])
        run(["ip", "-n", inet, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", inet, "addr", "add", f"{GATEWAY}/{PREFIX}", "dev", "br0"])
        run(["ip", "-n", inet, "link", "set", "br0", "up"])
        # The node's NIC: host end here, peer on the bridge.
        run(["ip", "link", "add", self.nic, "type", "veth", "peer", "name", "nic-peer",
             "netns", inet])
        run(["ip", "-n", inet, "link", "set", "nic-peer", "master", "br0", "up"])
        # The client.
        run(["ip", "-n", cli, "link", "set", "lo", "up"])
        run(["ip", "-n", cli, "link", "add", "eth0", "type", "veth", "peer", "name",
             "cli-peer", "netns", inet])
        run(["ip", "-n", inet, "link", "set", "cli-peer", "master", "br0", "up"])
        run(["ip", "-n", cli, "addr", "add", f"{CLIENT_IP}/{PREFIX}", "dev", "eth0"])
        run(["ip", "-n", cli, "link", "set", "eth0", "up"])
        run(["ip", "-n", cli, "route", "add", "default", "via", GATEWAY])

    def add_host(self, label: str, address: str) -> str:
        """Another host on this ground's internet: netns ``vlh<label>-<tag>`` whose
        ``eth0`` holds ``address``/24 on the bridge, default route via the gateway (a
        database host, or a node's host whose fulcrum runs in it). Returns its name."""
        netns = f"vlh{label}-{self.tag}"
        run(["ip", "netns", "add", netns])
        run(["ip", "-n", netns, "link", "set", "lo", "up"])
        run(["ip", "-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name",
             f"h{label}-peer", "netns", self.internet])
        run(["ip", "-n", self.internet, "link", "set", f"h{label}-peer", "master", "br0",
             "up"])
        run(["ip", "-n", netns, "addr", "add", f"{address}/{PREFIX}", "dev", "eth0"])
        run(["ip", "-n", netns, "link", "set", "eth0", "up"])
        run(["ip", "-n", netns, "route", "add", "default", "via", GATEWAY])
        return netns

    def add_nic(self, label: str, netns: str | None = None) -> str:
        """Another link on this ground's bridge: its end placed in ``netns`` (a host made
        by ``add_host``) for the fulcrum that runs there, or with no ``netns`` left in the
        host namespace (for ``SystemdContainer.adopt_link``). Returns its name."""
        nic = f"vln{label}-{self.tag}"
        run(["ip", "link", "add", nic, "type", "veth", "peer", "name", f"n{label}-peer",
             "netns", self.internet])
        run(["ip", "-n", self.internet, "link", "set", f"n{label}-peer", "master", "br0",
             "up"])
        if netns is not None:
            run(["ip", "link", "set", nic, "netns", netns])
        return nic

    def cleanup(self) -> None:
        """Remove everything this ground (and a unit launched on it) left; idempotent."""
        cleanup_tag(self.tag)


def cleanup_tag(tag: str) -> None:
    """Every netns and host link named for ``tag`` removed, the processes in each netns
    killed first (units, then hosts and the ground's own)."""
    names = netns_names()
    tagged = sorted((name for name in names if name.endswith(f"-{tag}")),
                    key=lambda name: not name.startswith("vlu"))
    for ns in tagged:
        _kill_processes_in(ns)
    for ns in tagged:
        run(["ip", "netns", "del", ns], check=False)
    for link in ip_json(["link", "show"]):
        name = link.get("ifname", "")
        if name.endswith(f"-{tag}") and name.startswith("vl"):
            run(["ip", "link", "del", name], check=False)
    with contextlib.suppress(FileNotFoundError):
        (STATE_DIR / tag).unlink()


def _kill_processes_in(netns: str) -> None:
    result = run(["ip", "netns", "pids", netns], check=False)
    for pid in result.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def sweep_stale() -> list[str]:
    """Clean up grounds whose owning process is gone; return their tags."""
    swept: list[str] = []
    if not STATE_DIR.is_dir():
        return swept
    for entry in STATE_DIR.iterdir():
        try:
            owner = int(entry.read_text().strip())
        except (OSError, ValueError):
            owner = 0
        if owner and Path(f"/proc/{owner}").exists():
            continue
        cleanup_tag(entry.name)
        swept.append(entry.name)
    return swept


# -- a unit launched on the ground ---------------------------------------------------------


FULCRUM = str(Path(sys.executable).parent / "fulcrum")


def unit_config_text(ground: Ground, valis_command: Sequence[str], *, mode: str = "dedicated",
                     **fields: object) -> str:
    """Launcher-config TOML for a unit on ``ground`` (kebab-case ``fields`` override)."""
    from valis_core.launcher_config import launcher_config_from_mapping, render_launcher_config

    table: dict[str, object] = {
        "netns-name": ground.unit_netns,
        "unit-ip": UNIT_IP,
        "unit-cidr": PREFIX,
        "public-interface": ground.nic,
        "public-gateway": GATEWAY,
        "mode": mode,
        "designated-port": 53,
        "catchall-object-path": "/opt/valis/lib/sk-lookup-catchall.bpf.o",
        "valis-command": list(valis_command),
    }
    table.update({key.replace("_", "-"): value for key, value in fields.items()})
    return render_launcher_config(launcher_config_from_mapping(table))


@attrs.define
class Fulcrum:
    """``fulcrum launch`` running as a subprocess, its stderr kept in a file."""

    process: subprocess.Popen[bytes]
    stderr_path: Path

    @classmethod
    def start(cls, config: Path, env: dict[str, str], workdir: Path,
              extra_args: Sequence[str] = ()) -> Fulcrum:
        stderr_path = workdir / f"fulcrum-{secrets.token_hex(2)}.stderr"
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                [FULCRUM, "launch", "--config", str(config), *extra_args],
                env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
            )
        return cls(process, stderr_path)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = COMMAND_TIMEOUT) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self, timeout: float = COMMAND_TIMEOUT) -> int:
        """SIGTERM and wait; a fulcrum still running after ``timeout`` is killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=COMMAND_TIMEOUT)
            raise


class NotifyListener:
    """A ``NOTIFY_SOCKET`` the run account can write to, collecting sd_notify datagrams."""

    def __init__(self, directory: Path) -> None:
        directory.chmod(0o755)
        self.path = directory / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.path.chmod(0o777)
        self.messages: list[dict[str, str]] = []

    def wait_for(self, key: str, value: str, timeout: float) -> dict[str, str]:
        """Wait (bounded) for a datagram carrying ``key=value``; return it parsed."""
        deadline = time.monotonic() + timeout
        for message in self.messages:
            if message.get(key) == value:
                return message
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            message = dict(
                line.split("=", 1) for line in data.decode().splitlines() if "=" in line
            )
            self.messages.append(message)
            if message.get(key) == value:
                return message
        raise TimeoutError(f"no {key}={value} on {self.path} within {timeout:g}s")

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def scratch_netns() -> Any:
    """A bare named netns for the block (lo up), removed afterwards."""
    name = f"vl-s-{secrets.token_hex(3)}"
    run(["ip", "netns", "add", name])
    try:
        run(["ip", "-n", name, "link", "set", "lo", "up"])
        yield name
    finally:
        run(["ip", "netns", "del", name], check=False)


def kernel_has_link_kind(kind: str, parent_kind: str = "veth") -> bool:
    """Whether this kernel can make a ``kind`` child link (tried in a scratch netns)."""
    with scratch_netns() as name:
        run(["ip", "-n", name, "link", "add", "p0", "type", parent_kind, "peer", "name", "p1"])
        made = run(["ip", "-n", name, "link", "add", "c0", "link", "p0", "type", kind],
                   check=False)
        return made.returncode == 0


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


# -- asking the node, as an outside client would -------------------------------------------


@attrs.frozen
class DigAnswer:
    """What ``dig`` reported: the response code, header flags and answer records."""

    status: str
    flags: frozenset[str]
    answer: tuple[str, ...]
    raw: str

    @property
    def authoritative(self) -> bool:
        return "aa" in self.flags


def dig(netns: str | None, server: str, name: str, rdtype: str = "SOA", *, tcp: bool = False,
        timeout: float = 2.0, port: int = 53, pid: int | None = None) -> DigAnswer:
    """``dig`` from ``netns``, or from process ``pid``'s netns (one try, bounded); raises
    if no response came back."""
    argv = ["dig", f"@{server}", "-p", str(port), name, rdtype, "+norecurse",
            f"+time={max(1, round(timeout))}", "+tries=1", "+noall", "+comments", "+answer"]
    if tcp:
        argv.append("+tcp")
    bound = timeout + COMMAND_TIMEOUT
    if pid is not None:
        out = run_in_pid(pid, argv, check=False, timeout=bound).stdout
    else:
        assert netns is not None, "dig needs a netns or a pid"
        out = run_in(netns, argv, check=False, timeout=bound).stdout
    header = re.search(r"->>HEADER<<- opcode: \w+, status: (\w+)", out)
    flags = re.search(r";; flags: ([a-z ]*);", out)
    if header is None or flags is None:
        raise RuntimeError(f"no DNS response from {server} for {name} {rdtype}:\n{out}")
    answer = tuple(
        line for line in out.splitlines() if line.strip() and not line.startswith(";")
    )
    return DigAnswer(header.group(1), frozenset(flags.group(1).split()), answer, out)


def fulcrum_environment(
    notify: NotifyListener, state_dir: Path, dsn: str, zone: str
) -> dict[str, str]:
    """The environment systemd gives fulcrum on the proving ground (node-a serving ``zone``)."""
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "NOTIFY_SOCKET": str(notify.path),
        "STATE_DIRECTORY": str(state_dir),
        "VALIS_NODE_NAME": "node-a",
        "VALIS_LOCATION": "proving-ground",
        "VALIS_OPERATOR_STATE_DSN": dsn,
        "VALIS_SERVED_ZONES": zone,
    }

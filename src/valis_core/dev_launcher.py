"""An unprivileged stand-in for fulcrum's descriptor handoff, for running a node on one
machine (``valis demo``).

It does what fulcrum does at the end of its bring-up, minus the namespace, the firewall
and the privilege: bind the DNS pair (UDP and a listening TCP socket on one port) and,
when asked, the owner listener (TCP), keep the descriptors open across exec, and exec the
resident with a launch argv rendered by ``render_launch_argv`` naming them — so the
resident adopts them on exactly the inherited-descriptor path it takes in production.
Binding is a step of its own so that a taken port is refused before anything else is
set up, and the sockets are held until the resident has them. Only an unprivileged port
can be bound here (``dns.listen.bind_dns_pair``): valis never binds a privileged port,
and neither does its stand-in.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from valis_core.dns.serve.listen import ListenError, bind_dns_pair, bound_socket, format_address
from valis_core.errors import ValisError
from valis_core.launch import LaunchRecord, render_launch_argv

__all__ = [
    "DirectoryBusy",
    "Listeners",
    "bind_dns_pair",
    "bind_listeners",
    "lock_directory",
    "resident_argv",
    "spawn_resident",
]

LOCK_NAME = "demo.lock"


class DirectoryBusy(ValisError):
    """Another process holds the directory a demo node runs from."""


def lock_directory(root: Path) -> int:
    """Take ``root``'s lock (an exclusive ``flock`` on ``root/demo.lock``) for as long as
    the returned descriptor stays open (it closes on exec and when this process ends), and
    write this process's PID into it. Raises ``DirectoryBusy`` naming the holder's PID
    when another process holds it: two nodes on one cluster and state directory would
    share a database and one's stop would stop the other's PostgreSQL."""
    path = root / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        if exc.errno not in {errno.EWOULDBLOCK, errno.EAGAIN}:
            raise DirectoryBusy(f"cannot lock {path}: {exc.strerror or exc}") from None
        raise DirectoryBusy(
            f"{root} is in use by another demo (PID {holder}); stop that one (Ctrl-C in "
            "its terminal) or give this one another directory with --cache-dir"
        ) from None
    # The holder's PID, for the message above: a note beside the lock, not state.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


@attrs.frozen
class Listeners:
    """The sockets handed down: the DNS pair and, if asked for, the owner listener."""

    udp: socket.socket
    tcp: socket.socket
    owner: socket.socket | None = None

    @property
    def port(self) -> int:
        return int(self.udp.getsockname()[1])

    @property
    def owner_port(self) -> int | None:
        return None if self.owner is None else int(self.owner.getsockname()[1])

    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.udp, self.tcp) if self.owner is None else (self.udp, self.tcp, self.owner)

    def close(self) -> None:
        for sock in self.sockets():
            sock.close()


def bind_listeners(
    family: socket.AddressFamily, host: str, port: int, owner_port: int | None = None
) -> Listeners:
    """Bind the DNS pair on ``host``:``port`` and the owner listener on ``owner_port``
    (``None``: none). Raises ``ListenError`` naming the address that is taken."""
    udp, tcp = bind_dns_pair(family, host, port)
    if owner_port is None:
        return Listeners(udp, tcp)
    try:
        owner = bound_socket(family, socket.SOCK_STREAM, host, owner_port)
    except OSError as exc:
        udp.close()
        tcp.close()
        raise ListenError(
            f"cannot listen for owner updates on {format_address(host, owner_port)} (TCP): "
            f"{exc.strerror or exc}; choose another owner port, or stop the process holding it"
        ) from None
    return Listeners(udp, tcp, owner)


def resident_argv(
    valis_command: Sequence[str],
    udp_fd: int,
    tcp_fd: int,
    port: int,
    state_dir: Path,
    *,
    owner_fd: int | None = None,
) -> list[str]:
    """The resident's argv: the launch record's flags, its state directory among them."""
    record = LaunchRecord(
        resident=True, ports=frozenset({port}), dns_udp_fds=(udp_fd,), dns_tcp_fd=tcp_fd,
        owner_fd=owner_fd, state_dir=str(state_dir),
    )
    return [*valis_command, *render_launch_argv(record)]


def spawn_resident(
    valis_command: Sequence[str],
    listeners: Listeners,
    *,
    state_dir: Path,
    env: Mapping[str, str],
) -> subprocess.Popen[bytes]:
    """Start the resident holding ``listeners``, then close this process's copies."""
    try:
        owner_fd = None if listeners.owner is None else listeners.owner.fileno()
        argv = resident_argv(
            valis_command, listeners.udp.fileno(), listeners.tcp.fileno(), listeners.port,
            state_dir, owner_fd=owner_fd,
        )
        # pass_fds clears close-on-exec on exactly these descriptors in the child.
        fds = tuple(sock.fileno() for sock in listeners.sockets())
        return subprocess.Popen(argv, pass_fds=fds, env=dict(env))
    finally:
        listeners.close()

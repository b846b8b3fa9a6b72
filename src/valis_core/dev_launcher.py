"""An unprivileged stand-in for fulcrum's descriptor handoff, for running a node on one
machine (``valis demo``).

It does what fulcrum does at the end of its bring-up, minus the namespace, the firewall
and the privilege: bind the DNS pair (UDP and a listening TCP socket on one port), keep
the two descriptors open across exec, and exec the resident with a launch argv rendered
by ``render_launch_argv`` naming them — so the resident adopts them on exactly the
inherited-descriptor path it takes in production. Only an unprivileged port can be bound
here: valis never binds a privileged port, and neither does its stand-in.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from valis_core.errors import ValisError
from valis_core.launch import LaunchRecord, render_launch_argv
from valis_core.resident.adopt import PRIVILEGED_PORT_LIMIT
from valis_core.resident.state_dir import FLAG as STATE_DIR_FLAG


class DevLaunchError(ValisError):
    """The stand-in cannot bind the DNS pair it was asked for."""


def bind_dns_pair(
    family: socket.AddressFamily, host: str, port: int
) -> tuple[socket.socket, socket.socket]:
    """A bound UDP socket and a listening TCP socket on ``host``:``port``."""
    if port < PRIVILEGED_PORT_LIMIT:
        raise DevLaunchError(
            f"dev launcher: refusing port {port}: binding a privileged port is the "
            "launcher's (fulcrum's) act, and this stand-in runs without privilege"
        )
    udp = socket.socket(family, socket.SOCK_DGRAM)
    tcp = socket.socket(family, socket.SOCK_STREAM)
    try:
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        udp.bind((host, port))
        tcp.bind((host, port))
        tcp.listen(128)
    except OSError as exc:
        udp.close()
        tcp.close()
        raise DevLaunchError(
            f"dev launcher: cannot bind {host} port {port}: {exc.strerror or exc} (is "
            "something else serving there? pick another port with --listen)"
        ) from exc
    return udp, tcp


def resident_argv(
    valis_command: Sequence[str], udp_fd: int, tcp_fd: int, port: int, state_dir: Path
) -> list[str]:
    """The resident's argv: the launch record's flags, then the resident's own flag."""
    record = LaunchRecord(
        resident=True, ports=frozenset({port}), dns_udp_fd=udp_fd, dns_tcp_fd=tcp_fd
    )
    return [*valis_command, *render_launch_argv(record), STATE_DIR_FLAG, str(state_dir)]


def spawn_resident(
    valis_command: Sequence[str],
    *,
    family: socket.AddressFamily,
    host: str,
    port: int,
    state_dir: Path,
    env: Mapping[str, str],
) -> subprocess.Popen[bytes]:
    """Bind the pair, start the resident holding it, and keep no copy here."""
    udp, tcp = bind_dns_pair(family, host, port)
    with contextlib.closing(udp), contextlib.closing(tcp):
        argv = resident_argv(valis_command, udp.fileno(), tcp.fileno(), port, state_dir)
        # pass_fds clears close-on-exec on exactly these two descriptors in the child.
        return subprocess.Popen(argv, pass_fds=(udp.fileno(), tcp.fileno()), env=dict(env))

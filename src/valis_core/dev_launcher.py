"""An unprivileged stand-in for fulcrum's descriptor handoff, for running a node on one
machine (``valis demo``).

It does what fulcrum does at the end of its bring-up, minus the namespace, the firewall
and the privilege: bind the DNS pair (UDP and a listening TCP socket on one port), keep
the two descriptors open across exec, and exec the resident with a launch argv rendered
by ``render_launch_argv`` naming them — so the resident adopts them on exactly the
inherited-descriptor path it takes in production. Only an unprivileged port can be bound
here (``dns.listen.bind_dns_pair``): valis never binds a privileged port, and neither
does its stand-in.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from valis_core.dns.listen import bind_dns_pair
from valis_core.launch import LaunchRecord, render_launch_argv
from valis_core.resident.state_dir import FLAG as STATE_DIR_FLAG

__all__ = ["bind_dns_pair", "resident_argv", "spawn_resident"]


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

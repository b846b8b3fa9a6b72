"""What fulcrum checks about a pushed descriptor before it steers any traffic to it.

A push is accepted only when the descriptor is a listening TCP socket (``SO_ACCEPTCONN``)
that lives in the unit's network namespace (``SIOCGSKNS`` gives the socket's netns,
compared by inode with the unit's), and when the ports declared with it are all elected
by the launcher config (``edge-port``). ``probe_pushed`` asks the kernel; ``judge_push``
is pure and says why not, or ``None``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat

import attrs

#: ioctl: a descriptor for the network namespace a socket belongs to (linux/sockios.h).
SIOCGSKNS = 0x894C


@attrs.frozen
class NamespaceId:
    """A network namespace, by the device and inode of its nsfs file."""

    dev: int
    ino: int


@attrs.frozen
class PushedSocket:
    """The kernel's answer about a pushed descriptor; ``socket`` False for anything else."""

    socket: bool
    family: int = 0
    type: int = 0
    listening: bool = False
    netns: NamespaceId | None = None
    address: str = ""


def namespace_of_path(path: str) -> NamespaceId:
    """The netns a bind-mounted nsfs file (``/run/netns/NAME``) names."""
    info = os.stat(path)
    return NamespaceId(info.st_dev, info.st_ino)


def probe_pushed(fd: int) -> PushedSocket:
    """Ask the kernel what ``fd`` is; never raises for a descriptor of the wrong kind."""
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return PushedSocket(socket=False)
    except OSError:
        return PushedSocket(socket=False)
    try:
        sock = socket.socket(fileno=fd)
    except OSError:  # a socket of a family Python cannot wrap
        return PushedSocket(socket=True)
    try:
        family = sock.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
        kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
        listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        address = ""
        with contextlib.suppress(OSError):
            address = str(sock.getsockname())
        return PushedSocket(True, family, kind, listening, _socket_netns(fd), address)
    except OSError:
        return PushedSocket(socket=True)
    finally:
        sock.detach()


def _socket_netns(fd: int) -> NamespaceId | None:
    try:
        ns_fd = fcntl.ioctl(fd, SIOCGSKNS)
    except OSError:
        return None
    try:
        info = os.fstat(ns_fd)
        return NamespaceId(info.st_dev, info.st_ino)
    finally:
        os.close(ns_fd)


def judge_push(
    declared: frozenset[int],
    pushed: PushedSocket,
    *,
    unit_netns: NamespaceId,
    elected: frozenset[int],
) -> str | None:
    """Why the push must be refused, or ``None`` when fulcrum may steer to it."""
    if not elected:
        return (
            "no edge-port is elected in the launcher config, so nothing is steered; "
            "name edge-port there to serve the edge"
        )
    outside = sorted(declared - elected)
    if outside:
        return (
            f"declared port(s) {','.join(map(str, outside))} not elected by the launcher "
            f"config (edge-port elects {','.join(map(str, sorted(elected)))})"
        )
    if not pushed.socket:
        return "the pushed descriptor is not a socket"
    if pushed.family not in (socket.AF_INET, socket.AF_INET6) or (
        pushed.type != socket.SOCK_STREAM
    ):
        return "the pushed descriptor is not a TCP socket"
    if not pushed.listening:
        return "the pushed socket is not listening (SO_ACCEPTCONN is off); listen() first"
    if pushed.netns is None:
        return "the pushed socket's network namespace cannot be read (SIOCGSKNS)"
    if pushed.netns != unit_netns:
        return (
            "the pushed socket lives in another network namespace than the unit's; the "
            "resident mints it inside the unit's netns"
        )
    return None

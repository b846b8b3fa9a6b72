"""Asking the kernel what an inherited descriptor is, and taking it over.

``probe_descriptor`` answers for ``adopt.judge`` from ``fstat``, ``SO_TYPE``,
``SO_ACCEPTCONN`` and ``getsockname`` — never from the flag that carried the descriptor.
``adopt_descriptors`` does the whole step: probe, judge, then wrap the adopted
descriptors as trio sockets, marked close-on-exec so nothing the resident might start
inherits the node's public sockets.
"""

from __future__ import annotations

import os
import socket
import stat

import attrs
import trio

from valis_core.launch import LaunchRecord
from valis_core.resident.adopt import Adopted, Adoption, Kind, Probe, all_handed_down, judge

_FILE_TYPES = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def probe_descriptor(fd: int) -> Probe:
    """What the kernel says ``fd`` is; never raises for a closed or foreign descriptor."""
    try:
        info = os.fstat(fd)
    except OSError:
        return Probe(fd=fd, kind=Kind.NOT_OPEN)
    if not stat.S_ISSOCK(info.st_mode):
        detail = next((name for test, name in _FILE_TYPES if test(info.st_mode)), "")
        return Probe(fd=fd, kind=Kind.NOT_SOCKET, detail=detail)
    sock = socket.socket(fileno=fd)
    try:
        return _probe_socket(fd, sock)
    finally:
        sock.detach()


def _probe_socket(fd: int, sock: socket.socket) -> Probe:
    family = sock.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
    kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return Probe(fd=fd, kind=Kind.OTHER_SOCKET, detail=_family_name(family))
    address = sock.getsockname()
    host, port = str(address[0]), int(address[1])
    if kind == socket.SOCK_DGRAM:
        return Probe(fd=fd, kind=Kind.UDP, host=host, port=port)
    if kind == socket.SOCK_STREAM:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        found = Kind.TCP_LISTENING if listening else Kind.TCP_NOT_LISTENING
        return Probe(fd=fd, kind=found, host=host, port=port)
    return Probe(fd=fd, kind=Kind.OTHER_SOCKET, host=host, port=port, detail=f"type {kind}")


def _family_name(family: int) -> str:
    try:
        return socket.AddressFamily(family).name
    except ValueError:
        return f"family {family}"


@attrs.frozen
class AdoptedSockets:
    """The adopted descriptors as trio sockets, with what the kernel said about each."""

    adoption: Adoption
    dns_udp: trio.socket.SocketType
    dns_tcp: trio.socket.SocketType
    owner: trio.socket.SocketType | None
    edge: trio.socket.SocketType | None
    #: the DNS workers' UDP sockets after ``dns_udp`` (``--dns-udp-fds``)
    dns_udp_more: tuple[trio.socket.SocketType, ...] = ()

    @property
    def dns_udps(self) -> tuple[trio.socket.SocketType, ...]:
        """Every DNS UDP socket, one per worker, ``dns_udp`` first."""
        return (self.dns_udp, *self.dns_udp_more)

    def close(self) -> None:
        """Close every adopted socket, edge first and the DNS pair last."""
        for sock in (self.edge, self.owner, self.dns_tcp, *reversed(self.dns_udps)):
            if sock is not None:
                sock.close()


def adopt_descriptors(record: LaunchRecord) -> AdoptedSockets:
    """Probe and judge every descriptor ``record`` names, then take them over.

    Raises ``AdoptionError`` before taking anything over when a descriptor is not what
    its flag says or a served port has none.
    """
    probes = {fd: probe_descriptor(fd) for fd in all_handed_down(record)}
    adoption = judge(record, probes)
    return AdoptedSockets(
        adoption=adoption,
        dns_udp=_take(adoption.dns_udp),
        dns_tcp=_take(adoption.dns_tcp),
        owner=_take(adoption.owner) if adoption.owner is not None else None,
        edge=_take(adoption.edge) if adoption.edge is not None else None,
        dns_udp_more=tuple(_take(item) for item in adoption.dns_udp_more),
    )


def _take(item: Adopted) -> trio.socket.SocketType:
    os.set_inheritable(item.fd, False)
    return trio.socket.from_stdlib_socket(socket.socket(fileno=item.fd))

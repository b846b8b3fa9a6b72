"""The privileged binds: the unit's public sockets, made inside its netns.

fulcrum binds the DNS pair, UDP and TCP on the designated port (53 by default), on the
unit IP (and the edge and owner ports, TCP, when the config names them) — the binds the
unprivileged resident cannot make — and clears CLOEXEC on exactly those descriptors so
they survive the exec chain.

A socket belongs to the network namespace it was created in, whichever namespace later
holds its descriptor. So the sockets are created on a short-lived thread that switches
itself (libc ``setns``; Python 3.11 has no ``os.setns``) into the unit's netns, and the
launcher's other threads never leave the host namespace. That thread is a dedicated
one rather than a pooled ``trio.to_thread`` worker on purpose: a thread whose namespace
was switched must not be handed back to a pool where later work would run inside the
unit's netns. It dies when it is done, and its namespace with it.

The same thread reads ``net.ipv4.ip_unprivileged_port_start`` as the unit's netns sees
it (``/proc/sys/net`` answers for the reading thread's namespace) and refuses to bind
when it is below 1024: with it lowered, the resident could bind :53 itself.

With ``dns_workers`` above 1 (``VALIS_DNS_WORKERS``), the DNS address gets that many UDP
sockets, each bound with ``SO_REUSEPORT`` into one group: the kernel spreads datagrams
across them by a hash of the source and destination addresses and ports, so one client
flow stays on one socket and many clients spread evenly; each socket is drained by a
worker of its own. No reuseport BPF program is attached (``SO_ATTACH_REUSEPORT_CBPF``
choosing by the receiving CPU): it pays only when each worker is pinned to the CPU that
takes its packets' interrupts, and the unit's traffic comes in over a veth, macvlan or
ipvlan device whose receive work runs on the sender's CPU, so choosing by CPU would
crowd one socket (docs/fulcrum.md). One worker binds one socket without
``SO_REUSEPORT``, as before workers. TCP keeps one listening socket: accepted
connections are served as they always were.

The DNS UDP socket's receive queue is what carries queries across a resident's restart or
handover (nothing is re-bound; the next resident reads what waited), so fulcrum, being
root, forces each of them to ``DNS_RECEIVE_BUFFER`` past ``net.core.rmem_max``: the kernel's default
of about 208 KiB holds a few hundred queries, 20-30 ms at 10 000 q/s.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs

from fulcrum.errors import LauncherError
from fulcrum.netns import netns_path
from valis_core.dns.serve.listen import bound_socket
from valis_core.launcher_config import IPAddress
from valis_core.reachability import DNS_PORT

CLONE_NEWNET = 0x40000000
#: The kernel's default, and the floor fulcrum requires inside the unit's netns.
PRIVILEGED_PORT_FLOOR = 1024
UNPRIVILEGED_PORT_START = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
BIND_TIMEOUT = 10.0
#: Asked of the kernel for the DNS UDP socket (it books twice this for its overhead):
#: about a second of queries at 10 000 q/s.
DNS_RECEIVE_BUFFER = 8 * 1024 * 1024
#: <asm-generic/socket.h>; the socket module does not name it.
SO_RCVBUFFORCE = 33

_T = TypeVar("_T")


@attrs.frozen(eq=False)
class UnitSockets:
    """The sockets fulcrum bound for the unit; each descriptor is inheritable."""

    dns_udp: socket.socket
    dns_tcp: socket.socket
    edge_tcp: socket.socket | None = None
    owner_tcp: socket.socket | None = None
    #: the DNS workers' UDP sockets after ``dns_udp``, in one ``SO_REUSEPORT`` group
    dns_udp_more: tuple[socket.socket, ...] = ()

    @property
    def dns_udps(self) -> tuple[socket.socket, ...]:
        """Every DNS UDP socket, one per worker, ``dns_udp`` first."""
        return (self.dns_udp, *self.dns_udp_more)

    def all(self) -> tuple[socket.socket, ...]:
        present = (self.dns_udp, self.dns_tcp, self.edge_tcp, self.owner_tcp,
                   *self.dns_udp_more)
        return tuple(sock for sock in present if sock is not None)

    def fds(self) -> tuple[int, ...]:
        return tuple(sock.fileno() for sock in self.all())

    def close(self) -> None:
        for sock in self.all():
            sock.close()


def bind_unit_sockets(
    netns_name: str,
    unit_ip: IPAddress,
    *,
    edge_port: int | None = None,
    owner_port: int | None = None,
    dns_port: int = DNS_PORT,
    dns_workers: int = 1,
) -> UnitSockets:
    """Bind the unit's public sockets inside ``netns_name``; the caller stays where it is.
    ``dns_workers`` UDP sockets share the DNS address (``SO_REUSEPORT`` above one)."""
    if dns_workers < 1:
        raise LauncherError(f"dns_workers is {dns_workers}; a unit answers on at least one")
    return _in_netns_thread(
        netns_name,
        lambda: _bind_all(
            netns_name, unit_ip, dns_port, edge_port, owner_port, dns_workers=dns_workers
        ),
    )


def unprivileged_port_start(netns_name: str) -> int:
    """``net.ipv4.ip_unprivileged_port_start`` as seen inside ``netns_name``."""
    return _in_netns_thread(netns_name, _read_port_start)


def _bind_all(
    netns_name: str,
    unit_ip: IPAddress,
    dns_port: int,
    edge_port: int | None,
    owner_port: int | None,
    *,
    dns_workers: int = 1,
) -> UnitSockets:
    floor = _read_port_start()
    if floor < PRIVILEGED_PORT_FLOOR:
        raise LauncherError(
            f"netns {netns_name} has net.ipv4.ip_unprivileged_port_start={floor}, below "
            f"{PRIVILEGED_PORT_FLOOR}: the unprivileged resident could bind :{dns_port} "
            "itself; fulcrum refuses to launch until it is back to 1024 "
            f"(ip netns exec {netns_name} sysctl -w net.ipv4.ip_unprivileged_port_start=1024)"
        )
    made: list[socket.socket] = []
    try:
        group = dns_workers > 1
        udps = [
            _bind(made, unit_ip, dns_port, socket.SOCK_DGRAM, netns_name, reuse_port=group)
            for _ in range(dns_workers)
        ]
        for udp in udps:
            _force_receive_buffer(udp, DNS_RECEIVE_BUFFER)
        dns_tcp = _bind(made, unit_ip, dns_port, socket.SOCK_STREAM, netns_name)
        edge = _bind_optional(made, unit_ip, edge_port, netns_name)
        owner = _bind_optional(made, unit_ip, owner_port, netns_name)
        for sock in made:
            os.set_inheritable(sock.fileno(), True)
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return UnitSockets(udps[0], dns_tcp, edge, owner, dns_udp_more=tuple(udps[1:]))


def _bind_optional(
    made: list[socket.socket], unit_ip: IPAddress, port: int | None, netns_name: str
) -> socket.socket | None:
    if port is None:
        return None
    return _bind(made, unit_ip, port, socket.SOCK_STREAM, netns_name)


def _bind(
    made: list[socket.socket],
    unit_ip: IPAddress,
    port: int,
    kind: int,
    netns_name: str,
    *,
    reuse_port: bool = False,
) -> socket.socket:
    family = socket.AF_INET if unit_ip.version == 4 else socket.AF_INET6
    proto = "udp" if kind == socket.SOCK_DGRAM else "tcp"
    where = f"[{unit_ip}]:{port}" if unit_ip.version == 6 else f"{unit_ip}:{port}"
    try:
        sock = bound_socket(family, kind, str(unit_ip), port, reuse_port=reuse_port)
    except OSError as exc:
        raise LauncherError(
            f"binding {where}/{proto} in netns {netns_name}: {exc.strerror}; is the unit "
            "address assigned there, and is nothing else bound to that port?"
        ) from None
    made.append(sock)
    return sock


def _force_receive_buffer(sock: socket.socket, size: int) -> None:
    """``SO_RCVBUFFORCE`` (root), else what ``SO_RCVBUF`` grants: a short queue loses more."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def _read_port_start() -> int:
    return int(UNPRIVILEGED_PORT_START.read_text().strip())


def _in_netns_thread(netns_name: str, work: Callable[[], _T]) -> _T:
    """Run ``work`` on a fresh thread that first joins ``netns_name``'s network namespace."""
    outcome: list[_T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            _setns(netns_name)
            outcome.append(work())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=body, name=f"fulcrum-netns-{netns_name}", daemon=True)
    thread.start()
    thread.join(BIND_TIMEOUT)
    if thread.is_alive():
        raise LauncherError(
            f"working inside netns {netns_name} did not finish within {BIND_TIMEOUT:g}s"
        )
    if failure:
        raise failure[0]
    return outcome[0]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _setns(netns_name: str) -> None:
    path = netns_path(netns_name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise LauncherError(f"opening netns {netns_name} ({path}): {exc.strerror}") from None
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise LauncherError(f"entering netns {netns_name}: {os.strerror(err)}")
    finally:
        os.close(fd)

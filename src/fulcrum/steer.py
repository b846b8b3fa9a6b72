"""The sk_lookup steer: the edge's declared ports on the unit address, to one socket.

fulcrum loads the steer object (``catchall-object-path``, built from
``packaging/bpf/sk_lookup_catchall.bpf.c``) while still privileged, fills its maps with
the unit address and the declared ports, and only then attaches its ``sk_lookup``
program to the unit's netns, so the program is never live half configured. ``assign``
puts the node's listening TCP socket into the SOCKMAP: a connection to a declared port on
the unit address then reaches that socket whatever port it is bound on; any other
lookup is passed over untouched and the firewall decides. ``assign`` again replaces the
socket in place (one map update: a lookup sees the old socket or the new one, never
none). ``close`` removes the link first, then the object (contract §6); no link outlives
it, and a failed ``attach`` leaves nothing attached.

Only TCP is steered: a steered UDP socket receives, but its replies leave from its own
port, so :53 stays on the descriptors fulcrum binds and hands down.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv6Address

from fulcrum.errors import LauncherError
from valis_core import libbpf

log = logging.getLogger(__name__)

PROGRAM = "valis_steer"
UNIT_MAP = "valis_unit"
PORTS_MAP = "valis_ports"
SOCKET_MAP = "valis_socket"
#: ``valis_socket``'s slots, one per protocol.
TCP_SLOT = 0
#: ``valis_ports``' capacity in the object (``MAX_PORTS``).
MAX_PORTS = 64
_SO_PROTOCOL = getattr(socket, "SO_PROTOCOL", 38)
_SO_ACCEPTCONN = getattr(socket, "SO_ACCEPTCONN", 30)

IPAddress = IPv4Address | IPv6Address


class SteerError(LauncherError):
    """The steer could not be loaded, attached or pointed at a socket."""


class Steer:
    """One attached steer: the link in the unit's netns and the object behind it."""

    def __init__(self, object_path: str, handle: int) -> None:
        self.object_path = object_path
        self._handle: int | None = handle
        self._link: int | None = None
        self._socket_fd = -1

    @classmethod
    def attach(
        cls,
        object_path: str,
        netns_fd: int,
        unit_address: IPAddress | Iterable[IPAddress],
        ports: frozenset[int],
    ) -> Steer:
        """Open, load, fill and attach the steer object; nothing stays attached on failure.

        ``unit_address`` is the unit's address, or one of each family; ``ports`` the
        declared ports steered to the socket ``assign`` names.
        """
        addresses = _addresses(unit_address)
        declared = _ports(ports)
        remedy = (
            "check catchall-object-path in the launcher config (the delivery ships the "
            "object at lib/sk-lookup-catchall.bpf.o)"
        )
        try:
            handle = libbpf.open_object(object_path)
        except libbpf.BpfError as exc:
            raise SteerError(f"sk_lookup steer: {exc}; {remedy}") from None
        steer = cls(object_path, handle)
        try:
            steer._load_and_attach(netns_fd, addresses, declared)
        except BaseException:
            steer.close()
            raise
        log.info(
            "sk_lookup steer attached from %s: %s port(s) %s",
            object_path, ", ".join(map(str, addresses)), ", ".join(map(str, sorted(declared))),
        )
        return steer

    def assign(self, listening_fd: int) -> None:
        """Steer the declared ports to ``listening_fd``, replacing any socket in place.

        The descriptor is the node's listening TCP socket; the map holds its own
        reference to the socket, so the caller may close ``listening_fd`` afterwards.
        """
        if self._handle is None:
            raise SteerError("sk_lookup steer: assign after close; attach the steer again")
        _check_listening_tcp(listening_fd)
        self._update(
            self._socket_fd, struct.pack("=I", TCP_SLOT), struct.pack("=Q", listening_fd),
            f"putting the node's listening socket (fd {listening_fd}) in {SOCKET_MAP}",
        )

    def close(self) -> None:
        """Detach the link, then release the object (maps, program, socket); idempotent."""
        link, self._link = self._link, None
        if link is not None:
            libbpf.destroy_link(link)
        handle, self._handle = self._handle, None
        if handle is not None:
            libbpf.close_object(handle)

    @property
    def attached(self) -> bool:
        return self._link is not None

    # -- bring-up -----------------------------------------------------------------------

    def _load_and_attach(
        self, netns_fd: int, addresses: tuple[IPAddress, ...], ports: frozenset[int]
    ) -> None:
        assert self._handle is not None
        path = self.object_path
        try:
            libbpf.load_object(self._handle, path)
        except libbpf.BpfError as exc:
            raise SteerError(
                f"sk_lookup steer: {exc}; fulcrum loads it as root (CAP_BPF, "
                "CAP_NET_ADMIN) on a Linux >= 5.9 kernel with BPF enabled"
            ) from None
        program = libbpf.find_program(self._handle, PROGRAM)
        fds: dict[str, int] = {}
        absent = [] if program is not None else [f"program {PROGRAM}"]
        for name in (UNIT_MAP, PORTS_MAP, SOCKET_MAP):
            fd = libbpf.map_fd(self._handle, name)
            if fd is None:
                absent.append(f"map {name}")
            else:
                fds[name] = fd
        if program is None or absent:
            raise SteerError(
                f"sk_lookup steer: {path} is not valis's steer object (no "
                f"{', '.join(absent)}); point catchall-object-path at the delivery's "
                "lib/sk-lookup-catchall.bpf.o"
            )
        unit_fd, ports_fd, self._socket_fd = fds[UNIT_MAP], fds[PORTS_MAP], fds[SOCKET_MAP]
        for address in addresses:
            slot = 0 if address.version == 4 else 1
            value = struct.pack("=I", 1) + address.packed.ljust(16, b"\0")
            self._update(unit_fd, struct.pack("=I", slot), value,
                         f"setting the unit address {address} in {UNIT_MAP}")
        for port in sorted(ports):
            self._update(ports_fd, struct.pack("=H", port), b"\x01",
                         f"declaring port {port} in {PORTS_MAP}")
        try:
            self._link = libbpf.attach_netns(
                program, netns_fd, f"attaching {PROGRAM} to the unit's netns"
            )
        except libbpf.BpfError as exc:
            raise SteerError(
                f"sk_lookup steer: {exc}; is netns_fd a network namespace, and is "
                "fulcrum root?"
            ) from None

    @staticmethod
    def _update(fd: int, key: bytes, value: bytes, what: str) -> None:
        try:
            libbpf.update_element(fd, key, value, what)
        except libbpf.BpfError as exc:
            raise SteerError(f"sk_lookup steer: {exc}") from None


def _addresses(unit_address: IPAddress | Iterable[IPAddress]) -> tuple[IPAddress, ...]:
    if isinstance(unit_address, IPv4Address | IPv6Address):
        addresses: tuple[IPAddress, ...] = (unit_address,)
    else:
        addresses = tuple(unit_address)
    versions = [address.version for address in addresses]
    if not addresses or len(set(versions)) != len(versions):
        raise SteerError(
            "sk_lookup steer: give the unit's address, or one IPv4 and one IPv6 address, "
            f"not {', '.join(map(str, addresses)) or 'none'}"
        )
    return addresses


def _ports(ports: frozenset[int]) -> frozenset[int]:
    bad = sorted(port for port in ports if not 0 < port < 65536)
    if bad or not ports or len(ports) > MAX_PORTS:
        raise SteerError(
            f"sk_lookup steer: the declared ports must be 1 to {MAX_PORTS} ports in "
            f"1-65535, not {sorted(ports) or 'none'}"
        )
    return ports


def _check_listening_tcp(fd: int) -> None:
    """The SOCKMAP slot is TCP's: refuse anything but a listening TCP socket, by name."""
    try:
        probe = socket.socket(fileno=fd)
    except OSError as exc:
        raise SteerError(f"sk_lookup steer: descriptor {fd} is not a socket: {exc.strerror}"
                         ) from None
    try:
        protocol = probe.getsockopt(socket.SOL_SOCKET, _SO_PROTOCOL)
        listening = probe.getsockopt(socket.SOL_SOCKET, _SO_ACCEPTCONN)
    except OSError as exc:
        raise SteerError(f"sk_lookup steer: descriptor {fd}: {exc.strerror}") from None
    finally:
        probe.detach()
    if protocol != socket.IPPROTO_TCP or not listening:
        raise SteerError(
            f"sk_lookup steer: descriptor {fd} is not a listening TCP socket; the steer "
            "carries TCP only (a steered UDP socket's replies leave from its own port)"
        )

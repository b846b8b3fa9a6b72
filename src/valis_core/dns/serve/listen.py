"""Binding the DNS pair: a UDP socket and a listening TCP socket on one address and port.

Three programs bind it: fulcrum (privileged, inside the unit's namespace, then hands it
down), ``valis serve`` and the demo's launcher stand-in (unprivileged, on this host). All
three make each socket with ``bound_socket``, so the pair behaves the same everywhere:
``SO_REUSEADDR`` on TCP (a restarted server rebinds while old connections linger in
TIME_WAIT), ``IPV6_V6ONLY`` on IPv6 (an IPv6 pair never claims the IPv4 port), the kernel's
largest accept backlog; ``SO_REUSEPORT`` when asked, for the DNS workers' UDP sockets
that share one address (all of a group must ask for it, each made by the same account).
``bind_dns_pair`` is the unprivileged way in: it refuses a privileged port, because valis
never binds one itself.
"""

from __future__ import annotations

import errno
import socket

from valis_core.errors import ValisError

PRIVILEGED_PORT_LIMIT = 1024
"""Ports below this are privileged: only the launcher binds them."""

_BIND_ATTEMPTS = 20


class ListenError(ValisError):
    """The DNS pair cannot be bound where it was asked for."""


def bound_socket(
    family: socket.AddressFamily, kind: int, host: str, port: int, *, reuse_port: bool = False
) -> socket.socket:
    """One socket of the pair, bound (and listening, for TCP); raises ``OSError``.
    ``reuse_port``: joins (or starts) the ``SO_REUSEPORT`` group on that address."""
    sock = socket.socket(family, kind)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        if kind == socket.SOCK_STREAM:
            sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_dns_pair(
    family: socket.AddressFamily, host: str, port: int
) -> tuple[socket.socket, socket.socket]:
    """The (UDP, TCP) pair on ``host``:``port``, unprivileged; port 0 picks a port free
    for both. Raises ``ListenError``."""
    (udp,), tcp = bind_dns_sockets(family, host, port)
    return udp, tcp


def bind_dns_sockets(
    family: socket.AddressFamily, host: str, port: int, workers: int = 1
) -> tuple[tuple[socket.socket, ...], socket.socket]:
    """``workers`` UDP sockets (one ``SO_REUSEPORT`` group above one) and a listening
    TCP socket on ``host``:``port``, unprivileged; port 0 picks a port free for both.
    Raises ``ListenError``."""
    if 0 < port < PRIVILEGED_PORT_LIMIT:
        raise ListenError(
            f"refusing privileged port {port}: valis never binds a privileged port itself "
            "(fulcrum binds :53 and hands it to the resident); use a port of 1024 or above"
        )
    if workers < 1:
        raise ListenError(f"{workers} DNS workers: at least one UDP socket is bound")
    group = workers > 1
    for _ in range(_BIND_ATTEMPTS):
        try:
            tcp = bound_socket(family, socket.SOCK_STREAM, host, port)
        except OSError as exc:
            raise _cannot(host, port, exc) from None
        chosen = tcp.getsockname()[1]
        udps: list[socket.socket] = []
        try:
            for _ in range(workers):
                udps.append(
                    bound_socket(family, socket.SOCK_DGRAM, host, chosen, reuse_port=group)
                )
        except OSError as exc:
            for sock in (*udps, tcp):
                sock.close()
            if port == 0 and exc.errno == errno.EADDRINUSE:
                continue
            raise _cannot(host, port, exc) from None
        return tuple(udps), tcp
    raise ListenError(
        f"found no port free for both UDP and TCP on {host}; name a port to listen on"
    )


def _cannot(host: str, port: int, exc: OSError) -> ListenError:
    return ListenError(
        f"cannot listen on {format_address(host, port)}: {exc.strerror or exc}; choose "
        "another address or port, or stop the process holding it"
    )

"""The resident's end of the push boot: mint a listening socket and push it to fulcrum.

A served port that no inherited descriptor covers (the edge's, steered by fulcrum's
sk_lookup program) is served on a socket the resident makes itself: TCP, on loopback,
on an ephemeral port the kernel picks — never a privileged port; the steer brings the
unit address's traffic for the declared ports to it whatever port it is bound on. The
socket is pushed over fulcrum's control socket under the sender-ordering contract
(``valis_core.push_protocol``): declare the ports, send the descriptor without waiting,
read one bounded reply. A refusal, a garbled reply or no reply within ``PUSH_TIMEOUT``
raises ``PushRefused``, and the boot stops there. ``push`` is the bring-up stage that
does it, when a served port has no inherited descriptor.
"""

from __future__ import annotations

import array
import socket

import attrs
import trio

from valis_core.boot import Boot, need
from valis_core.boot import boot_log as log
from valis_core.dns.serve.listen import PRIVILEGED_PORT_LIMIT
from valis_core.errors import ValisError
from valis_core.push_protocol import (
    DESCRIPTOR_LINE,
    MAX_LINE,
    Accepted,
    PushProtocolError,
    Reply,
    ReplyReader,
    declare_line,
)
from valis_core.resident.adopt import format_address

#: Seconds the whole push may take, connect to reply.
PUSH_TIMEOUT = 10.0
BACKLOG = 128


class PushRefused(ValisError):
    """fulcrum did not take the pushed socket; nothing is steered to this resident."""


def mint_listener(family: socket.AddressFamily) -> socket.socket:
    """A listening TCP socket on loopback, on a port the kernel picks (never privileged)."""
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
        if port < PRIVILEGED_PORT_LIMIT:  # an ephemeral range reaching below 1024
            raise PushRefused(
                f"the kernel gave the pushed socket port {port}, a privileged one; the "
                "resident never holds a privileged port it bound itself — raise "
                "net.ipv4.ip_local_port_range's low end to 1024 or above"
            )
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


async def push_listener(
    control_socket: str,
    ports: frozenset[int],
    listener: socket.socket,
    *,
    timeout: float = PUSH_TIMEOUT,
) -> None:
    """Push ``listener`` to fulcrum at ``control_socket`` for ``ports``; raise
    ``PushRefused`` unless fulcrum accepted it within ``timeout``."""
    try:
        declaration = declare_line(ports)
    except PushProtocolError as exc:
        raise PushRefused(f"cannot declare ports: {exc.reason}") from None
    with trio.move_on_after(timeout):
        try:
            reply = await _exchange(control_socket, declaration, listener.fileno())
        except PushProtocolError as exc:
            raise PushRefused(f"fulcrum at {control_socket}: {exc.reason}") from None
        except OSError as exc:
            raise PushRefused(
                f"cannot push to fulcrum's control socket {control_socket}: "
                f"{exc.strerror or exc}; fulcrum makes it (or its .socket unit does)"
            ) from None
        if not isinstance(reply, Accepted):
            raise PushRefused(f"fulcrum refused the pushed socket: {reply.reason}")
        return
    raise PushRefused(
        f"fulcrum at {control_socket} did not answer the push within {timeout:g}s"
    )


async def _exchange(path: str, declaration: bytes, fd: int) -> Reply:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        await sock.connect(path)
        try:
            await _send_all(sock, declaration)
            # The descriptor rides on the first byte of its line; no reply is awaited first.
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]
            sent = await sock.sendmsg([DESCRIPTOR_LINE], rights)
            await _send_all(sock, DESCRIPTOR_LINE[sent:])
        except (BrokenPipeError, ConnectionResetError):
            pass  # fulcrum refused early and hung up: its reply says why
        reader = ReplyReader()
        while True:
            data = await sock.recv(MAX_LINE)
            if not data:
                return reader.receive_eof()
            reply = reader.receive(data)
            if reply is not None:
                return reply


async def _send_all(sock: trio.socket.SocketType, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


def has_ports_to_push(boot: Boot) -> bool:
    return bool(need(boot.adopted).adoption.to_push)


def _close_pushed(listener: socket.socket) -> None:
    listener.close()
    log.info("pushed edge socket closed; nothing is steered to this resident any more")


async def push(boot: Boot) -> Boot:
    record, pair = need(boot.record), need(boot.adopted).adoption
    ports = pair.to_push
    family = socket.AF_INET6 if ":" in pair.dns_tcp.host else socket.AF_INET
    listener = mint_listener(family)
    boot.services.stack.callback(_close_pushed, listener)
    host, port = listener.getsockname()[:2]
    shown = ",".join(str(item) for item in sorted(ports))
    await push_listener(need(record.control_socket), ports, listener)
    log.info(
        "push: fulcrum steers port(s) %s to %s; the edge stage serves it", shown,
        format_address(host, port),
    )
    return attrs.evolve(boot, edge_listener=trio.socket.from_stdlib_socket(listener))

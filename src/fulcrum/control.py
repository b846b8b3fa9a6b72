"""fulcrum's control socket: where the resident pushes its listening socket.

An AF_UNIX stream socket at ``/run/fulcrum/<netns-name>.sock``, owned by the run account,
mode 0600. Under systemd it is made by ``fulcrum-valis-control.socket`` (so it exists
before fulcrum starts and survives fulcrum's restarts) and passed in by socket activation
(named ``control``); without systemd fulcrum makes it itself and removes it at teardown.

Each connection is one push (``valis_core.push_protocol``), served one at a time and
bounded as a whole by ``EXCHANGE_TIMEOUT``: a peer whose ``SO_PEERCRED`` uid is not the
run account's is refused before anything is read; then the declaration and the one
descriptor are read (each read bounded in size), the descriptor is checked
(``fulcrum.pushed``) and only then handed to the steer, which replaces the socket it
steered to before in place. Every other outcome — a stall, a lie, a check that fails, a
steer that cannot take it — is a ``REFUSED <reason>`` reply and a log line, and nothing
is steered. fulcrum keeps no copy of a pushed descriptor: once the resident closes its
socket, nothing is steered to it.
"""

from __future__ import annotations

import array
import contextlib
import logging
import os
import socket
import stat
import struct
from collections.abc import Callable, Mapping

import attrs
import trio

from fulcrum.activation import activated_sockets
from fulcrum.errors import LauncherError
from fulcrum.pushed import NamespaceId, judge_push, probe_pushed
from valis_core.errors import ValisError
from valis_core.push_protocol import (
    MAX_LINE,
    Accepted,
    Pushed,
    PushProtocolError,
    PushReceiver,
    Refused,
    Reply,
    reply_line,
)

log = logging.getLogger(__name__)

#: The name the ``.socket`` unit gives the control socket (``FileDescriptorName=``).
CONTROL_FD_NAME = "control"
#: Seconds one push may take from accept to reply; a slower peer is refused.
EXCHANGE_TIMEOUT = 5.0
#: Room for this many descriptors in one read: more than one is refused, not truncated.
MAX_FDS_READ = 4
SOCKET_MODE = 0o600
DIRECTORY_MODE = 0o755
BACKLOG = 8
#: Seconds between accepts after one failed, so a lasting failure never spins.
ACCEPT_RETRY = 0.5


@attrs.frozen(eq=False)
class ControlSocket:
    """The listening control socket, where it is, and whether fulcrum made it."""

    sock: socket.socket
    path: str
    made_here: bool

    def close(self) -> None:
        """Close it; remove the file only when fulcrum made it (systemd keeps its own)."""
        self.sock.close()
        if self.made_here:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def open_control_socket(
    path: str, environ: Mapping[str, str], *, uid: int, gid: int
) -> ControlSocket:
    """The control socket systemd passed in, or one made at ``path``."""
    passed = activated_sockets(environ, os.getpid()).get(CONTROL_FD_NAME, ())
    if len(passed) > 1:
        raise LauncherError(
            f"systemd passed {len(passed)} sockets named {CONTROL_FD_NAME!r}; the control "
            "socket unit must listen on one path"
        )
    if passed:
        return _adopt_passed(passed[0], uid)
    return _make(path, uid, gid)


def _adopt_passed(fd: int, uid: int) -> ControlSocket:
    sock = socket.socket(fileno=fd)
    sock.set_inheritable(False)
    bound = sock.getsockname()
    if (
        sock.family != socket.AF_UNIX
        or sock.type != socket.SOCK_STREAM
        or not isinstance(bound, str)
        or not bound.startswith("/")
        or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    ):
        sock.close()
        raise LauncherError(
            f"the socket systemd passed as {CONTROL_FD_NAME!r} is not a listening AF_UNIX "
            "stream socket on a path; use the fulcrum-valis-control.socket unit as shipped"
        )
    info = os.stat(bound)
    if info.st_uid != uid or stat.S_IMODE(info.st_mode) != SOCKET_MODE:
        sock.close()
        raise LauncherError(
            f"control socket {bound} is owned by uid {info.st_uid} with mode "
            f"{stat.S_IMODE(info.st_mode):o}; it must be the run account's (uid {uid}), "
            "mode 600: set SocketUser=/SocketMode= in its .socket unit as shipped"
        )
    return ControlSocket(sock, bound, made_here=False)


def _make(path: str, uid: int, gid: int) -> ControlSocket:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=DIRECTORY_MODE, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise LauncherError(
                f"{path} exists and is not a socket; remove it so fulcrum can make its "
                "control socket there"
            )
        os.unlink(path)  # a stale socket from a killed run
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # born 0600: no moment where another account may connect
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise LauncherError(f"cannot make the control socket {path}: {exc.strerror}") from None
    finally:
        os.umask(previous)
    os.chown(path, uid, gid)
    os.chmod(path, SOCKET_MODE)
    sock.listen(BACKLOG)
    return ControlSocket(sock, path, made_here=True)


@attrs.frozen
class PushGate:
    """What a push is checked against, and where an accepted one goes."""

    #: the run account's uid: the only peer allowed to push
    run_uid: int
    #: the unit's network namespace
    unit_netns: NamespaceId
    #: the ports the launcher config elects for the steered path (edge-port)
    elected: frozenset[int]
    #: hands the checked descriptor to the steer (``Steer.assign``); None: no steer
    assign: Callable[[int], None] | None


async def serve_control(
    listener: socket.socket,
    gate: PushGate,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve pushes on ``listener`` until cancelled, one connection at a time."""
    sock = trio.socket.from_stdlib_socket(listener.dup())
    with sock:
        task_status.started()
        while True:
            try:
                conn, _ = await sock.accept()
            except OSError as exc:  # EMFILE and the like: the next accept may succeed
                log.warning("control: accept failed: %s", exc.strerror or exc)
                await trio.sleep(ACCEPT_RETRY)
                continue
            with conn:
                try:
                    await serve_push(conn, gate)
                except Exception:  # a defect here must not take the unit down with it
                    log.exception("control: a push failed unexpectedly; nothing was steered")


async def serve_push(conn: trio.socket.SocketType, gate: PushGate) -> Reply:
    """One push on an accepted connection: read, check, steer, reply; never raises
    for anything the peer did."""
    received: list[int] = []
    peer_pid, peer_uid, _ = _peer_credentials(conn)
    reply: Reply
    with trio.move_on_after(EXCHANGE_TIMEOUT) as bound:
        try:
            reply = await _exchange(conn, gate, peer_uid, received)
        finally:
            for fd in received:
                os.close(fd)
    if bound.cancelled_caught:
        reply = Refused(f"no complete push within {EXCHANGE_TIMEOUT:g}s")
    if isinstance(reply, Accepted):
        log.info("control: push from pid %d accepted; the steer now reaches it", peer_pid)
    else:
        log.warning("control: push from pid %d (uid %d) refused: %s", peer_pid, peer_uid,
                    reply.reason)
    with trio.move_on_after(EXCHANGE_TIMEOUT), contextlib.suppress(OSError):
        await conn.send(reply_line(reply))
    return reply


async def _exchange(
    conn: trio.socket.SocketType, gate: PushGate, peer_uid: int, received: list[int]
) -> Reply:
    if peer_uid != gate.run_uid:
        return Refused(
            f"peer uid {peer_uid} is not the run account's (uid {gate.run_uid}); only "
            "the resident pushes"
        )
    receiver = PushReceiver()
    try:
        while True:
            data, ancdata, flags, _ = await conn.recvmsg(
                MAX_LINE, socket.CMSG_SPACE(MAX_FDS_READ * 4), socket.MSG_CMSG_CLOEXEC
            )
            fds = _descriptors(ancdata)
            received.extend(fds)
            if flags & socket.MSG_CTRUNC:
                return Refused(f"more than {MAX_FDS_READ} descriptors pushed; exactly one is")
            if not data and not fds:
                receiver.receive_eof()
            for event in receiver.receive(data, fds):
                if isinstance(event, Pushed):
                    return _steer(event, gate)
    except PushProtocolError as exc:
        return Refused(exc.reason)
    except OSError as exc:
        return Refused(f"the control connection failed: {exc.strerror or exc}")


def _steer(pushed: Pushed, gate: PushGate) -> Reply:
    reason = judge_push(
        pushed.ports, probe_pushed(pushed.fd), unit_netns=gate.unit_netns,
        elected=gate.elected,
    )
    if reason is None and gate.assign is None:
        reason = "the steer is not attached; nothing can be steered"
    if reason is not None:
        return Refused(reason)
    assert gate.assign is not None
    try:
        gate.assign(pushed.fd)
    except (OSError, ValisError) as exc:
        return Refused(f"the steer could not take the socket: {exc}")
    return Accepted()


def _descriptors(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            items = array.array("i")
            items.frombytes(data[: len(data) - len(data) % items.itemsize])
            fds.extend(items)
    return fds


def _peer_credentials(conn: trio.socket.SocketType) -> tuple[int, int, int]:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return int(pid), int(uid), int(gid)

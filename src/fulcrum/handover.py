"""Asking a running fulcrum for a handover: its root-only request socket, both ends.

``systemctl reload fulcrum-valis`` runs ``fulcrum handover`` (the unit's
``ExecReload=``), which connects to ``/run/fulcrum/NAME.handover`` (an AF_UNIX stream
socket fulcrum makes at bring-up, root's, mode 0600, removed at teardown), sends one line
``HANDOVER`` and reads one reply line: ``DONE <what happened>`` or ``FAILED <why>``.
fulcrum checks the peer is root (``SO_PEERCRED``) before reading anything, serves one
request at a time (the next waits in the backlog) and carries it out with
``supervise.Residents.hand_over``. The client's exit status is 0 for ``DONE`` and 1
otherwise, so systemd reports a failed reload, and both ends log the reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from fulcrum.errors import LauncherError

log = logging.getLogger(__name__)

HANDOVER_DIR = "/run/fulcrum"
REQUEST = b"HANDOVER"
#: A request line, or a reply line, is at most this long.
MAX_LINE = 4096
#: How long a connected client gets to send its request.
REQUEST_TIMEOUT = 5.0
#: How long ``fulcrum handover`` waits for the reply by default (below the unit's
#: TimeoutStartSec=, which bounds ExecReload=).
REPLY_TIMEOUT = 115.0
_PEERCRED = struct.Struct("3i")


def handover_path(netns_name: str) -> str:
    return f"{HANDOVER_DIR}/{netns_name}.handover"


def open_handover_socket(path: str) -> socket.socket:
    """Root's listening request socket at ``path`` (a stale one replaced)."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if Path(path).is_socket():
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(4)
    except OSError:
        sock.close()
        raise
    return sock


def close_handover_socket(sock: socket.socket, path: str) -> None:
    sock.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


async def serve_handovers(sock: socket.socket, hand_over: Callable[[], Awaitable[str]]) -> None:
    """Take handover requests on ``sock`` until cancelled, one at a time."""
    listener = trio.socket.from_stdlib_socket(sock)
    while True:
        conn, _ = await listener.accept()
        with conn:
            reply = await _answer(conn, hand_over)
            with contextlib.suppress(OSError):
                await conn.send(reply.encode("utf-8", "replace")[: MAX_LINE - 1] + b"\n")


async def _answer(conn: trio.socket.SocketType, hand_over: Callable[[], Awaitable[str]]) -> str:
    pid, uid, _gid = _PEERCRED.unpack(
        conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    if uid != 0:
        log.warning("handover: request from pid %d (uid %d) refused: only root asks", pid, uid)
        return "FAILED only root may ask fulcrum for a handover"
    line = b""
    with trio.move_on_after(REQUEST_TIMEOUT):
        while b"\n" not in line and len(line) < MAX_LINE:
            chunk = await conn.recv(MAX_LINE)
            if not chunk:
                break
            line += chunk
    if line.split(b"\n", 1)[0].strip() != REQUEST:
        return f"FAILED not a handover request: {line[:64]!r}"
    log.info("handover: asked by pid %d", pid)
    try:
        done = await hand_over()
    except (LauncherError, OSError) as exc:
        log.error("handover failed: %s", exc)
        return f"FAILED {exc}"
    log.info("handover: %s", done)
    return f"DONE {done}"


def request_handover(path: str, timeout: float = REPLY_TIMEOUT) -> str:
    """Ask the fulcrum listening at ``path`` for a handover; what it did, or
    ``LauncherError`` saying why there was none."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise LauncherError(
                f"no fulcrum takes handovers at {path}: the unit is not running (start it), "
                "or its fulcrum predates handovers (restart the unit once)"
            ) from None
        try:
            sock.sendall(REQUEST + b"\n")
            reply = b""
            while b"\n" not in reply and len(reply) < MAX_LINE:
                chunk = sock.recv(MAX_LINE)
                if not chunk:
                    break
                reply += chunk
        except TimeoutError:
            raise LauncherError(f"fulcrum did not answer the handover within {timeout:g} s; "
                                "see its log (journalctl -u fulcrum-valis)") from None
    text = reply.decode("utf-8", "replace").split("\n", 1)[0]
    verdict, _, said = text.partition(" ")
    if verdict != "DONE":
        raise LauncherError(f"handover failed: {said or 'fulcrum closed the connection'}")
    return said

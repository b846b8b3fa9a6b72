"""fulcrum's own ``NOTIFY_SOCKET`` for its residents, relaying the serving one's to systemd.

fulcrum outlives its residents and may run two at once (a handover), so what systemd
hears must be chosen: each resident is given this relay's socket as ``NOTIFY_SOCKET``
(``/run/fulcrum/NAME.notify``, a datagram socket owned by the run account, 0600), and
every datagram is told apart by its sender's pid (``SO_PASSCRED``, checked by the
kernel):

- the **serving** resident's (the one fulcrum started alone, or the successor it handed
  over to) go to systemd as they are: its ``READY=1`` and ``STATUS=``, and its
  ``STOPPING=1`` when the unit stops;
- a **successor**'s, while it comes up beside the serving one, are kept for fulcrum
  (its ``READY=1`` is what the handover waits for; its last ``STATUS=`` says why it
  failed) and reach systemd only once it serves: then its last ``READY``/``STATUS``;
- anyone else's — above all the ``STOPPING=1`` of the resident handed over from, which
  would make systemd stop the unit — are dropped.

Without a ``NOTIFY_SOCKET`` of fulcrum's own (no systemd) the relay still runs: the
handover needs the successor's ``READY=1`` all the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from collections.abc import Mapping
from pathlib import Path

import attrs
import trio

from valis_core.apply.unit_control import parse_notify
from valis_core.sd_notify import Notifier

log = logging.getLogger(__name__)

#: Beside the control socket and the lock, root's directory.
RELAY_DIR = "/run/fulcrum"
_DATAGRAM = 4096
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def relay_path(netns_name: str) -> str:
    return f"{RELAY_DIR}/{netns_name}.notify"


@attrs.define
class Heard:
    """What one resident said over the relay so far (its latest value of each key)."""

    fields: dict[str, str] = attrs.Factory(dict)
    ready: trio.Event = attrs.Factory(trio.Event)

    def take(self, fields: Mapping[str, str]) -> None:
        self.fields.update(fields)
        if fields.get("READY") == "1":
            self.ready.set()


class NotifyRelay:
    """The relay's socket and its routing: ``serving`` goes upstream, a watched pid's
    datagrams are kept (``watch``), anything else is dropped."""

    def __init__(self, sock: socket.socket, path: str, upstream: Notifier) -> None:
        self._sock, self.path, self._upstream = sock, path, upstream
        self.serving: int | None = None
        self._watched: dict[int, Heard] = {}

    @classmethod
    def open(cls, path: str, *, uid: int, gid: int, environ: Mapping[str, str]) -> NotifyRelay:
        """Bind the relay at ``path`` for the run account ``uid:gid`` (a stale socket
        left by a killed run is replaced)."""
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if Path(path).is_socket():
                os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(path)
            os.chown(path, uid, gid)
            os.chmod(path, 0o600)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return cls(sock, path, Notifier.from_environ(environ))

    def tell(self, **fields: str) -> None:
        """fulcrum's own word to systemd (its ``STATUS=`` while no resident serves)."""
        self._upstream.notify(**fields)

    def watch(self, pid: int) -> Heard:
        """Keep what ``pid`` says from now on (a successor coming up)."""
        heard = self._watched[pid] = Heard()
        return heard

    def serve_from(self, pid: int) -> None:
        """``pid`` serves now: what it says goes to systemd, starting with what it said
        while it was watched (its ``READY=1`` and last ``STATUS=``)."""
        self.serving = pid
        heard = self._watched.pop(pid, None)
        if heard is not None and heard.fields:
            kept = {key: heard.fields[key] for key in ("READY", "STATUS") if key in heard.fields}
            if kept:
                self._upstream.notify(**kept)

    def forget(self, pid: int) -> None:
        self._watched.pop(pid, None)
        if self.serving == pid:
            self.serving = None

    async def run(self) -> None:
        """Relay datagrams until cancelled."""
        while True:
            await trio.lowlevel.wait_readable(self._sock)
            try:
                data, ancillary, _flags, _addr = self._sock.recvmsg(
                    _DATAGRAM, socket.CMSG_SPACE(_CREDENTIALS.size))
            except (BlockingIOError, InterruptedError):
                continue
            pid = _sender(ancillary)
            fields = parse_notify(data)
            if pid is not None and pid == self.serving:
                self._upstream.notify(**fields)
            elif pid is not None and pid in self._watched:
                self._watched[pid].take(fields)

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _sender(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS):
            pid, _uid, _gid = _CREDENTIALS.unpack(data[:_CREDENTIALS.size])
            return int(pid)
    return None

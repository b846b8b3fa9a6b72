"""The sd_notify datagram protocol, spoken directly (no libsystemd).

A service supervisor names a UNIX datagram socket in ``NOTIFY_SOCKET``: a filesystem
path, or an abstract socket written with a leading ``@``. Each notification is one
datagram of newline-separated ``KEY=value`` assignments (``READY=1``, ``STATUS=...``,
``STOPPING=1``). Without ``NOTIFY_SOCKET`` every call is a no-op, so the resident runs
the same under systemd, under a test harness and by hand.

A notification that cannot be delivered is logged once and never stops the node: the
supervisor's own start timeout is what acts on a missing ``READY=1``. The send never
blocks: a supervisor that stops reading (its socket's queue holds only a few datagrams,
``net.unix.max_dgram_qlen``) delays a notification by at most ``SEND_PATIENCE`` seconds,
then it is dropped.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping

from valis_core.clock import Clock, monotonic

log = logging.getLogger(__name__)

ENV_VAR = "NOTIFY_SOCKET"
SEND_PATIENCE = 1.0
"""Seconds a notification waits for room in a full supervisor queue before it is dropped."""
_RETRY = 0.01


def render_notification(fields: Mapping[str, str]) -> bytes:
    """One datagram for ``fields``; a value's line breaks become spaces (one line each)."""
    lines = []
    for key, value in fields.items():
        if not key or "=" in key or "\n" in key:
            raise ValueError(f"not a notification key: {key!r}")
        flat = " ".join(value.splitlines()) if value else ""
        lines.append(f"{key}={flat}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def socket_address(value: str) -> str | bytes:
    """The ``sendto`` address for a ``NOTIFY_SOCKET`` value; ``@name`` is abstract."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode("utf-8")
    return value


class Notifier:
    """Sends notifications to the supervisor named by ``NOTIFY_SOCKET``, if any."""

    def __init__(self, notify_socket: str | None, ticks: Clock = monotonic) -> None:
        self._address = socket_address(notify_socket) if notify_socket else None
        self._warned = False
        self._ticks = ticks

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Notifier:
        return cls(environ.get(ENV_VAR) or None)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, **fields: str) -> None:
        if self._address is None:
            return
        data = render_notification(fields)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                deadline = self._ticks() + SEND_PATIENCE
                while True:
                    try:
                        sock.sendto(data, socket.MSG_DONTWAIT, self._address)
                        return
                    except BlockingIOError:
                        if self._ticks() >= deadline:
                            raise
                        time.sleep(_RETRY)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("cannot notify the supervisor at %s: %s", self._address, exc)

    def status(self, text: str) -> None:
        self.notify(STATUS=text)

    def ready(self, text: str) -> None:
        self.notify(READY="1", STATUS=text)

    def stopping(self, text: str) -> None:
        self.notify(STOPPING="1", STATUS=text)

"""The push boot's wire protocol, both ends, as pure state machines (bytes in, events out).

The resident hands its listening socket to fulcrum over fulcrum's AF_UNIX control socket
in one exchange, under the sender-ordering contract: it **declares its port set**, then
**sends the descriptor** (SCM_RIGHTS) without waiting for a reply, then **reads one
bounded reply**. On the wire, every message is one ASCII line:

    resident -> fulcrum   PUSH/1 PORTS 443,8443\\n
    resident -> fulcrum   DESCRIPTOR\\n          (exactly one descriptor rides on its first byte)
    fulcrum  -> resident  ACCEPTED\\n  |  REFUSED <reason>\\n

``PushReceiver`` (fulcrum's end) and ``ReplyReader`` (the resident's end) hold no socket:
the shells feed them what ``recvmsg`` returned — the bytes, and the descriptors that
arrived with the first of them — and act on what they return. Every rule of the exchange
lives here: the order, the line bound, the one descriptor and where it rides. Anything
else (a message out of order, a line past ``MAX_LINE``, bytes that are not the protocol,
no descriptor or two, data after the descriptor) raises ``PushProtocolError`` with a
reason fulcrum sends back as its refusal; nothing else is ever raised. Descriptors are
plain numbers here: closing the ones that were not taken is the shell's job.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence

import attrs

from valis_core.errors import ValisError

#: The longest line either end accepts, newline included.
MAX_LINE = 256
#: The most ports one push may declare.
MAX_PORTS = 16
MAX_PORT = 65535
VERSION = "PUSH/1"
DESCRIPTOR_LINE = b"DESCRIPTOR\n"
ACCEPTED_LINE = b"ACCEPTED\n"
_REFUSED = "REFUSED"
_DECLARE = re.compile(rb"PUSH/1 PORTS ([0-9]{1,5}(?:,[0-9]{1,5})*)\n")
_PRINTABLE = re.compile(rb"[\x20-\x7e]*")


class PushProtocolError(ValisError):
    """The other end broke the push protocol; ``reason`` is what the refusal says."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@attrs.frozen
class Declared:
    """The resident declared the ports it wants steered to its socket."""

    ports: frozenset[int]


@attrs.frozen
class Pushed:
    """The descriptor arrived, in order, alone: the exchange is complete."""

    ports: frozenset[int]
    fd: int


@attrs.frozen
class Accepted:
    """fulcrum steers the declared ports to the pushed socket."""


@attrs.frozen
class Refused:
    """fulcrum refused the push, and said why."""

    reason: str


Reply = Accepted | Refused
ReceiverEvent = Declared | Pushed


def _format_ports(ports: Iterable[int]) -> str:
    return ",".join(str(port) for port in sorted(ports))


def declare_line(ports: frozenset[int]) -> bytes:
    """The resident's first line; refuses a port set the receiver would refuse."""
    _check_ports(ports)
    return f"{VERSION} PORTS {_format_ports(ports)}\n".encode("ascii")


def reply_line(reply: Reply) -> bytes:
    """fulcrum's one reply line; a refusal's reason is made printable and cut to fit."""
    if isinstance(reply, Accepted):
        return ACCEPTED_LINE
    text = "".join(ch if " " <= ch <= "~" else "?" for ch in reply.reason) or "refused"
    room = MAX_LINE - len(_REFUSED) - 2
    return f"{_REFUSED} {text[:room]}\n".encode("ascii")


def _check_ports(ports: Iterable[int]) -> frozenset[int]:
    found = frozenset(ports)
    if not found:
        raise PushProtocolError("the declared port set is empty")
    if len(found) > MAX_PORTS:
        raise PushProtocolError(f"{len(found)} ports declared; at most {MAX_PORTS}")
    for port in found:
        if not 1 <= port <= MAX_PORT:
            raise PushProtocolError(f"declared port {port} is not a port 1..{MAX_PORT}")
    return found


def _parse_declare(line: bytes) -> frozenset[int]:
    match = _DECLARE.fullmatch(line)
    if match is None:
        shown = line[:40].decode("ascii", "replace").rstrip("\n")
        raise PushProtocolError(
            f"expected '{VERSION} PORTS <port>,...' first, got {shown!r}; the resident "
            "and fulcrum versions do not speak the same push protocol"
        )
    items = match.group(1).split(b",")
    ports = [int(item) for item in items]
    if len(set(ports)) != len(ports):
        raise PushProtocolError("a port is declared twice")
    return _check_ports(ports)


class _Stage(enum.Enum):
    DECLARE = "awaiting the port declaration"
    DESCRIPTOR = "awaiting the descriptor"
    DONE = "complete"
    BROKEN = "broken"


class PushReceiver:
    """fulcrum's end of one push: feed it what ``recvmsg`` returned, get events.

    ``receive(data, fds)``: ``fds`` are the descriptors that arrived with ``data``. The
    kernel attaches them to the first byte sent with them and ends the read there, but
    may glue earlier bytes in front; so the rule is that the DESCRIPTOR line must begin
    inside the chunk the descriptor arrived with. After ``Pushed`` the exchange is over
    and anything more is an error. Once an error was raised, every later call raises it
    again.
    """

    def __init__(self) -> None:
        self._stage = _Stage.DECLARE
        self._buffer = b""
        #: the stream offset of the buffer's first byte
        self._offset = 0
        self._ports: frozenset[int] = frozenset()
        self._fd: int | None = None
        #: the stream offsets [start, end) of the chunk the descriptor arrived with
        self._arrival = (0, 0)
        self._error: PushProtocolError | None = None

    @property
    def complete(self) -> bool:
        return self._stage is _Stage.DONE

    def receive(self, data: bytes, fds: Sequence[int] = ()) -> list[ReceiverEvent]:
        """The events ``data`` (and the descriptors that arrived with it) complete."""
        self._check_open()
        try:
            return self._receive(data, fds)
        except PushProtocolError as exc:
            self._stage, self._error = _Stage.BROKEN, exc
            raise

    def receive_eof(self) -> None:
        """The resident closed its end; an error unless the exchange was complete."""
        self._check_open()
        if self._stage is not _Stage.DONE:
            waiting = (
                "declaring its ports" if self._stage is _Stage.DECLARE
                else "sending its descriptor"
            )
            self._stage = _Stage.BROKEN
            self._error = PushProtocolError(
                f"the resident closed the connection before {waiting}"
            )
            raise self._error

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error

    def _receive(self, data: bytes, fds: Sequence[int]) -> list[ReceiverEvent]:
        if fds:
            self._take_fds(fds, data)
        events: list[ReceiverEvent] = []
        self._buffer += data
        while True:
            if self._stage is _Stage.DONE:
                if self._buffer:
                    raise PushProtocolError(
                        "the resident sent more after its descriptor; it must wait for "
                        "the reply"
                    )
                return events
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) >= MAX_LINE:
                    raise PushProtocolError(f"a line longer than {MAX_LINE} bytes")
                return events
            if end + 1 > MAX_LINE:
                raise PushProtocolError(f"a line longer than {MAX_LINE} bytes")
            line, self._buffer = self._buffer[: end + 1], self._buffer[end + 1 :]
            events.append(self._line(line, self._offset))
            self._offset += len(line)

    def _take_fds(self, fds: Sequence[int], data: bytes) -> None:
        if self._fd is not None or len(fds) != 1:
            count = len(fds) + (self._fd is not None)
            raise PushProtocolError(
                f"{count} descriptors pushed; exactly one listening socket is pushed"
            )
        if self._stage is _Stage.DONE or not data:
            raise PushProtocolError(
                "a descriptor arrived outside the DESCRIPTOR line; it rides on that "
                "line's first byte"
            )
        if self._stage is _Stage.DESCRIPTOR and self._buffer:
            raise PushProtocolError(
                "a descriptor arrived in the middle of a line; it rides on the first "
                "byte of the DESCRIPTOR line"
            )
        start = self._offset + len(self._buffer)
        self._fd, self._arrival = fds[0], (start, start + len(data))

    def _line(self, line: bytes, at: int) -> ReceiverEvent:
        if self._stage is _Stage.DECLARE:
            self._ports = _parse_declare(line)
            if self._fd is not None and self._arrival[1] <= at + len(line):
                raise PushProtocolError(
                    "a descriptor arrived with the port declaration; it rides on the "
                    "first byte of the DESCRIPTOR line, sent after the declaration"
                )
            self._stage = _Stage.DESCRIPTOR
            return Declared(self._ports)
        if line != DESCRIPTOR_LINE:
            shown = line[:40].decode("ascii", "replace").rstrip("\n")
            raise PushProtocolError(
                f"expected 'DESCRIPTOR' after the declaration, got {shown!r}"
            )
        if self._fd is None:
            raise PushProtocolError(
                "the DESCRIPTOR line arrived without a descriptor (SCM_RIGHTS); nothing "
                "to steer to"
            )
        if not self._arrival[0] <= at < self._arrival[1]:
            raise PushProtocolError(
                "the descriptor did not arrive with the DESCRIPTOR line's first byte"
            )
        self._stage = _Stage.DONE
        return Pushed(self._ports, self._fd)


class ReplyReader:
    """The resident's end: reads fulcrum's one reply line, bounded by ``MAX_LINE``."""

    def __init__(self) -> None:
        self._buffer = b""
        self._reply: Reply | None = None

    def receive(self, data: bytes) -> Reply | None:
        """The reply, once ``data`` completes its line; ``None`` until then."""
        if self._reply is not None:
            if data:
                raise PushProtocolError("fulcrum sent more after its reply")
            return self._reply
        self._buffer += data
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) >= MAX_LINE:
                raise PushProtocolError(f"fulcrum's reply is longer than {MAX_LINE} bytes")
            return None
        if end + 1 > MAX_LINE or end + 1 != len(self._buffer):
            raise PushProtocolError(
                "fulcrum's reply is longer than one line" if end + 1 <= MAX_LINE
                else f"fulcrum's reply is longer than {MAX_LINE} bytes"
            )
        self._reply = _parse_reply(self._buffer)
        return self._reply

    def receive_eof(self) -> Reply:
        """fulcrum closed: the reply it sent, or an error when it sent none."""
        if self._reply is None:
            raise PushProtocolError("fulcrum closed the control connection without a reply")
        return self._reply


def _parse_reply(line: bytes) -> Reply:
    if line == ACCEPTED_LINE:
        return Accepted()
    head = _REFUSED.encode("ascii") + b" "
    body = line[len(head) : -1]
    if line.startswith(head) and _PRINTABLE.fullmatch(body) is not None and body:
        return Refused(body.decode("ascii"))
    shown = line[:40].decode("ascii", "replace").rstrip("\n")
    raise PushProtocolError(f"fulcrum's reply {shown!r} is neither ACCEPTED nor REFUSED")

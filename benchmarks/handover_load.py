"""The handover benchmark's load: UDP and TCP queries at fixed rates to one server, every
query timestamped, written as a trace ``handover_report`` reads.

Run inside the client network namespace by ``handover.py`` (``ip netns exec``), one run
per event; standard library only (it could run under any python3). One thread, one
epoll: ``--udp-rate`` queries a second over ``UDP_SOCKETS`` connected UDP sockets (each
its own 16-bit ID space, so an ID comes round again only after 65 536 / (rate /
sockets) seconds, far beyond any timeout) and ``--tcp-rate`` a second over TCP, a new
connection per query (so a refused or reset connection is seen as such). Sending follows
the schedule: query n is due at n / rate; when the loop falls behind, up to ``BURST``
late queries go at once and how far it fell behind is reported (the generator's own
ceiling: ``--udp-rate`` far above what it can send shows it).

It sends until ``--duration`` seconds have passed or a line ``stop`` (or end of file)
arrives on standard input, then waits ``--timeout`` seconds for the last answers and
writes the trace to ``--out``: a JSON header line (counts, the schedule's lag, ICMP
errors seen), then the arrays ``sent`` and ``answered`` (doubles, CLOCK_MONOTONIC, the
same clock the orchestrator's ``time.monotonic()`` reads in any network namespace;
``answered`` is NaN for no answer), ``kind`` (0 UDP, 1 TCP) and ``outcome`` (see
``OUTCOMES``) and ``rcode`` (signed bytes, -1 for none).

Bounded: at most ``--duration`` (capped at ``MAX_DURATION``) plus the timeout, at most
rate x duration queries of each kind, at most ``MAX_TCP_OPEN`` connections open.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import select
import socket
import struct
import sys
import time
from array import array
from collections import deque

UDP_SOCKETS = 16
BURST = 200
"""Late queries of one kind sent in one turn of the loop at most."""
MAX_DURATION = 600.0
MAX_TCP_OPEN = 2_000
TICK = 0.0005
"""Seconds the loop waits for events at most between two turns."""
OUTCOMES = ("answered", "timeout", "refused", "reset", "send-error")
"""What became of a query (its index in the trace's ``outcome``): an answer (of any
RCODE; the report decides if it was in time), none (UDP: no answer; TCP: no connection
or no answer before the timeout), the connection refused (TCP RST to the SYN), the
connection reset or closed before a whole answer, or the send itself failing."""
ANSWERED, TIMEOUT, REFUSED, RESET, SEND_ERROR = range(len(OUTCOMES))
QUESTIONS = (("www", 1), ("", 6), ("", 2), ("nothing-here", 1))
"""Asked in turn, under the zone: an address, the SOA, the NS set and a name that does
not exist (NXDOMAIN)."""


def wire_question(zone: str, label: str, rdtype: int) -> bytes:
    """A query without its ID: flags 0 (no RD), one question ``label.zone`` ``rdtype`` IN."""
    name = f"{label}.{zone}" if label else zone
    encoded = b"".join(bytes([len(part)]) + part.encode()
                       for part in name.rstrip(".").split(".") if part) + b"\0"
    return struct.pack("!HHHHHH", 0, 0, 1, 0, 0, 0) + encoded + struct.pack("!HH", rdtype, 1)


class Load:
    """One run's sockets, schedule and trace."""

    def __init__(self, server: str, port: int, zone: str, timeout: float) -> None:
        self.server, self.port, self.timeout = server, port, timeout
        self.templates = [wire_question(zone, label, rdtype) for label, rdtype in QUESTIONS]
        self.sent = array("d")
        self.answered = array("d")
        self.kind = array("b")
        self.outcome = array("b")
        self.rcode = array("b")
        self.poll = select.epoll()
        self.udp: list[socket.socket] = []
        self.udp_fds: dict[int, int] = {}
        self.slots = [array("i", [-1]) * 65536 for _ in range(UDP_SOCKETS)]
        self.next_id = [int.from_bytes(os.urandom(2), "big") for _ in range(UDP_SOCKETS)]
        for number in range(UDP_SOCKETS):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE (root)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.connect((server, port))
            sock.setblocking(False)
            self.udp.append(sock)
            self.udp_fds[sock.fileno()] = number
            self.poll.register(sock.fileno(), select.EPOLLIN)
        self.tcp: dict[int, tuple[socket.socket, int, bytearray]] = {}
        self.tcp_deadlines: deque[tuple[float, int, int]] = deque()
        self.icmp_errors = 0
        self.late_answers = 0
        self.behind_max = 0.0

    def _record(self, kind: int) -> int:
        index = len(self.sent)
        self.sent.append(time.monotonic())
        self.answered.append(math.nan)
        self.kind.append(kind)
        self.outcome.append(TIMEOUT)
        self.rcode.append(-1)
        return index

    def send_udp(self, n: int) -> None:
        number = n % UDP_SOCKETS
        ident = self.next_id[number] = (self.next_id[number] + 1) & 0xFFFF
        template = self.templates[n % len(self.templates)]
        index = self._record(0)
        self.slots[number][ident] = index
        try:
            self.udp[number].send(struct.pack("!H", ident) + template[2:])
        except OSError as error:
            if error.errno != errno.ECONNREFUSED:
                self.outcome[index] = SEND_ERROR
                return
            # An ICMP error from an earlier datagram surfaced here: this one went.
            self.icmp_errors += 1
            try:
                self.udp[number].send(struct.pack("!H", ident) + template[2:])
            except OSError:
                self.outcome[index] = SEND_ERROR

    def send_tcp(self, n: int) -> None:
        index = self._record(1)
        if len(self.tcp) >= MAX_TCP_OPEN:
            self.outcome[index] = SEND_ERROR
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((self.server, self.port))
        if code not in (0, errno.EINPROGRESS):
            self.outcome[index] = REFUSED if code == errno.ECONNREFUSED else SEND_ERROR
            sock.close()
            return
        template = self.templates[n % len(self.templates)]
        query = struct.pack("!H", index & 0xFFFF) + template[2:]
        fd = sock.fileno()
        self.tcp[fd] = (sock, index, bytearray(struct.pack("!H", len(query)) + query))
        self.tcp_deadlines.append((self.sent[index] + self.timeout, fd, index))
        self.poll.register(fd, select.EPOLLOUT)

    def _close_tcp(self, fd: int, outcome: int) -> None:
        sock, index, _ = self.tcp.pop(fd)
        self.outcome[index] = outcome
        if outcome == ANSWERED:
            self.answered[index] = time.monotonic()
        self.poll.unregister(fd)
        sock.close()

    def _tcp_event(self, fd: int, mask: int) -> None:
        sock, index, buffer = self.tcp[fd]
        if mask & select.EPOLLOUT:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                refused = code == errno.ECONNREFUSED
                self._close_tcp(fd, REFUSED if refused else RESET)
                return
            try:
                sock.send(bytes(buffer))
            except OSError:
                self._close_tcp(fd, RESET)
                return
            self.tcp[fd] = (sock, index, bytearray())
            self.poll.modify(fd, select.EPOLLIN)
            return
        try:
            chunk = sock.recv(65535)
        except BlockingIOError:
            return
        except OSError:
            self._close_tcp(fd, RESET)
            return
        if not chunk:
            self._close_tcp(fd, RESET)
            return
        buffer += chunk
        if len(buffer) >= 4 and len(buffer) >= 2 + struct.unpack("!H", buffer[:2])[0]:
            self.rcode[index] = buffer[5] & 0x0F
            self._close_tcp(fd, ANSWERED)

    def _udp_event(self, number: int) -> None:
        sock = self.udp[number]
        slots = self.slots[number]
        for _ in range(4096):
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                return
            except ConnectionRefusedError:
                self.icmp_errors += 1
                continue
            except OSError:
                return
            if len(data) < 12:
                continue
            index = slots[struct.unpack("!H", data[:2])[0]]
            if index < 0 or not math.isnan(self.answered[index]):
                continue
            now = time.monotonic()
            if now - self.sent[index] > self.timeout:
                self.late_answers += 1
            self.answered[index] = now
            self.outcome[index] = ANSWERED
            self.rcode[index] = data[3] & 0x0F

    def events(self, wait: float, stop_fd: int | None) -> bool:
        """Handle what is ready (waiting at most ``wait``); False once told to stop."""
        go_on = True
        for fd, mask in self.poll.poll(wait):
            if fd == stop_fd:
                line = os.read(fd, 4096)
                if not line or b"stop" in line:
                    go_on = False
                    self.poll.unregister(fd)
            elif fd in self.udp_fds:
                self._udp_event(self.udp_fds[fd])
            elif fd in self.tcp:
                self._tcp_event(fd, mask)
        now = time.monotonic()
        while self.tcp_deadlines and self.tcp_deadlines[0][0] <= now:
            _, fd, index = self.tcp_deadlines.popleft()
            if fd in self.tcp and self.tcp[fd][1] == index:
                self._close_tcp(fd, TIMEOUT)
        return go_on

    def run(self, udp_rate: float, tcp_rate: float, duration: float,
            stop_fd: int | None) -> float:
        """Send on schedule until ``duration`` or a stop, then drain; the seconds sent."""
        if stop_fd is not None:
            self.poll.register(stop_fd, select.EPOLLIN)
        began = time.monotonic()
        limit_udp, limit_tcp = int(udp_rate * duration), int(tcp_rate * duration)
        n_udp = n_tcp = 0
        going = True
        while going:
            elapsed = time.monotonic() - began
            if elapsed >= duration:
                break
            due_udp = min(limit_udp, int(elapsed * udp_rate))
            due_tcp = min(limit_tcp, int(elapsed * tcp_rate))
            if udp_rate and due_udp - n_udp > 1:
                self.behind_max = max(self.behind_max, (due_udp - n_udp) / udp_rate)
            for _ in range(min(BURST, due_udp - n_udp)):
                self.send_udp(n_udp)
                n_udp += 1
            for _ in range(min(BURST, due_tcp - n_tcp)):
                self.send_tcp(n_tcp)
                n_tcp += 1
            going = self.events(TICK, stop_fd)
        sending = time.monotonic() - began
        drain_until = time.monotonic() + self.timeout + 0.05
        while (left := drain_until - time.monotonic()) > 0:
            self.events(min(left, 0.01), None)
        for fd in list(self.tcp):
            self._close_tcp(fd, TIMEOUT)
        return sending

    def write(self, out: str, header: dict[str, object]) -> None:
        temporary = f"{out}.partial"
        with open(temporary, "wb") as file:
            file.write(json.dumps({**header, "count": len(self.sent)}).encode() + b"\n")
            for values in (self.sent, self.answered, self.kind, self.outcome, self.rcode):
                values.tofile(file)
        os.replace(temporary, out)


def read_trace(path: str) -> tuple[dict[str, object], dict[str, array[float] | array[int]]]:
    """A trace written by ``Load.write``: its header and its arrays by name."""
    with open(path, "rb") as file:
        header = json.loads(file.readline())
        count = int(header["count"])
        arrays: dict[str, array[float] | array[int]] = {}
        for name, code in (("sent", "d"), ("answered", "d"), ("kind", "b"),
                           ("outcome", "b"), ("rcode", "b")):
            values = array(code)
            values.fromfile(file, count)
            arrays[name] = values
    return header, arrays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--zone", required=True)
    parser.add_argument("--udp-rate", type=float, default=10_000)
    parser.add_argument("--tcp-rate", type=float, default=200)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--stdin-stop", action="store_true",
                        help="stop early on a line 'stop' or end of file on stdin")
    args = parser.parse_args()
    load = Load(args.server, args.port, args.zone, args.timeout)
    print("sending", flush=True)
    cpu_before = time.process_time()
    sending = load.run(args.udp_rate, args.tcp_rate, min(args.duration, MAX_DURATION),
                       sys.stdin.fileno() if args.stdin_stop else None)
    load.write(args.out, {
        "udp_rate": args.udp_rate, "tcp_rate": args.tcp_rate, "timeout": args.timeout,
        "sending_s": sending, "behind_max_s": load.behind_max,
        "icmp_errors": load.icmp_errors, "late_answers": load.late_answers,
        "cpu_s": time.process_time() - cpu_before,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

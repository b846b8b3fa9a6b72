"""The client side of ``reload_latency.py``, in a process of its own: it commits each
change and then asks the server for the changed name again and again until the new
address comes back, and says when both happened.

Run by ``reload_latency.py`` (``--probe process``, the default), never by hand:

    reload_latency_probe.py HOST PORT INTERVAL DSN

It writes ``ready`` once it can ask. Each line on stdin is then ``ADDRESS ZONE OWNER...``:
it sets the A records of the owners of ZONE to ``ADDRESS`` in one UPDATE (``commit_change``), then
asks ``OWNER A`` (the first) over UDP every ``INTERVAL`` seconds (each ask waits at most
``ASK_TIMEOUT`` for its answer) until an answer holds ``ADDRESS``, and writes one line:
when the UPDATE was sent, when the commit returned (read at real-time priority:
``commit_change``) and when that
answer's datagram was received (read at ordinary priority: late rather than early), in
``CLOCK_MONOTONIC`` nanoseconds, or ``timeout`` after ``CHANGE_TIMEOUT`` seconds.

Why a process of its own: a writer and a client in the measured process take turns
with the server and the zone source for the interpreter (a worker thread finishing the
commit holds it while the source wants it), and a trio sleep of a millisecond between
two asks lasts a millisecond or more (epoll's timeout is whole milliseconds), so the
answer was seen up to about 1.3 ms after it was there. Here an ask every 0.2 ms (the
default) costs the server a few thousand cached answers a second.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import dns.exception
import dns.message
import dns.rrset
import psycopg

ASK_TIMEOUT = 0.05
CHANGE_TIMEOUT = 30.0


def commit_change(
    conn: psycopg.Connection[Any], zone: str, owners: list[str], address: str, *,
    prompt: bool = False,
) -> float:
    """Set the A records of ``owners`` of ``zone`` to ``address`` in one statement (found
    by the records' (zone, owner) index, as an operator's change is) and commit (``conn``
    not in autocommit); when the commit returned (``time.monotonic``). With ``prompt``
    the commit is awaited at real-time priority (``SCHED_FIFO``, root only; otherwise as
    it is), so that the clock is read as soon as the commit returns: on two busy cores a
    writer of ordinary priority may run again well after the server committed and
    notified, and a late clock read would hide part of the latency."""
    conn.execute(
        "UPDATE records SET rdata = %s WHERE zone = %s AND owner = ANY(%s) AND rtype = 'A'",
        (address, zone, owners),
    )
    with at_real_time() if prompt else contextlib.nullcontext():
        conn.commit()
        return time.monotonic()


@contextlib.contextmanager
def at_real_time() -> Iterator[None]:
    """Run the body at real-time priority when allowed (root), then as before."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def seen_at(sock: socket.socket, name: str, address: str, interval: float) -> int | None:
    """When an answer for ``name`` first held ``address`` (``_now_ns``), or None after
    ``CHANGE_TIMEOUT``."""
    deadline = time.monotonic() + CHANGE_TIMEOUT
    while time.monotonic() < deadline:
        found = _ask(sock, name)
        if found is not None and address in found[1]:
            return found[0]
        time.sleep(interval)
    return None


def _ask(sock: socket.socket, name: str) -> tuple[int, set[str]] | None:
    """One ask: when its answer was received and the addresses it holds (None: no answer
    within ``ASK_TIMEOUT``)."""
    query = dns.message.make_query(name, "A")
    sock.send(query.to_wire())
    try:
        while True:
            data = sock.recv(65535)
            received = _now_ns()
            response = dns.message.from_wire(data)
            if response.id == query.id:
                break
    except (TimeoutError, dns.exception.DNSException):
        return None
    return received, {
        rdata.to_text()
        for rrset in response.answer
        if isinstance(rrset, dns.rrset.RRset)
        for rdata in rrset
    }


def main(argv: list[str]) -> int:
    host, port, interval, dsn = argv[0], int(argv[1]), float(argv[2]), argv[3]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(ASK_TIMEOUT)
    sock.connect((host, port))
    with psycopg.connect(dsn) as writer:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        for line in sys.stdin:
            address, zone, *owners = line.split()
            began = time.monotonic()
            committed = commit_change(writer, zone, owners, address, prompt=True)
            found = seen_at(sock, owners[0], address, interval)
            sys.stdout.write(
                "timeout\n" if found is None
                else f"{round(began * 1e9)} {round(committed * 1e9)} {found}\n"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

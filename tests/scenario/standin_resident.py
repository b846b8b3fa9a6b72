"""A stand-in for ``valis --resident`` that reports what the launcher handed it.

Run by a stock ``python3 -I`` as the run account at the end of fulcrum's exec chain. It
writes one JSON report (to ``$VALIS_STANDIN_REPORT``, atomically) describing its
credentials and capability sets from ``/proc/self/status``, its argv and environment,
every descriptor it holds (sockets identified by ``getsockname``/``SO_TYPE``/
``SO_ACCEPTCONN``) and what happened when it tried to bind the DNS port itself. Then it
echoes on the descriptors it was handed (UDP datagrams back to their sender; a TCP
connection's bytes back on it, prefixed ``echo:``) until SIGTERM, when it records the
signal next to the report and exits 0.

Behaviour knobs, all ``VALIS_*`` so they cross the exec chain:
``VALIS_STANDIN_EXIT=N`` exits with N right after the report (a crash);
``VALIS_STANDIN_IGNORE_TERM=1`` ignores SIGTERM; ``VALIS_STANDIN_LIFETIME`` bounds the
run in seconds (default 120).

Standard library only: it runs without the project's environment.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import socket
import sys
import time

STATUS_KEYS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
               "NoNewPrivs", "Seccomp")
FD_FLAGS = ("--dns-udp-fd", "--dns-tcp-fd", "--owner-fd", "--edge-tcp-fd")


def flag_values(argv: list[str]) -> dict[str, str]:
    values = {}
    for i, token in enumerate(argv):
        if token.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values[token] = argv[i + 1]
    return values


def proc_status() -> dict[str, str]:
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in STATUS_KEYS:
                out[key] = value.strip()
    return out


def describe_fds() -> dict[str, object]:
    listed = os.listdir("/proc/self/fd")  # the listing's own descriptor is closed again
    fds: dict[str, object] = {}
    for name in listed:
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        entry: dict[str, object] = {"target": target}
        if target.startswith("socket:"):
            sock = socket.socket(fileno=os.dup(fd))
            try:
                entry["type"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
                entry["family"] = int(sock.family)
                entry["sockname"] = list(sock.getsockname())
                entry["listening"] = bool(
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                )
            finally:
                sock.close()
        fds[name] = entry
    return fds


def try_bind(host: str, port: int, kind: int) -> str:
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.bind((host, port))
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    finally:
        sock.close()
    return "bound"


def write_json(path: str, value: object) -> None:
    temp = f"{path}.tmp"
    with open(temp, "w") as out:
        json.dump(value, out)
    os.replace(temp, path)


def main() -> int:
    argv = sys.argv[1:]
    flags = flag_values(argv)
    report_path = os.environ["VALIS_STANDIN_REPORT"]
    handed = {flag: int(flags[flag]) for flag in FD_FLAGS if flag in flags}
    if "--dns-udp-fds" in flags:  # the DNS workers' sockets: the first, then the others
        first, *others = (int(fd) for fd in flags["--dns-udp-fds"].split(","))
        handed["--dns-udp-fd"] = first
        handed.update({f"--dns-udp-fds#{n}": fd for n, fd in enumerate(others, 1)})
    unit_ip = "0.0.0.0"
    if "--dns-udp-fd" in handed:
        probe = socket.socket(fileno=os.dup(handed["--dns-udp-fd"]))
        unit_ip = probe.getsockname()[0]
        probe.close()
    report = {
        "pid": os.getpid(),
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "status": proc_status(),
        "argv": argv,
        "env": dict(os.environ),
        "fds": describe_fds(),
        "netns": os.readlink("/proc/self/ns/net"),
        "bind_dns_udp": try_bind(unit_ip, 53, socket.SOCK_DGRAM),
        "bind_dns_tcp": try_bind(unit_ip, 53, socket.SOCK_STREAM),
        "bind_any_low_port": try_bind("0.0.0.0", 853, socket.SOCK_STREAM),
    }
    write_json(report_path, report)
    if "VALIS_STANDIN_EXIT" in os.environ:
        return int(os.environ["VALIS_STANDIN_EXIT"])
    return serve(handed, report_path)


def serve(handed: dict[str, int], report_path: str) -> int:
    stopped: list[int] = []
    if os.environ.get("VALIS_STANDIN_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda signum, _frame: stopped.append(signum))
    selector = selectors.DefaultSelector()
    for flag, fd in handed.items():
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, flag)
    deadline = time.monotonic() + float(os.environ.get("VALIS_STANDIN_LIFETIME", "120"))
    while not stopped and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            ready = key.fileobj
            assert isinstance(ready, socket.socket)
            sock = ready
            try:
                if sock.type == socket.SOCK_DGRAM:
                    data, peer = sock.recvfrom(65535)
                    sock.sendto(b"echo:" + data, peer)
                else:
                    echo_one(sock)
            except OSError:
                continue
    if stopped:
        write_json(report_path + ".stopped", {"signal": stopped[0]})
    return 0


def echo_one(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(2.0)
        chunks = []
        while True:
            chunk = conn.recv(65535)
            if not chunk:
                break
            chunks.append(chunk)
        conn.sendall(b"echo:" + b"".join(chunks))


if __name__ == "__main__":
    sys.exit(main())

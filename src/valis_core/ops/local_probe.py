"""The probe of the machine this process runs on: the one place assessment touches a host.

Only the CLI binds ``LocalHostProbe``, and only because the CLI runs on the node; the
library's verbs take a probe as a parameter and have no default. Every method reads and
nothing writes. The serving self-test runs the binary with a scrubbed environment and a
time bound; the PostgreSQL check connects at the socket level and sends nothing, so it
never authenticates as anyone.
"""

from __future__ import annotations

import datetime
import errno
import glob
import grp
import ipaddress
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import Iterable
from typing import Any

from pyroute2 import IPRoute

from valis_core import libbpf
from valis_core.clock import utc_now
from valis_core.ops.host_probe import (
    Account,
    BpfOutcome,
    PathStat,
    SelfTestOutcome,
    path_kind,
)
from valis_core.ops.public_network import (
    DefaultRoute,
    InterfaceAddress,
    IPAddress,
    Neighbour,
    NeighbourState,
)

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SELF_TEST_TIMEOUT = 60.0
SOCKET_TIMEOUT = 2.0
_READ_LIMIT = 1 << 20
_SHEBANG_LIMIT = 256  # the kernel reads no more of a #! line than this
_OUTPUT_LIMIT = 4096
_MAIN_TABLE = 254
_SCOPE_GLOBAL = 0
_NUD_STATES: tuple[tuple[int, NeighbourState], ...] = (
    (0x01, "incomplete"),
    (0x02, "reachable"),
    (0x04, "stale"),
    (0x08, "delay"),
    (0x10, "probe"),
    (0x20, "failed"),
    (0x40, "noarp"),
    (0x80, "permanent"),
)

UNIT_FILE_GLOBS: tuple[str, ...] = tuple(
    f"{root}/{pattern}"
    for root in ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system",
                 "/lib/systemd/system")
    for pattern in ("valis*.service", "fulcrum*.service", "valis*.service.d/*.conf",
                    "fulcrum*.service.d/*.conf")
)


def node_environment_files(site_facts: Iterable[str]) -> tuple[str, ...]:
    """The files whose settings reach the node here: the given site-facts files and every
    valis or fulcrum unit file and drop-in installed on this machine."""
    found = [path for pattern in UNIT_FILE_GLOBS for path in sorted(glob.glob(pattern))]
    return tuple(dict.fromkeys([*site_facts, *found]))


def _bpf_refusal(exc: libbpf.BpfError) -> BpfOutcome:
    """A libbpf failure: "cannot tell" when only privilege was missing, else a no."""
    return BpfOutcome(None if exc.errno == errno.EPERM else False, str(exc))


class LocalHostProbe:
    """``HostProbe`` and ``NetworkProbe`` answered by this machine."""

    # -- HostProbe ------------------------------------------------------------------

    def network_namespaces_supported(self) -> bool:
        return os.path.exists("/proc/self/ns/net")

    def sk_lookup_supported(self) -> BpfOutcome:
        try:
            supported = libbpf.sk_lookup_supported()
        except libbpf.BpfError as exc:
            return _bpf_refusal(exc)
        if not supported and os.geteuid() != 0:
            # libbpf's probe reports a refused load as "unsupported", whatever refused it.
            return BpfOutcome(None, "not root, and the kernel refuses BPF to other accounts")
        if not supported:
            return BpfOutcome(False, "libbpf's probe: the kernel refuses the program type")
        return BpfOutcome(True, "libbpf's probe loaded one")

    def bpf_object_loads(self, path: str) -> BpfOutcome:
        try:
            handle = libbpf.open_object(path)
        except libbpf.BpfError as exc:
            return BpfOutcome(False, str(exc))
        try:
            libbpf.load_object(handle, path)
        except libbpf.BpfError as exc:
            return _bpf_refusal(exc)
        finally:
            libbpf.close_object(handle)
        return BpfOutcome(True, f"{path} loaded")

    def find_program(self, name: str) -> str | None:
        return shutil.which(name, path=SYSTEM_PATH)

    def account(self, name: str) -> Account | None:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return None
        groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
        return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, groups | {entry.pw_gid})

    def group_id(self, name: str) -> int | None:
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None

    def stat(self, path: str) -> PathStat | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            return None
        return PathStat(path_kind(st.st_mode), st.st_uid, st.st_gid, st.st_mode & 0o7777)

    def resolve(self, path: str) -> str:
        return os.path.realpath(path)

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read(_READ_LIMIT)
        except OSError:
            return None
        return data.decode("utf-8", errors="replace")

    def interpreter(self, path: str) -> str | None:
        try:
            with open(path, "rb") as handle:
                head = handle.read(_SHEBANG_LIMIT)
        except OSError:
            return None
        if not head.startswith(b"#!"):
            return None
        words = head[2:].split(b"\n", 1)[0].split()
        return words[0].decode("utf-8", errors="replace") if words else None

    def self_test(self, command: tuple[str, ...]) -> SelfTestOutcome:
        try:
            done = subprocess.run(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
                timeout=SELF_TEST_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return SelfTestOutcome(None, f"did not finish within {SELF_TEST_TIMEOUT:g}s")
        except OSError as exc:
            return SelfTestOutcome(None, exc.strerror or str(exc))
        output = done.stdout[-_OUTPUT_LIMIT:].decode("utf-8", errors="replace")
        return SelfTestOutcome(done.returncode, output)

    def unix_socket_accepts(self, path: str) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(SOCKET_TIMEOUT)
            try:
                sock.connect(path)
            except OSError:
                return False
        return True

    def tcp_accepts(self, host: str, port: int) -> bool:
        try:
            with socket.create_connection((host, port), timeout=SOCKET_TIMEOUT):
                return True
        except OSError:
            return False

    def now(self) -> datetime.datetime:
        return utc_now()

    # -- NetworkProbe ----------------------------------------------------------------

    def interface_exists(self, iface: str) -> bool:
        with IPRoute() as ipr:
            return bool(ipr.link_lookup(ifname=iface))

    def interface_addresses(self, iface: str) -> tuple[InterfaceAddress, ...]:
        with IPRoute() as ipr:
            indices = ipr.link_lookup(ifname=iface)
            if not indices:
                return ()
            found = []
            for msg in ipr.get_addr():
                if msg.get("index") != indices[0] or msg.get("scope") != _SCOPE_GLOBAL:
                    continue
                text = msg.get("IFA_ADDRESS") or msg.get("IFA_LOCAL")
                if text is None:
                    continue
                found.append(InterfaceAddress(ipaddress.ip_address(text), msg["prefixlen"]))
            return tuple(found)

    def default_routes(self) -> tuple[DefaultRoute, ...]:
        with IPRoute() as ipr:
            names = {link["index"]: link.get("IFLA_IFNAME") for link in ipr.get_links()}
            hops: list[DefaultRoute] = []
            for family in (socket.AF_INET, socket.AF_INET6):
                for msg in ipr.get_routes(family=family):
                    table = msg.get("RTA_TABLE", msg.get("table"))
                    if msg.get("dst_len") != 0 or table != _MAIN_TABLE:
                        continue
                    hops.extend(_next_hops(msg, names))
            return tuple(hops)

    def neighbours(self, iface: str) -> tuple[Neighbour, ...]:
        with IPRoute() as ipr:
            indices = ipr.link_lookup(ifname=iface)
            if not indices:
                return ()
            found = []
            for msg in ipr.get_neighbours():
                if msg.get("ifindex") != indices[0]:
                    continue
                text = msg.get("NDA_DST")
                if text is None:
                    continue
                found.append(Neighbour(ipaddress.ip_address(text), _nud_state(msg["state"])))
            return tuple(found)


def _next_hops(msg: Any, names: dict[int, str | None]) -> list[DefaultRoute]:
    multipath = msg.get("RTA_MULTIPATH")
    if multipath:
        return [
            DefaultRoute(_address(hop.get("RTA_GATEWAY")), names.get(hop.get("oif")))
            for hop in multipath
        ]
    return [DefaultRoute(_address(msg.get("RTA_GATEWAY")), names.get(msg.get("RTA_OIF")))]


def _address(text: str | None) -> IPAddress | None:
    return None if text is None else ipaddress.ip_address(text)


def _nud_state(bits: int) -> NeighbourState:
    for bit, name in _NUD_STATES:
        if bits & bit:
            return name
    return "none"

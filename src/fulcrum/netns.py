"""The unit's network namespace and its public surface.

``bring_up`` makes the named netns and gives it the public interface: ``dedicated``
moves the host's NIC into it wholesale; ``macvlan`` and ``ipvlan`` create a child of the
named parent directly inside it (the child carries the parent's name there). It then
assigns ``unit-ip/unit-cidr``, brings up ``lo`` and the interface, and routes the
netns's default via ``public-gateway`` — the interface's own gateway, never the host's.

``tear_down`` undoes it, and is the same walk that reclaims a netns left behind by a
killed run: processes still inside are killed, every child link is deleted, every
other link (the moved NIC) is returned to the host namespace by its ifindex under its
own name, and the netns is deleted. Returning the NIC matters: deleting a netns
destroys the virtual devices in it and hands physical ones to the init namespace under
whatever name is free, so a NIC left inside would not come back as it went in.

The launcher itself never leaves the host namespace: pyroute2 opens its netlink socket
inside the unit's netns from a forked helper, and links are moved by namespace file
descriptor.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import attrs
from pyroute2 import IPRoute
from pyroute2 import netns as pr_netns
from pyroute2.netlink.exceptions import NetlinkError

from fulcrum.errors import LauncherError
from valis_core.launcher_config import LauncherConfig, Mode

log = logging.getLogger(__name__)

#: Where ``ip netns`` and pyroute2 keep the named namespaces (``/var/run`` links here).
NETNS_DIR = Path("/run/netns")

#: Link kinds fulcrum creates as children of the public interface; teardown deletes
#: these and returns every other link to the host.
CHILD_KINDS: frozenset[str] = frozenset({"macvlan", "ipvlan"})

_IFA_F_NODAD = 0x02
_IFF_UP = 0x1
_IFF_LOOPBACK = 0x8
_EVICT_TIMEOUT = 5.0
_POLL = 0.05


@attrs.frozen
class PublicSurface:
    """What ``bring_up`` made: the unit's netns and its public link inside it."""

    netns_name: str
    mode: Mode
    #: the public link's name inside the netns (the NIC's own name, or the parent's)
    link_name: str
    #: the public link's ifindex inside the netns
    link_index: int


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def netns_exists(name: str) -> bool:
    return netns_path(name).exists()


def bring_up(cfg: LauncherConfig) -> PublicSurface:
    """Make the unit's netns with its public surface configured, reclaiming a stale one.

    On failure everything this call made is undone before the error propagates.
    """
    name = cfg.netns_name
    if netns_exists(name):
        log.warning("reclaiming netns %s left behind by an earlier run", name)
        tear_down(name)
    with _stage(f"creating netns {name}", "check that /run/netns is writable by root"):
        pr_netns.create(name)
    try:
        index = _place_public_link(cfg)
        _configure(cfg, index)
    except BaseException:
        try:
            tear_down(name)
        except LauncherError as exc:
            log.error("%s", exc)
        raise
    return PublicSurface(name, cfg.mode, cfg.public_interface, index)


def tear_down(name: str) -> None:
    """Empty and delete the netns ``name``; a netns that does not exist is already done.

    Idempotent, and safe on a netns a killed run left half made.
    """
    path = netns_path(name)
    if not path.exists():
        return
    _evict_processes(name)
    if _is_namespace(path):
        _return_links(name)
    remedy = f"remove it by hand: ip netns delete {name}"
    with _stage(f"deleting netns {name}", remedy), suppress(FileNotFoundError):
        pr_netns.remove(name)


def pids_in(name: str) -> list[int]:
    """The processes whose network namespace is the named netns."""
    try:
        target = os.stat(netns_path(name))
    except FileNotFoundError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue  # gone, or a process we may not inspect
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry))
    return pids


# -- bring-up ---------------------------------------------------------------------------


def _place_public_link(cfg: LauncherConfig) -> int:
    """Put the public link into the netns; return its ifindex there."""
    name, iface = cfg.netns_name, cfg.public_interface
    ns_fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        with IPRoute() as host:
            found = host.link_lookup(ifname=iface)
            if not found:
                raise LauncherError(
                    f"public interface {iface} is not in the host namespace; check "
                    "public-interface in the launcher config (`ip link` lists the NICs)"
                )
            if cfg.mode == "dedicated":
                with _stage(f"moving NIC {iface} into netns {name}"):
                    host.link("set", index=found[0], net_ns_fd=ns_fd)
            else:
                _create_child(host, cfg, found[0], ns_fd)
    finally:
        os.close(ns_fd)
    with _in_netns(name) as ns:
        inside = ns.link_lookup(ifname=iface)
    if not inside:
        raise LauncherError(f"{iface} did not appear in netns {name} after placing it")
    return int(inside[0])


def _create_child(host: Any, cfg: LauncherConfig, parent: int, ns_fd: int) -> None:
    iface, mode = cfg.public_interface, cfg.mode
    if not host.link("get", index=parent)[0]["flags"] & _IFF_UP:
        # The parent is the host's to manage; a child of a down parent has no carrier.
        log.warning("parent %s of the %s child is down on the host; the unit will have "
                    "no carrier until it is brought up", iface, mode)
    extra = {"macvlan_mode": "bridge"} if mode == "macvlan" else {"ipvlan_mode": 0}
    try:
        host.link(
            "add", ifname=iface, kind=mode, link=parent, net_ns_fd=ns_fd, **extra
        )
    except NetlinkError as exc:
        if exc.code == errno.EOPNOTSUPP:
            raise LauncherError(
                f"mode {mode}: this kernel has no {mode} link support, so fulcrum cannot "
                f"make a {mode} child of {iface}; load the {mode} module, or choose "
                "another mode (dedicated, macvlan, ipvlan) in the launcher config"
            ) from None
        raise LauncherError(
            f"mode {mode}: creating a {mode} child of {iface} in netns "
            f"{cfg.netns_name} failed: {_reason(exc)}"
        ) from None


def _configure(cfg: LauncherConfig, index: int) -> None:
    name, iface = cfg.netns_name, cfg.public_interface
    interface = ipaddress.ip_interface(f"{cfg.unit_ip}/{cfg.unit_cidr}")
    default = "0.0.0.0/0" if interface.version == 4 else "::/0"
    with _in_netns(name) as ns:
        with _stage(f"bringing up lo in netns {name}"):
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        with _stage(
            f"assigning {interface} to {iface} in netns {name}",
            "check unit-ip and unit-cidr in the launcher config",
        ):
            extra = {} if interface.version == 4 else {"flags": _IFA_F_NODAD}
            ns.addr(
                "add", index=index, address=str(cfg.unit_ip), prefixlen=cfg.unit_cidr, **extra
            )
        with _stage(f"bringing up {iface} in netns {name}"):
            ns.link("set", index=index, state="up")
        with _stage(
            f"routing the default via {cfg.public_gateway} on {iface} in netns {name}",
            "public-gateway must be the public interface's own gateway: inside unit-cidr, "
            "or an IPv6 link-local address",
        ):
            ns.route("add", dst=default, gateway=str(cfg.public_gateway), oif=index)


# -- teardown ---------------------------------------------------------------------------


def _evict_processes(name: str) -> None:
    """Kill what still runs in the netns: a killed launcher's orphaned resident.

    An orphan would keep its sockets and its operator-state connection while a new
    resident starts beside it; two writers on one generation is what the fence exists
    to prevent, so the orphan does not get to stay.
    """
    pids = pids_in(name)
    for pid in pids:
        log.warning("killing process %d still running in netns %s", pid, name)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _EVICT_TIMEOUT
    while pids and time.monotonic() < deadline:
        time.sleep(_POLL)
        pids = pids_in(name)
    if pids:
        raise LauncherError(
            f"processes {', '.join(map(str, pids))} still run in netns {name} after "
            "SIGKILL; find out what holds them before launching again"
        )


def _return_links(name: str) -> None:
    host_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with _in_netns(name) as ns:
            for link in ns.link("dump"):
                ifname = link.get_attr("IFLA_IFNAME")
                index = int(link["index"])
                if link["flags"] & _IFF_LOOPBACK:
                    continue
                if _kind(link) in CHILD_KINDS:
                    with _stage(f"deleting {ifname} from netns {name}"):
                        ns.link("del", index=index)
                    continue
                with _stage(
                    f"returning {ifname} from netns {name} to the host namespace",
                    f"a link named {ifname} may already exist on the host; rename it",
                ):
                    ns.link("set", index=index, net_ns_fd=host_fd, ifname=ifname)
    finally:
        os.close(host_fd)


def _kind(link: Any) -> str | None:
    info = link.get_attr("IFLA_LINKINFO")
    if info is None:
        return None
    kind = info.get_attr("IFLA_INFO_KIND")
    return str(kind) if kind is not None else None


def _is_namespace(path: Path) -> bool:
    """Whether ``path`` is a live namespace mount (a run killed mid-create leaves a file)."""
    try:
        # Namespace files all live on the one nsfs device; a plain file does not.
        return os.stat(path).st_dev == os.stat("/proc/self/ns/net").st_dev
    except OSError:
        return False


# -- helpers ----------------------------------------------------------------------------


@contextmanager
def _in_netns(name: str) -> Iterator[Any]:
    """An RTNL socket inside an existing netns (never creating one)."""
    with _stage(f"opening netns {name}"):
        ns = IPRoute(netns=name, flags=0)
    try:
        yield ns
    finally:
        ns.close()


@contextmanager
def _stage(what: str, remedy: str | None = None) -> Iterator[None]:
    """Turn a netlink or OS error during ``what`` into a one-line ``LauncherError``."""
    try:
        yield
    except (NetlinkError, OSError) as exc:
        tail = f"; {remedy}" if remedy else ""
        raise LauncherError(f"{what}: {_reason(exc)}{tail}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, NetlinkError):
        return f"{os.strerror(exc.code)} (netlink error {exc.code})"
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)
    return str(exc)

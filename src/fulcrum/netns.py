"""The unit's network namespace and its public surface.

``bring_up`` makes the named netns and gives it the public interface: ``dedicated``
moves the host's NIC into it wholesale; ``macvlan`` and ``ipvlan`` create a child of the
named parent directly inside it (the child carries the parent's name there). It then
assigns ``unit-ip/unit-cidr``, brings up ``lo`` and the interface, and routes the
netns's default via ``public-gateway`` — the interface's own gateway, never the host's.

``tear_down`` undoes it, and ``reclaim`` is the same walk on a netns left behind by a
dead run: processes still inside are killed, every child link is deleted, every other
link (the moved NIC) is returned to the host namespace by its ifindex under its own
name, and the netns is deleted. Returning the NIC matters: deleting a netns destroys
the virtual devices in it and hands physical ones to the init namespace under whatever
name is free, so a NIC left inside would not come back as it went in.

Both act only on what is this fulcrum's. A reclaim happens only under the unit's lock
(``fulcrum.launch``), so the netns it takes is never a live fulcrum's. The netns
``bring_up`` made is held open (``MadeNetns``) for the unit's life, so its identity
cannot pass to another namespace; ``tear_down`` acts on that netns and leaves alone
one that is no longer it. Processes are killed through pidfds, each checked to be in
the netns after its pidfd was opened, so a pid taken by another process since the
listing is never hit.

The launcher itself never leaves the host namespace: pyroute2 opens its netlink socket
inside the unit's netns from a forked helper, and links are moved by namespace file
descriptor.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import select
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
from fulcrum.pushed import NamespaceId
from valis_core.clock import Clock, monotonic
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


@attrs.define(eq=False)
class MadeNetns:
    """The netns ``bring_up`` created, held open by a descriptor until ``close()``.

    While the descriptor is open the namespace lives, so its identity (device and inode
    of its nsfs file) names it and no other: a namespace freed would hand its inode to
    the next one made, quite possibly under the same name.
    """

    name: str
    fd: int
    identity: NamespaceId

    @classmethod
    def hold(cls, name: str) -> MadeNetns:
        with _stage(f"opening netns {name}"):
            fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
        info = os.fstat(fd)
        return cls(name, fd, NamespaceId(info.st_dev, info.st_ino))

    @property
    def fd_path(self) -> str:
        """A path that opens this netns while it is held (not its name)."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def is_at_its_name(self) -> bool:
        """Whether ``/run/netns/NAME`` still names this netns."""
        return _identity_at(netns_path(self.name)) == self.identity

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@attrs.frozen
class PublicSurface:
    """What ``bring_up`` made: the unit's netns and its public link inside it."""

    netns: MadeNetns
    mode: Mode
    #: the public link's name inside the netns (the NIC's own name, or the parent's)
    link_name: str
    #: the public link's ifindex inside the netns
    link_index: int

    @property
    def netns_name(self) -> str:
        return self.netns.name


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def netns_exists(name: str) -> bool:
    return netns_path(name).exists()


def bring_up(cfg: LauncherConfig) -> PublicSurface:
    """Make the unit's netns with its public surface configured, reclaiming a stale one.

    Call it only holding the unit's lock: a netns of the name is then a dead run's. On
    failure everything this call made is undone before the error propagates; on success
    the caller owns the returned netns (``tear_down(surface.netns)``, then ``close``).
    """
    name = cfg.netns_name
    if netns_exists(name):
        log.warning("reclaiming netns %s left behind by an earlier run", name)
        reclaim(name)
    with _stage(f"creating netns {name}", "check that /run/netns is writable by root"):
        pr_netns.create(name)
    made: MadeNetns | None = None
    try:
        made = MadeNetns.hold(name)
        index = _place_public_link(cfg)
        _configure(cfg, index)
    except BaseException:
        try:
            if made is None:
                reclaim(name)
            else:
                tear_down(made)
        except LauncherError as exc:
            log.error("%s", exc)
        finally:
            if made is not None:
                made.close()
        raise
    return PublicSurface(made, cfg.mode, cfg.public_interface, index)


def tear_down(made: MadeNetns) -> None:
    """Empty the netns this fulcrum made, and delete its name when it still names it.

    The netns is reached through the descriptor held since it was made, never by its
    name: a name that now names another netns (deleted and made again by hand) is left
    as it is, with a warning, and what it holds is not touched. Idempotent.
    """
    _evict_processes(made.name, made.identity)
    _return_links(made.name, made.fd_path)
    if made.is_at_its_name():
        _delete_name(made.name)
    elif netns_exists(made.name):
        log.warning("netns %s is no longer the one this fulcrum made; leaving it as it is",
                    made.name)


def reclaim(name: str) -> None:
    """Empty and delete whatever netns ``name`` is: one a dead run left, whole or half made.

    Only under the unit's lock, which no live fulcrum of the name then holds.
    """
    path = netns_path(name)
    if not path.exists():
        return
    if _is_namespace(path):
        identity = _identity_at(path)
        if identity is not None:
            _evict_processes(name, identity)
        _return_links(name, name)
    _delete_name(name)


def _delete_name(name: str) -> None:
    remedy = f"remove it by hand: ip netns delete {name}"
    with _stage(f"deleting netns {name}", remedy), suppress(FileNotFoundError):
        pr_netns.remove(name)


def pids_in(identity: NamespaceId) -> list[int]:
    """The processes whose network namespace is ``identity``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _netns_of_pid(int(entry)) == identity:
            pids.append(int(entry))
    return pids


def _netns_of_pid(pid: int) -> NamespaceId | None:
    return _identity_at(Path(f"/proc/{pid}/ns/net"))


def _identity_at(path: Path) -> NamespaceId | None:
    try:
        info = os.stat(path)
    except OSError:
        return None  # gone, or a process we may not inspect
    return NamespaceId(info.st_dev, info.st_ino)


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


def _evict_processes(
    name: str, identity: NamespaceId, *, ticks: Clock = monotonic
) -> None:
    """Kill what still runs in the netns: the resident's leftovers, or a killed
    launcher's orphaned resident.

    An orphan would keep its sockets and its operator-state connection while a new
    resident starts beside it; two writers on one generation is what the fence exists
    to prevent, so the orphan does not get to stay. Each process is killed through a
    pidfd opened before its netns is checked, so the check and the kill are about one
    process, never about whatever took its pid since the listing; the netns is listed
    again until it is empty (a child forked before its parent died is found there).
    """
    deadline = ticks() + _EVICT_TIMEOUT
    while pids := pids_in(identity):
        if ticks() >= deadline:
            raise LauncherError(
                f"processes {', '.join(map(str, pids))} still run in netns {name} after "
                "SIGKILL; find out what holds them before launching again"
            )
        pidfds = [fd for pid in pids if (fd := _kill_in(pid, name, identity)) is not None]
        try:
            _await_exits(pidfds, deadline, ticks)
        finally:
            for fd in pidfds:
                os.close(fd)
        if not pidfds:
            time.sleep(_POLL)  # listed, then gone before its pidfd: list again


def _kill_in(pid: int, name: str, identity: NamespaceId) -> int | None:
    """SIGKILL ``pid`` if it is (still) in the netns; its pidfd, or None when not."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if _netns_of_pid(pid) != identity:  # exited and its pid taken since the listing
        os.close(fd)
        return None
    log.warning("killing process %d still running in netns %s", pid, name)
    with suppress(ProcessLookupError):
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    return fd


def _await_exits(pidfds: list[int], deadline: float, ticks: Clock) -> None:
    """Wait until every pidfd's process has exited (pidfd readable), or the deadline."""
    waiting = list(pidfds)
    while waiting and (left := deadline - ticks()) > 0:
        poller = select.poll()
        for fd in waiting:
            poller.register(fd, select.POLLIN)
        done = {fd for fd, _ in poller.poll(left * 1000)}
        waiting = [fd for fd in waiting if fd not in done]


def _return_links(name: str, target: str) -> None:
    """Delete the child links of netns ``name`` (opened as ``target``: its name, or a
    path) and return every other link to the host namespace."""
    host_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with _in_netns(name, target) as ns:
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
def _in_netns(name: str, target: str | None = None) -> Iterator[Any]:
    """An RTNL socket inside an existing netns (never creating one): the netns named
    ``name``, or the one ``target`` opens (a name, or a path)."""
    with _stage(f"opening netns {name}"):
        ns = IPRoute(netns=target or name, flags=0)
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

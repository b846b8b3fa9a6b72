"""The resident launcher config: what fulcrum reads to make the unit and exec the resident.

Per-host configuration at ``/etc/fulcrum/launcher.toml`` (root-owned, 0644), TOML with
the contract's field names in kebab-case. A ``LauncherConfig`` is valid by construction:
every check runs when one is made, whether from TOML or from a provisioning command, so
fulcrum never holds a config it would have refused.

``catchall-object-path`` is checked for being absolute and never for existing (a wrong
path fails at open() during bring-up). ``edge-port``'s presence is the whole election of
the public edge; ``owner-port`` absent means the owner terminus is closed. A pinned
``valis-uid``/``valis-gid`` of 0 is refused: the resident never runs as root.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

import attrs

from valis_core.errors import ValisError
from valis_core.node_defaults import DEFAULT_LAUNCHER_CONFIG
from valis_core.reachability import (
    DNS_PORT,
    DnsReachability,
    dns_endpoints,
    dns_reachability,
    firewall_accepts,
)

DEFAULT_PATH = DEFAULT_LAUNCHER_CONFIG

RESTART_TO_APPLY = (
    "fulcrum reads the launcher config only when it starts: `systemctl restart "
    "fulcrum-valis` applies a changed one to a running unit (a reload does not)"
)
"""Said wherever a launcher config is rewritten (``fulcrum config produce``, provision)."""


def owner_terminus(cfg: LauncherConfig) -> str:
    """Where DNS UPDATE goes, in a few words (the DNS port answers it NOTIMP)."""
    if cfg.owner_port is None:
        return "owner terminus closed (no owner-port: DNS UPDATE has nowhere to go)"
    return f"owner terminus (DNS UPDATE, TCP) on port {cfg.owner_port}"

Mode = Literal["dedicated", "macvlan", "ipvlan"]
MODES: tuple[Mode, ...] = ("dedicated", "macvlan", "ipvlan")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_MAX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to the kernel, never an account
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")

# TOML key → attribute, in the canonical order they are rendered.
FIELDS: dict[str, str] = {
    "netns-name": "netns_name",
    "unit-ip": "unit_ip",
    "unit-cidr": "unit_cidr",
    "public-interface": "public_interface",
    "public-gateway": "public_gateway",
    "mode": "mode",
    "designated-port": "designated_port",
    "edge-port": "edge_port",
    "owner-port": "owner_port",
    "catchall-object-path": "catchall_object_path",
    "valis-command": "valis_command",
    "valis-uid": "valis_uid",
    "valis-gid": "valis_gid",
}
OPTIONAL_FIELDS: frozenset[str] = frozenset({"edge-port", "owner-port", "valis-uid", "valis-gid"})


class LauncherConfigError(ValisError):
    """A launcher config refused; ``field`` is the kebab-case key at fault, if one is."""

    def __init__(self, message: str, field: str | None = None, *, source: str = "") -> None:
        self.detail = message
        self.field = field
        self.source = source
        where = f"launcher config {source}" if source else "launcher config"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


@attrs.frozen
class LauncherConfig:
    """One host's launcher config, validated when made."""

    netns_name: str
    unit_ip: IPAddress
    unit_cidr: int
    public_interface: str
    public_gateway: IPAddress
    mode: Mode
    designated_port: int
    catchall_object_path: str
    valis_command: tuple[str, ...]
    edge_port: int | None = None
    owner_port: int | None = None
    valis_uid: int | None = None
    valis_gid: int | None = None

    def __attrs_post_init__(self) -> None:
        _check(self)

    @property
    def unit_network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The network the unit address sits in (``unit-ip/unit-cidr``)."""
        return ipaddress.ip_interface(f"{self.unit_ip}/{self.unit_cidr}").network


def firewall_accept_set(cfg: LauncherConfig) -> frozenset[tuple[str, int]]:
    """The (protocol, port) pairs the default-deny firewall accepts.

    Beyond loopback and established/related traffic (always accepted): DNS over UDP and
    TCP, the owner port when opened, the edge port when elected. The designated port
    never enters just by being named.
    """
    return firewall_accepts(owner_port=cfg.owner_port, edge_port=cfg.edge_port)


def served_dns_reachability(cfg: LauncherConfig) -> DnsReachability:
    """Whether the DNS pair fulcrum binds on ``designated-port`` is reachable from outside."""
    return dns_reachability(dns_endpoints(cfg.designated_port), firewall_accept_set(cfg))


def config_file_problem(path: str, uid: int, mode: int, *, reader_uid: int = 0) -> str | None:
    """Why the launcher config file at ``path`` (owner ``uid``, permission bits ``mode``)
    must not be trusted by a launcher running as ``reader_uid``; None when it may be.

    What the file names runs before the privilege drop, so only root (or the account
    reading it, which is root on a node) may own it and nobody else may write it: a
    0644 file owned by the run account would let the resident rewrite its own launcher.
    """
    if uid in (0, reader_uid) and not mode & 0o022:
        return None
    return (
        f"{path} is owned by uid {uid} with mode {mode:04o}; only root may change what the "
        "privileged launcher reads"
    )


def config_file_remedy(path: str) -> str:
    """What makes the file at ``path`` one the launcher trusts."""
    return f"chown root:root {path} && chmod 0644 {path}"


def parse_launcher_config(text: str) -> LauncherConfig:
    """Parse and validate launcher-config TOML."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LauncherConfigError(f"not valid TOML ({exc}); fix the syntax") from exc
    return launcher_config_from_mapping(table)


def launcher_config_from_mapping(table: Mapping[str, object]) -> LauncherConfig:
    """Build a config from kebab-case keys and TOML-typed values (str, int, list of str)."""
    unknown = sorted(key for key in table if key not in FIELDS)
    if unknown:
        raise LauncherConfigError(
            f"unknown key(s) {', '.join(unknown)}; the known keys are {', '.join(FIELDS)}"
        )
    missing = [key for key in FIELDS if key not in OPTIONAL_FIELDS and key not in table]
    if missing:
        raise LauncherConfigError(f"missing required key(s) {', '.join(missing)}")
    kwargs: dict[str, Any] = {}
    for key, attr in FIELDS.items():
        if key in table:
            kwargs[attr] = _CONVERTERS[key](key, table[key])
    return LauncherConfig(**kwargs)


def render_launcher_config(cfg: LauncherConfig) -> str:
    """Render ``cfg`` as canonical TOML; ``parse_launcher_config`` inverts it exactly."""
    lines = ["# fulcrum launcher config: this host's unit. Root-owned, mode 0644."]
    for key, attr in FIELDS.items():
        value = getattr(cfg, attr)
        if value is None:
            continue
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


# -- conversion from TOML values ------------------------------------------------------


def _as_str(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise LauncherConfigError(f"must be a string, got {_type_name(value)}", key)
    return value


def _as_int(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LauncherConfigError(f"must be an integer, got {_type_name(value)}", key)
    return value


def _as_address(key: str, value: object) -> IPAddress:
    text = _as_str(key, value)
    try:
        address = ipaddress.ip_address(text)
    except ValueError as exc:
        raise LauncherConfigError(f"{text!r} is not an IPv4 or IPv6 address", key) from exc
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise LauncherConfigError(f"{text!r}: give the address without a %scope", key)
    return address


def _as_mode(key: str, value: object) -> Mode:
    text = _as_str(key, value)
    if text not in MODES:
        raise LauncherConfigError(f"{text!r} is not one of {', '.join(MODES)}", key)
    return text


def _as_command(key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise LauncherConfigError(f"must be an array of strings, got {_type_name(value)}", key)
    items = cast("list[object] | tuple[object, ...]", value)
    return tuple(_as_str(key, item) for item in items)


_CONVERTERS: dict[str, Callable[[str, object], object]] = {
    "netns-name": _as_str,
    "unit-ip": _as_address,
    "unit-cidr": _as_int,
    "public-interface": _as_str,
    "public-gateway": _as_address,
    "mode": _as_mode,
    "designated-port": _as_int,
    "edge-port": _as_int,
    "owner-port": _as_int,
    "catchall-object-path": _as_str,
    "valis-command": _as_command,
    "valis-uid": _as_int,
    "valis-gid": _as_int,
}


def _type_name(value: object) -> str:
    names = {bool: "a boolean", str: "a string", int: "an integer", float: "a float"}
    return names.get(type(value), f"a {type(value).__name__}")


# -- validation -------------------------------------------------------------------------


def _check(cfg: LauncherConfig) -> None:
    """Every rule a config must meet, field by field, naming the field that breaks one."""
    _check_name("netns-name", cfg.netns_name, "a network namespace name")
    _check_name("public-interface", cfg.public_interface, "a Linux interface name")
    _check_unit_address(cfg)
    _check_gateway(cfg)
    if cfg.mode not in MODES:
        raise LauncherConfigError(f"{cfg.mode!r} is not one of {', '.join(MODES)}", "mode")
    _check_port("designated-port", cfg.designated_port)
    for key, port in (("edge-port", cfg.edge_port), ("owner-port", cfg.owner_port)):
        if port is None:
            continue
        _check_port(key, port)
        if port == DNS_PORT:
            raise LauncherConfigError(
                f"{port} is the DNS port fulcrum already binds; choose another port", key
            )
        if port == cfg.designated_port:
            raise LauncherConfigError(
                f"{port} is also the designated-port, where fulcrum binds the DNS pair; "
                "the two listeners need their own ports",
                key,
            )
    if cfg.edge_port is not None and cfg.edge_port == cfg.owner_port:
        raise LauncherConfigError(
            f"{cfg.owner_port} is also the edge-port; the two listeners need their own ports",
            "owner-port",
        )
    _check_path("catchall-object-path", cfg.catchall_object_path)
    _check_command(cfg.valis_command)
    for key, ident in (("valis-uid", cfg.valis_uid), ("valis-gid", cfg.valis_gid)):
        if ident is None:
            continue
        _check_int(key, ident)
        if not 0 <= ident <= _MAX_ID:
            raise LauncherConfigError(f"{ident} is not a valid numeric id", key)
        if ident == 0:
            raise LauncherConfigError(
                "0 is root; the resident never runs privileged (omit it to use valis)", key
            )


def _check_int(key: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LauncherConfigError(f"must be an integer, got {_type_name(value)}", key)


def _check_name(key: str, value: object, what: str) -> None:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise LauncherConfigError(
            f"{value!r} is not {what}: 1-15 characters of letters, digits, '_', '.', '-', "
            "not starting with '.' or '-'",
            key,
        )


def _check_port(key: str, port: object) -> None:
    _check_int(key, port)
    if not 1 <= cast(int, port) <= 65535:
        raise LauncherConfigError(f"{port} is outside 1..65535", key)


def _check_unit_address(cfg: LauncherConfig) -> None:
    ip = cfg.unit_ip
    if not isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
        raise LauncherConfigError(f"{ip!r} is not an IP address", "unit-ip")
    if ip.is_unspecified or ip.is_multicast or ip.is_loopback:
        raise LauncherConfigError(
            f"{ip} cannot be a unit's public address (unspecified, multicast or loopback)",
            "unit-ip",
        )
    _check_int("unit-cidr", cfg.unit_cidr)
    if not 0 <= cfg.unit_cidr <= ip.max_prefixlen:
        raise LauncherConfigError(
            f"{cfg.unit_cidr} is not a prefix length for IPv{ip.version} "
            f"(0..{ip.max_prefixlen})",
            "unit-cidr",
        )
    network = cfg.unit_network
    if _is_network_or_broadcast(ip, network):
        raise LauncherConfigError(
            f"{ip} is the network or broadcast address of {network}", "unit-ip"
        )


def _check_gateway(cfg: LauncherConfig) -> None:
    gateway = cfg.public_gateway
    if not isinstance(gateway, ipaddress.IPv4Address | ipaddress.IPv6Address):
        raise LauncherConfigError(f"{gateway!r} is not an IP address", "public-gateway")
    if gateway.version != cfg.unit_ip.version:
        raise LauncherConfigError(
            f"{gateway} is IPv{gateway.version} but unit-ip {cfg.unit_ip} is "
            f"IPv{cfg.unit_ip.version}",
            "public-gateway",
        )
    network = cfg.unit_network
    if gateway.version == 6 and gateway.is_link_local:
        # On-link by definition on the public interface (routers announce themselves by
        # their link-local address, fe80::1 on many networks).
        return
    if gateway not in network:
        raise LauncherConfigError(
            f"{gateway} is outside the unit network {network}; give the public "
            "interface's own gateway (for IPv6, its link-local address will do)",
            "public-gateway",
        )
    if gateway == cfg.unit_ip:
        raise LauncherConfigError(f"{gateway} is the unit address itself", "public-gateway")
    if _is_network_or_broadcast(gateway, network):
        raise LauncherConfigError(
            f"{gateway} is the network or broadcast address of {network}", "public-gateway"
        )


def _is_network_or_broadcast(
    address: IPAddress, network: ipaddress.IPv4Network | ipaddress.IPv6Network
) -> bool:
    if address.version != 4 or network.prefixlen >= 31:
        return False
    return address in (network.network_address, network.broadcast_address)


def _check_text(key: str, value: str) -> None:
    if "\0" in value:
        raise LauncherConfigError("holds a NUL character; remove it", key)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LauncherConfigError("is not valid UTF-8 text", key) from exc


def _check_path(key: str, value: object) -> None:
    if not isinstance(value, str):
        raise LauncherConfigError(f"must be a string, got {_type_name(value)}", key)
    _check_text(key, value)
    if not value.startswith("/"):
        raise LauncherConfigError(f"{value!r} is not an absolute path", key)


def _check_command(command: object) -> None:
    key = "valis-command"
    if not isinstance(command, tuple) or not command:
        raise LauncherConfigError(
            "must be a non-empty array: the resident's absolute program path, then its "
            "arguments",
            key,
        )
    for item in cast("tuple[object, ...]", command):
        if not isinstance(item, str):
            raise LauncherConfigError(f"must hold strings only, got {_type_name(item)}", key)
        _check_text(key, item)
    program = command[0]
    if not program.startswith("/"):
        raise LauncherConfigError(
            f"the program {program!r} is not an absolute path; give its full path", key
        )


# -- rendering ----------------------------------------------------------------------------

_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _toml_string(value: str) -> str:
    out = []
    for c in value:
        if c in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        raise TypeError("a launcher config holds no booleans")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_string(item) for item in value) + "]"
    return _toml_string(str(value))

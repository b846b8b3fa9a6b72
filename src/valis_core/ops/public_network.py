"""Public-network derivation: the unit's address, prefix and gateway, read off an interface.

``derive_public_network`` is pure over a ``NetworkProbe`` (no default probe: the answer is
about one host and must come from that host). The gateway is the default route's next hop
through the interface, and it counts only when the host has heard from it: a neighbour
entry in state reachable, stale, delay or probe. A route can name any address, including
one nothing answers on; a gateway absent from the neighbour table (or only incomplete or
failed there) is refused, because a launcher config built on it would route the unit's
replies into nothing.
"""

from __future__ import annotations

import ipaddress
from typing import Literal, Protocol

import attrs

from valis_core.errors import ValisError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NeighbourState = Literal[
    "incomplete", "reachable", "stale", "delay", "probe", "failed", "noarp", "permanent", "none"
]
HEARD_FROM: frozenset[NeighbourState] = frozenset({"reachable", "stale", "delay", "probe"})
"""Neighbour states that mean a frame from that address actually arrived at some point."""


@attrs.frozen
class InterfaceAddress:
    """One address configured on an interface, with its prefix length."""

    address: IPAddress
    prefix: int


@attrs.frozen
class DefaultRoute:
    """One next hop of a default route: the gateway (None for a device route) and device."""

    gateway: IPAddress | None
    interface: str | None


@attrs.frozen
class Neighbour:
    """One neighbour-table entry on an interface."""

    address: IPAddress
    state: NeighbourState


class NetworkProbe(Protocol):
    """The read-only questions derivation asks of one host's network stack."""

    def interface_exists(self, iface: str) -> bool:
        """The host has an interface called ``iface``."""

    def interface_addresses(self, iface: str) -> tuple[InterfaceAddress, ...]:
        """Every global-scope address configured on ``iface``."""

    def default_routes(self) -> tuple[DefaultRoute, ...]:
        """Every next hop of the main table's default routes, all families."""

    def neighbours(self, iface: str) -> tuple[Neighbour, ...]:
        """The neighbour table's entries on ``iface``."""


@attrs.frozen
class PublicNetwork:
    """What the launcher config's unit-ip, unit-cidr and public-gateway should say."""

    interface: str
    address: IPAddress
    prefix: int
    gateway: IPAddress


class PublicNetworkError(ValisError):
    """The interface does not give a usable public network; the message says why."""


def derive_public_network(probe: NetworkProbe, iface: str, *, version: int = 4) -> PublicNetwork:
    """Derive the unit's public network on ``iface`` for IP ``version`` (4 or 6)."""
    stage = f"public network on {iface}"
    if not probe.interface_exists(iface):
        raise PublicNetworkError(f"{stage}: no such interface; name one `ip link` lists")
    gateways = [
        route.gateway
        for route in probe.default_routes()
        if route.interface == iface
        and route.gateway is not None
        and route.gateway.version == version
    ]
    gateways = list(dict.fromkeys(gateways))
    if not gateways:
        raise PublicNetworkError(
            f"{stage}: no IPv{version} default route leaves through {iface}; add one via "
            f"the interface's own gateway (ip route add default via GATEWAY dev {iface})"
        )
    if len(gateways) > 1:
        shown = ", ".join(str(gateway) for gateway in gateways)
        raise PublicNetworkError(
            f"{stage}: several IPv{version} default gateways ({shown}); leave one"
        )
    gateway = gateways[0]
    states = {entry.state for entry in probe.neighbours(iface) if entry.address == gateway}
    if not states & HEARD_FROM:
        seen = f"only as {', '.join(sorted(states))}" if states else "not at all"
        raise PublicNetworkError(
            f"{stage}: the route names gateway {gateway}, but the host has never heard from "
            f"it (in the neighbour table {seen}); check the gateway address and the link, "
            f"then ping {gateway} and assess again"
        )
    # An IPv6 link-local gateway is on-link whatever the prefix: any global address on
    # the interface can route through it.
    on_link = gateway.version == 6 and gateway.is_link_local
    candidates = [
        entry
        for entry in probe.interface_addresses(iface)
        if entry.address.version == version
        and (
            on_link
            or gateway in ipaddress.ip_interface(f"{entry.address}/{entry.prefix}").network
        )
        and entry.address != gateway
    ]
    if not candidates:
        shares = "is configured" if on_link else f"shares a subnet with gateway {gateway}"
        raise PublicNetworkError(
            f"{stage}: no IPv{version} address on {iface} {shares}; configure the unit's "
            f"address on {iface}"
        )
    if len(candidates) > 1:
        shown = ", ".join(f"{entry.address}/{entry.prefix}" for entry in candidates)
        raise PublicNetworkError(
            f"{stage}: several addresses could be the unit's ({shown}); leave one on {iface}"
        )
    chosen = candidates[0]
    return PublicNetwork(iface, chosen.address, chosen.prefix, gateway)

"""Public-network derivation over an in-memory network stack."""

from __future__ import annotations

import ipaddress

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.ops.public_network import (
    HEARD_FROM,
    DefaultRoute,
    InterfaceAddress,
    Neighbour,
    NeighbourState,
    PublicNetworkError,
    derive_public_network,
)

ADDRESS = ipaddress.ip_address("198.51.100.10")
GATEWAY = ipaddress.ip_address("198.51.100.1")
ALL_STATES: tuple[NeighbourState, ...] = (
    "incomplete", "reachable", "stale", "delay", "probe", "failed", "noarp", "permanent", "none",
)


@attrs.frozen
class MemoryNetwork:
    """The in-memory adapter of ``NetworkProbe``: one host's links, routes and neighbours."""

    interfaces: frozenset[str] = frozenset({"ens7", "eth0"})
    addresses: tuple[tuple[str, InterfaceAddress], ...] = (
        ("ens7", InterfaceAddress(ADDRESS, 24)),
        ("eth0", InterfaceAddress(ipaddress.ip_address("192.0.2.2"), 24)),
    )
    routes: tuple[DefaultRoute, ...] = (DefaultRoute(GATEWAY, "ens7"),)
    neighbour_table: tuple[tuple[str, Neighbour], ...] = (
        ("ens7", Neighbour(GATEWAY, "reachable")),
    )

    def interface_exists(self, iface: str) -> bool:
        return iface in self.interfaces

    def interface_addresses(self, iface: str) -> tuple[InterfaceAddress, ...]:
        return tuple(address for name, address in self.addresses if name == iface)

    def default_routes(self) -> tuple[DefaultRoute, ...]:
        return self.routes

    def neighbours(self, iface: str) -> tuple[Neighbour, ...]:
        return tuple(entry for name, entry in self.neighbour_table if name == iface)


def test_the_unit_network_is_read_off_the_interface() -> None:
    derived = derive_public_network(MemoryNetwork(), "ens7")
    assert (derived.address, derived.prefix, derived.gateway) == (ADDRESS, 24, GATEWAY)


@given(st.sampled_from(ALL_STATES))
def test_the_gateway_counts_only_when_the_host_has_heard_from_it(state: NeighbourState) -> None:
    network = MemoryNetwork(neighbour_table=(("ens7", Neighbour(GATEWAY, state)),))
    if state in HEARD_FROM:
        assert derive_public_network(network, "ens7").gateway == GATEWAY
    else:
        with pytest.raises(PublicNetworkError, match="never heard from"):
            derive_public_network(network, "ens7")


def test_a_gateway_named_by_a_route_but_absent_from_the_neighbour_table_is_refused() -> None:
    with pytest.raises(PublicNetworkError, match=r"198\.51\.100\.1.*not at all"):
        derive_public_network(MemoryNetwork(neighbour_table=()), "ens7")


def test_a_gateway_heard_on_another_interface_does_not_count() -> None:
    network = MemoryNetwork(neighbour_table=(("eth0", Neighbour(GATEWAY, "reachable")),))
    with pytest.raises(PublicNetworkError, match="never heard from"):
        derive_public_network(network, "ens7")


def test_a_default_route_through_another_interface_is_not_this_ones_gateway() -> None:
    network = MemoryNetwork(routes=(DefaultRoute(ipaddress.ip_address("192.0.2.1"), "eth0"),))
    with pytest.raises(PublicNetworkError, match="no IPv4 default route leaves through ens7"):
        derive_public_network(network, "ens7")


def test_an_unknown_interface_is_refused() -> None:
    with pytest.raises(PublicNetworkError, match="no such interface"):
        derive_public_network(MemoryNetwork(), "ens9")


def test_an_interface_without_an_address_on_the_gateways_subnet_is_refused() -> None:
    network = MemoryNetwork(
        addresses=(("ens7", InterfaceAddress(ipaddress.ip_address("203.0.113.5"), 24)),)
    )
    with pytest.raises(PublicNetworkError, match="shares a subnet"):
        derive_public_network(network, "ens7")


def test_two_candidate_unit_addresses_are_refused_rather_than_guessed() -> None:
    second = InterfaceAddress(ipaddress.ip_address("198.51.100.11"), 24)
    network = MemoryNetwork(addresses=(*MemoryNetwork().addresses, ("ens7", second)))
    with pytest.raises(PublicNetworkError, match="several addresses"):
        derive_public_network(network, "ens7")


def test_two_default_gateways_are_refused_rather_than_guessed() -> None:
    other = ipaddress.ip_address("198.51.100.2")
    network = MemoryNetwork(routes=(DefaultRoute(GATEWAY, "ens7"), DefaultRoute(other, "ens7")))
    with pytest.raises(PublicNetworkError, match="several IPv4 default gateways"):
        derive_public_network(network, "ens7")


def test_ipv6_is_derived_when_asked_for() -> None:
    address = ipaddress.ip_address("2001:db8::10")
    gateway = ipaddress.ip_address("2001:db8::1")
    network = MemoryNetwork(
        addresses=(*MemoryNetwork().addresses, ("ens7", InterfaceAddress(address, 64))),
        routes=(*MemoryNetwork().routes, DefaultRoute(gateway, "ens7")),
        neighbour_table=(("ens7", Neighbour(gateway, "stale")),),
    )
    derived = derive_public_network(network, "ens7", version=6)
    assert (derived.address, derived.prefix, derived.gateway) == (address, 64, gateway)


def test_an_ipv6_link_local_gateway_routes_the_interfaces_global_address() -> None:
    address = ipaddress.ip_address("2001:db8:5::10")
    gateway = ipaddress.ip_address("fe80::1")
    network = MemoryNetwork(
        addresses=(("ens7", InterfaceAddress(address, 64)),),
        routes=(DefaultRoute(gateway, "ens7"),),
        neighbour_table=(("ens7", Neighbour(gateway, "reachable")),),
    )
    derived = derive_public_network(network, "ens7", version=6)
    assert (derived.address, derived.prefix, derived.gateway) == (address, 64, gateway)


def test_an_ipv6_link_local_gateway_without_a_global_address_is_refused() -> None:
    gateway = ipaddress.ip_address("fe80::1")
    network = MemoryNetwork(
        addresses=(("ens7", InterfaceAddress(ADDRESS, 24)),),
        routes=(DefaultRoute(gateway, "ens7"),),
        neighbour_table=(("ens7", Neighbour(gateway, "reachable")),),
    )
    with pytest.raises(PublicNetworkError, match="no IPv6 address on ens7 is configured"):
        derive_public_network(network, "ens7", version=6)

"""Properties of the served-port judgement: DNS is reachable from outside exactly when the
firewall accepts both halves of the pair, and every place that reads a config or a launch
says so in the same words, never by refusing it."""

from __future__ import annotations

import ipaddress
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.launch import LaunchRecord
from valis_core.launcher_config import (
    LauncherConfig,
    LauncherConfigError,
    firewall_accept_set,
    served_dns_reachability,
)
from valis_core.reachability import (
    DNS_PORT,
    dns_endpoints,
    dns_reachability,
    firewall_accepts,
    render_endpoints,
)
from valis_core.resident.adopt import Adopted, Adoption, Role, adopted_dns_reachability

ports = st.integers(1, 65535)
other_ports = ports.filter(lambda p: p != DNS_PORT)
endpoints = st.tuples(st.sampled_from(["udp", "tcp"]), ports)
endpoint_sets = st.frozensets(endpoints, max_size=6)

BASE = LauncherConfig(
    netns_name="valis",
    unit_ip=ipaddress.ip_address("203.0.113.10"),
    unit_cidr=25,
    public_interface="ens7",
    public_gateway=ipaddress.ip_address("203.0.113.1"),
    mode="dedicated",
    designated_port=DNS_PORT,
    catchall_object_path="/opt/valis/lib/sk-lookup-catchall.bpf.o",
    valis_command=("/opt/valis/bin/valis",),
)


@st.composite
def configs(draw: st.DrawFn) -> LauncherConfig:
    designated = draw(ports)
    edge = draw(st.none() | other_ports.filter(lambda p: p != designated))
    owner = draw(st.none() | other_ports.filter(lambda p: p not in (designated, edge)))
    return attrs.evolve(BASE, designated_port=designated, edge_port=edge, owner_port=owner)


@given(endpoint_sets, endpoint_sets)
def test_reachable_exactly_when_every_served_endpoint_is_accepted(
    served: frozenset[tuple[str, int]], accepts: frozenset[tuple[str, int]]
) -> None:
    verdict = dns_reachability(served, accepts)
    assert verdict.reachable == (served <= accepts)
    assert verdict.dropped == served - accepts
    assert (verdict.problem is None) == verdict.reachable


@given(endpoint_sets, endpoint_sets)
def test_the_problem_names_each_dropped_endpoint_the_accept_set_and_the_remedy(
    served: frozenset[tuple[str, int]], accepts: frozenset[tuple[str, int]]
) -> None:
    problem = dns_reachability(served, accepts).problem
    if problem is None:
        return
    assert "\n" not in problem
    for proto, port in served - accepts:
        assert f"{proto}/{port}" in problem
        assert f"designated-port {port}" in problem or f", {port}" in problem
    assert f"accept set ({render_endpoints(accepts)})" in problem
    assert "set designated-port = 53" in problem


@settings(max_examples=scaled(0.8))
@given(configs())
def test_a_configs_dns_is_reachable_only_on_53(cfg: LauncherConfig) -> None:
    verdict = served_dns_reachability(cfg)
    assert verdict.served == dns_endpoints(cfg.designated_port)
    assert verdict.accepts == firewall_accept_set(cfg)
    assert verdict.reachable == (cfg.designated_port == DNS_PORT)


@settings(max_examples=scaled(0.5))
@given(other_ports, st.none() | other_ports, st.none() | other_ports)
def test_naming_the_designated_port_never_changes_the_accept_set(
    designated: int, owner: int | None, edge: int | None
) -> None:
    accepts = firewall_accepts(owner_port=owner, edge_port=edge)
    assert ("udp", designated) not in accepts
    if designated not in (owner, edge):
        assert ("tcp", designated) not in accepts


def test_the_contracts_example_of_a_dropped_port_is_said_in_full() -> None:
    cfg = attrs.evolve(BASE, designated_port=5353, owner_port=8053)
    assert served_dns_reachability(cfg).problem == (
        "designated-port 5353 is not in the firewall's accept set (udp/53, tcp/53, "
        "tcp/8053): udp/5353, tcp/5353 dropped, so the resident serves DNS behind a dropped "
        "port and nothing outside the unit gets an answer; set designated-port = 53 "
        "(naming a port there never opens it)"
    )


@pytest.mark.parametrize("field", ["edge_port", "owner_port"])
def test_a_listener_on_the_designated_port_is_refused_naming_both(field: str) -> None:
    ports: dict[str, Any] = {field: 5353}
    with pytest.raises(LauncherConfigError) as raised:
        attrs.evolve(BASE, designated_port=5353, **ports)
    assert raised.value.field == field.replace("_", "-")
    assert "also the designated-port" in str(raised.value)


# -- the resident's view: the accept set follows from what the launch handed down -----------


def _adoption(dns_port: int, owner: int | None, edge: int | None) -> Adoption:
    def item(role: Role, fd: int, port: int) -> Adopted:
        return Adopted(role=role, fd=fd, host="198.51.100.10", port=port)

    return Adoption(
        dns_udp=item(Role.DNS_UDP, 3, dns_port),
        dns_tcp=item(Role.DNS_TCP, 4, dns_port),
        owner=item(Role.OWNER, 5, owner) if owner is not None else None,
        edge=item(Role.EDGE, 6, edge) if edge is not None else None,
    )


@settings(max_examples=scaled(0.8))
@given(ports, st.none() | other_ports, st.none() | other_ports)
def test_the_resident_judges_its_pair_as_fulcrum_judges_the_config(
    dns_port: int, owner: int | None, edge: int | None
) -> None:
    adoption = _adoption(dns_port, owner, edge)
    record = LaunchRecord(resident=True, control_socket="/run/fulcrum/valis.sock")
    verdict = adopted_dns_reachability(record, adoption)
    assert verdict is not None
    assert verdict.accepts == firewall_accepts(owner_port=owner, edge_port=edge)
    assert verdict.reachable == (dns_port == DNS_PORT)
    if owner != edge and dns_port not in (owner, edge):
        cfg = attrs.evolve(BASE, designated_port=dns_port, owner_port=owner, edge_port=edge)
        assert verdict.problem == served_dns_reachability(cfg).problem


@given(ports)
def test_a_resident_launched_without_a_launcher_has_no_firewall_to_judge(dns_port: int) -> None:
    record = LaunchRecord(resident=True)
    assert adopted_dns_reachability(record, _adoption(dns_port, None, None)) is None

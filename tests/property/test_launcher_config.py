"""The launcher config: valid by construction, round-trips, and opens only what it names."""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

import attrs
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.errors import ValisError
from valis_core.launcher_config import (
    DEFAULT_PATH,
    FIELDS,
    LauncherConfig,
    LauncherConfigError,
    config_file_problem,
    firewall_accept_set,
    launcher_config_from_mapping,
    parse_launcher_config,
    render_launcher_config,
)

names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}", fullmatch=True)
ports = st.integers(1, 65535)
service_ports = ports.filter(lambda p: p != 53)
ids = st.integers(1, 2**32 - 2)
text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"))


@st.composite
def unit_networks(draw: st.DrawFn) -> tuple[Any, int, Any]:
    """A unit address, its prefix, and a gateway inside its network (or, for IPv6, a
    link-local one)."""
    version: Literal[4, 6] = draw(st.sampled_from([4, 6]))
    unit = draw(st.ip_addresses(v=version))
    assume(not (unit.is_unspecified or unit.is_multicast or unit.is_loopback))
    prefix = draw(st.integers(0, unit.max_prefixlen - 1))
    network = ipaddress.ip_interface(f"{unit}/{prefix}").network
    edges = (network.network_address, network.broadcast_address)
    assume(version == 6 or prefix >= 31 or unit not in edges)
    if version == 6 and draw(st.booleans()):
        gateway = draw(st.ip_addresses(network="fe80::/10"))
    else:
        gateway = network[draw(st.integers(0, network.num_addresses - 1))]
    assume(gateway != unit)
    assume(version == 6 or prefix >= 31 or gateway not in edges)
    return unit, prefix, gateway


@st.composite
def configs(draw: st.DrawFn) -> LauncherConfig:
    unit, prefix, gateway = draw(unit_networks())
    designated = draw(ports)
    edge = draw(st.none() | service_ports.filter(lambda p: p != designated))
    owner = draw(st.none() | service_ports.filter(lambda p: p not in (edge, designated)))
    return LauncherConfig(
        netns_name=draw(names),
        unit_ip=unit,
        unit_cidr=prefix,
        public_interface=draw(names),
        public_gateway=gateway,
        mode=draw(st.sampled_from(["dedicated", "macvlan", "ipvlan"])),
        designated_port=designated,
        edge_port=edge,
        owner_port=owner,
        catchall_object_path="/" + draw(text),
        valis_command=("/" + draw(text), *draw(st.lists(text, max_size=3))),
        valis_uid=draw(st.none() | ids),
        valis_gid=draw(st.none() | ids),
    )


EXAMPLE_TOML = """\
netns-name = "valis"
unit-ip = "203.0.113.10"
unit-cidr = 25
public-interface = "ens7"
public-gateway = "203.0.113.1"
mode = "dedicated"
designated-port = 53
catchall-object-path = "/opt/valis/lib/sk-lookup-catchall.bpf.o"
valis-command = ["/opt/valis/bin/valis"]
"""


def example_table() -> dict[str, object]:
    return {
        "netns-name": "valis",
        "unit-ip": "203.0.113.10",
        "unit-cidr": 25,
        "public-interface": "ens7",
        "public-gateway": "203.0.113.1",
        "mode": "dedicated",
        "designated-port": 53,
        "catchall-object-path": "/opt/valis/lib/sk-lookup-catchall.bpf.o",
        "valis-command": ["/opt/valis/bin/valis"],
    }


@given(configs())
def test_a_rendered_config_parses_back_to_the_same_config(cfg: LauncherConfig) -> None:
    assert parse_launcher_config(render_launcher_config(cfg)) == cfg


@settings(max_examples=scaled(0.5))
@given(configs())
def test_rendering_is_canonical(cfg: LauncherConfig) -> None:
    text = render_launcher_config(cfg)
    assert render_launcher_config(parse_launcher_config(text)) == text


@given(configs())
def test_the_accept_set_holds_only_dns_the_owner_port_and_the_edge_port(
    cfg: LauncherConfig,
) -> None:
    accept = firewall_accept_set(cfg)
    assert {("udp", 53), ("tcp", 53)} <= accept
    allowed = {53} | {p for p in (cfg.owner_port, cfg.edge_port) if p is not None}
    assert {port for _, port in accept} <= allowed
    assert {proto for proto, port in accept if port != 53} <= {"tcp"}
    if cfg.owner_port is not None:
        assert ("tcp", cfg.owner_port) in accept
    if cfg.edge_port is not None:
        assert ("tcp", cfg.edge_port) in accept


@settings(max_examples=scaled(0.5))
@given(cfg=configs(), designated=ports)
def test_naming_a_designated_port_alone_never_opens_it(
    cfg: LauncherConfig, designated: int
) -> None:
    bare = attrs.evolve(cfg, designated_port=designated, edge_port=None, owner_port=None)
    assert firewall_accept_set(bare) == {("udp", 53), ("tcp", 53)}


def test_the_contract_example_parses() -> None:
    cfg = parse_launcher_config(EXAMPLE_TOML)
    assert cfg.unit_ip == ipaddress.IPv4Address("203.0.113.10")
    assert cfg.unit_network == ipaddress.IPv4Network("203.0.113.0/25")
    assert cfg.valis_command == ("/opt/valis/bin/valis",)
    assert cfg.edge_port is None
    assert cfg.owner_port is None
    assert DEFAULT_PATH.as_posix() == "/etc/fulcrum/launcher.toml"


def test_the_edge_port_is_elected_by_naming_it() -> None:
    cfg = parse_launcher_config(EXAMPLE_TOML + "edge-port = 443\nowner-port = 853\n")
    assert firewall_accept_set(cfg) == {("udp", 53), ("tcp", 53), ("tcp", 443), ("tcp", 853)}


# Each entry replaces one field of the example with a value the config must refuse.
INVALID: list[tuple[str, object]] = [
    ("netns-name", ""),
    ("netns-name", "a/b"),
    ("netns-name", "x" * 16),
    ("netns-name", ".hidden"),
    ("netns-name", 5),
    ("unit-ip", "203.0.113.300"),
    ("unit-ip", "unit.example"),
    ("unit-ip", "0.0.0.0"),
    ("unit-ip", "224.0.0.1"),
    ("unit-ip", "127.0.0.1"),
    ("unit-ip", "203.0.113.0"),
    ("unit-ip", "203.0.113.127"),
    ("unit-ip", "fe80::1%eth0"),
    ("unit-ip", 3405803786),
    ("unit-cidr", 33),
    ("unit-cidr", -1),
    ("unit-cidr", "25"),
    ("unit-cidr", True),
    ("public-interface", "ens 7"),
    ("public-interface", "a-very-long-ifname"),
    ("public-interface", ""),
    ("public-gateway", "203.0.113.129"),
    ("public-gateway", "203.0.113.10"),
    ("public-gateway", "203.0.113.0"),
    ("public-gateway", "203.0.113.127"),
    ("public-gateway", "2001:db8::1"),
    ("public-gateway", "gateway"),
    ("mode", "bridge"),
    ("mode", "Dedicated"),
    ("mode", 1),
    ("designated-port", 0),
    ("designated-port", 65536),
    ("designated-port", "53"),
    ("designated-port", 53.0),
    ("edge-port", 53),
    ("edge-port", 0),
    ("edge-port", 70000),
    ("owner-port", 53),
    ("owner-port", -5),
    ("catchall-object-path", "opt/valis/lib/sk.bpf.o"),
    ("catchall-object-path", ""),
    ("catchall-object-path", ["/x"]),
    ("valis-command", []),
    ("valis-command", ["valis"]),
    ("valis-command", "/opt/valis/bin/valis"),
    ("valis-command", ["/opt/valis/bin/valis", 3]),
    ("valis-command", ["/opt/valis/bin/valis\0"]),
    ("valis-uid", -1),
    ("valis-uid", 0),
    ("valis-uid", 2**32 - 1),
    ("valis-uid", "valis"),
    ("valis-gid", -1),
    ("valis-gid", 0),
]


@pytest.mark.parametrize(("field", "value"), INVALID)
def test_each_invalid_field_is_refused_naming_the_field(field: str, value: object) -> None:
    table = {**example_table(), field: value}
    with pytest.raises(LauncherConfigError) as caught:
        launcher_config_from_mapping(table)
    assert caught.value.field == field
    assert f"{field}:" in str(caught.value)


def test_the_owner_port_may_not_share_the_edge_port() -> None:
    table = {**example_table(), "edge-port": 443, "owner-port": 443}
    with pytest.raises(LauncherConfigError, match="owner-port: 443 is also the edge-port"):
        launcher_config_from_mapping(table)


@settings(max_examples=scaled(0.5))
@given(unit=unit_networks(), outside=st.ip_addresses())
def test_a_gateway_outside_the_unit_network_is_refused(
    unit: tuple[Any, int, Any], outside: Any
) -> None:
    address, prefix, _ = unit
    assume(outside not in ipaddress.ip_interface(f"{address}/{prefix}").network)
    assume(not (outside.version == 6 and outside.is_link_local))
    table = {
        **example_table(),
        "unit-ip": str(address),
        "unit-cidr": prefix,
        "public-gateway": str(outside),
    }
    with pytest.raises(LauncherConfigError) as caught:
        launcher_config_from_mapping(table)
    assert caught.value.field == "public-gateway"


def test_a_single_address_network_has_no_room_for_a_gateway() -> None:
    table = {**example_table(), "unit-cidr": 32}
    with pytest.raises(LauncherConfigError) as caught:
        launcher_config_from_mapping(table)
    assert caught.value.field == "public-gateway"


def test_a_point_to_point_pair_uses_both_addresses() -> None:
    table = {
        **example_table(),
        "unit-ip": "203.0.113.10",
        "unit-cidr": 31,
        "public-gateway": "203.0.113.11",
    }
    assert launcher_config_from_mapping(table).unit_cidr == 31


def test_an_ipv6_unit_with_its_gateway_is_accepted() -> None:
    table = {
        **example_table(),
        "unit-ip": "2001:DB8::10",
        "unit-cidr": 64,
        "public-gateway": "2001:db8::1",
    }
    cfg = launcher_config_from_mapping(table)
    assert "unit-ip = \"2001:db8::10\"" in render_launcher_config(cfg)


def test_an_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(LauncherConfigError, match=r"unknown key.*listen-port"):
        parse_launcher_config(EXAMPLE_TOML + "listen-port = 8053\n")


def test_a_missing_key_is_refused_naming_it() -> None:
    text = "\n".join(line for line in EXAMPLE_TOML.splitlines() if "mode" not in line)
    with pytest.raises(LauncherConfigError, match=r"missing required key.*mode"):
        parse_launcher_config(text)


def test_a_table_in_place_of_a_value_is_refused_naming_the_field() -> None:
    text = EXAMPLE_TOML.replace('mode = "dedicated"\n', "") + "[mode]\nkind = 1\n"
    with pytest.raises(LauncherConfigError) as caught:
        parse_launcher_config(text)
    assert caught.value.field == "mode"


def test_malformed_toml_is_an_operator_error() -> None:
    with pytest.raises(LauncherConfigError, match="not valid TOML"):
        parse_launcher_config("netns-name = \n")
    assert issubclass(LauncherConfigError, ValisError)


def test_a_config_built_directly_is_checked_the_same_way() -> None:
    cfg = parse_launcher_config(EXAMPLE_TOML)
    with pytest.raises(LauncherConfigError) as caught:
        attrs.evolve(cfg, edge_port=53)
    assert caught.value.field == "edge-port"


def test_every_field_has_an_attribute() -> None:
    cfg = parse_launcher_config(EXAMPLE_TOML)
    for attr in FIELDS.values():
        assert hasattr(cfg, attr)


def test_an_ipv6_unit_may_route_through_its_routers_link_local_address() -> None:
    table = {**example_table(), "unit-ip": "2001:db8:5::10", "unit-cidr": 64,
             "public-gateway": "fe80::1"}
    cfg = launcher_config_from_mapping(table)
    assert cfg.public_gateway == ipaddress.IPv6Address("fe80::1")
    assert parse_launcher_config(render_launcher_config(cfg)) == cfg


def test_a_link_local_gateway_does_not_serve_an_ipv4_unit() -> None:
    with pytest.raises(LauncherConfigError, match="fe80::1 is IPv6 but unit-ip"):
        launcher_config_from_mapping({**example_table(), "public-gateway": "fe80::1"})


@given(
    uid=st.integers(0, 70000),
    mode=st.integers(0, 0o7777),
    reader=st.integers(0, 70000),
)
def test_the_launcher_trusts_a_config_only_its_reader_or_root_owns_and_nobody_else_writes(
    uid: int, mode: int, reader: int
) -> None:
    trusted = uid in (0, reader) and not mode & 0o022
    problem = config_file_problem("/etc/fulcrum/launcher.toml", uid, mode, reader_uid=reader)
    assert (problem is None) == trusted
    if problem is not None:
        assert f"owned by uid {uid} with mode {mode:04o}" in problem


def test_a_0644_config_owned_by_the_run_account_is_not_trusted_by_root() -> None:
    assert config_file_problem("/etc/fulcrum/launcher.toml", 0, 0o644) is None
    assert config_file_problem("/etc/fulcrum/launcher.toml", 998, 0o644) is not None

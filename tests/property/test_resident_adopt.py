"""Properties of descriptor adoption: the resident takes a descriptor only for what the
kernel says it is, and never covers a served port it was not handed."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.serve.listen import PRIVILEGED_PORT_LIMIT
from valis_core.launch import LaunchRecord
from valis_core.resident.adopt import (
    EXPECTED,
    AdoptionError,
    Kind,
    Probe,
    Role,
    all_handed_down,
    handed_down,
    judge,
)

hosts = st.sampled_from(["127.0.0.1", "203.0.113.10", "::1", "2001:db8::53"])
ports = st.integers(1, 65535)
kinds = st.sampled_from(list(Kind))


def good_probe(fd: int, role: Role, host: str, port: int) -> Probe:
    return Probe(fd=fd, kind=EXPECTED[role], host=host, port=port)


@st.composite
def launches(draw: st.DrawFn) -> tuple[LaunchRecord, dict[int, Probe]]:
    """A record with a well-formed DNS pair (and maybe owner/edge) and served ports all
    bound by one of its descriptors."""
    fds = draw(st.lists(st.integers(3, 1000), min_size=7, max_size=7, unique=True))
    roles = [Role.DNS_UDP, Role.DNS_TCP, Role.OWNER, Role.EDGE]
    present = [True, True, draw(st.booleans()), draw(st.booleans())]
    probes: dict[int, Probe] = {}
    fields: dict[str, Any] = {}
    names = {Role.DNS_UDP: "dns_udp_fd", Role.DNS_TCP: "dns_tcp_fd", Role.OWNER: "owner_fd",
             Role.EDGE: "edge_tcp_fd"}
    for fd, role, here in zip(fds[:4], roles, present, strict=True):
        if here:
            probes[fd] = good_probe(fd, role, draw(hosts), draw(ports))
            fields[names[role]] = fd
    # The DNS workers' other UDP sockets, on the first one's address.
    first = fields.pop("dns_udp_fd")
    more = fds[4:4 + draw(st.integers(0, 3))]
    for fd in more:
        probes[fd] = attrs.evolve(probes[first], fd=fd)
    fields["dns_udp_fds"] = (first, *more)
    bound = sorted({probe.port for probe in probes.values() if probe.port is not None})
    served = draw(st.frozensets(st.sampled_from(bound)))
    return LaunchRecord(resident=True, ports=served, **fields), probes


@given(launches())
def test_descriptors_that_are_what_their_flags_say_are_adopted(
    launch: tuple[LaunchRecord, dict[int, Probe]],
) -> None:
    record, probes = launch
    adoption = judge(record, probes)
    assert {item.fd for item in adoption.all()} == set(all_handed_down(record))
    assert tuple(item.fd for item in adoption.dns_udps) == record.dns_udp_fds
    for item in adoption.all():
        assert probes[item.fd].kind is EXPECTED[item.role]
        assert item.port == probes[item.fd].port


@given(launches(), st.data())
def test_a_descriptor_of_the_wrong_kind_is_refused_naming_flag_and_fd(
    launch: tuple[LaunchRecord, dict[int, Probe]], data: st.DataObject
) -> None:
    record, probes = launch
    roles = handed_down(record)
    role = data.draw(st.sampled_from(sorted(roles, key=lambda r: r.value)))
    fd = roles[role]
    wrong = data.draw(kinds.filter(lambda kind: kind is not EXPECTED[role]))
    probes[fd] = Probe(fd=fd, kind=wrong, host=probes[fd].host, port=probes[fd].port)
    with pytest.raises(AdoptionError) as caught:
        judge(record, probes)
    assert f"{role.value} {fd} is {wrong.value}" in str(caught.value)


@given(launches(), st.integers(1, PRIVILEGED_PORT_LIMIT - 1))
def test_a_served_privileged_port_without_a_descriptor_is_refused_never_bound(
    launch: tuple[LaunchRecord, dict[int, Probe]], port: int
) -> None:
    record, probes = launch
    if any(probe.port == port for probe in probes.values()):
        return
    served = LaunchRecord(
        resident=True,
        ports=record.ports | {port},
        dns_udp_fds=record.dns_udp_fds,
        dns_tcp_fd=record.dns_tcp_fd,
        owner_fd=record.owner_fd,
        edge_tcp_fd=record.edge_tcp_fd,
    )
    with pytest.raises(AdoptionError, match=f"port {port} is served .*never binds a privileged"):
        judge(served, probes)


def test_a_served_unprivileged_port_without_a_descriptor_is_refused_too() -> None:
    probes = {3: good_probe(3, Role.DNS_UDP, "127.0.0.1", 5353),
              4: good_probe(4, Role.DNS_TCP, "127.0.0.1", 5353)}
    record = LaunchRecord(resident=True, ports=frozenset({5353, 8443}), dns_udp_fds=(3,),
                          dns_tcp_fd=4)
    with pytest.raises(AdoptionError, match=r"port 8443 .*binds no port itself"):
        judge(record, probes)


def test_one_descriptor_handed_down_under_two_flags_is_refused() -> None:
    probes = {3: good_probe(3, Role.DNS_TCP, "127.0.0.1", 53)}
    record = LaunchRecord(resident=True, dns_tcp_fd=3, owner_fd=3)
    with pytest.raises(AdoptionError, match="descriptor 3 is handed down as both"):
        judge(record, probes)


@pytest.mark.parametrize("present", ["dns_udp_fds", "dns_tcp_fd", None])
def test_dns_is_served_only_over_a_whole_pair(present: str | None) -> None:
    probes = {3: good_probe(3, Role.DNS_UDP, "127.0.0.1", 5353),
              4: good_probe(4, Role.DNS_TCP, "127.0.0.1", 5353)}
    fields: dict[str, Any] = {}
    if present is not None:
        fields[present] = (3,) if present == "dns_udp_fds" else 4
    with pytest.raises(AdoptionError, match="no DNS descriptor pair"):
        judge(LaunchRecord(resident=True, **fields), probes)


def test_a_socket_bound_to_no_port_is_refused() -> None:
    probes = {3: Probe(fd=3, kind=Kind.UDP, host="0.0.0.0", port=0),
              4: good_probe(4, Role.DNS_TCP, "127.0.0.1", 5353)}
    with pytest.raises(AdoptionError, match="--dns-udp-fd 3 is a UDP socket bound to no port"):
        judge(LaunchRecord(resident=True, dns_udp_fds=(3,), dns_tcp_fd=4), probes)


@given(
    st.dictionaries(
        st.sampled_from(["dns_udp_fd", "dns_tcp_fd", "owner_fd", "edge_tcp_fd"]),
        st.integers(3, 8),
    ),
    st.frozensets(st.integers(1, 65535), max_size=4),
    st.dictionaries(
        st.integers(3, 8),
        st.builds(Probe, fd=st.just(0), kind=kinds, host=st.none() | hosts,
                  port=st.none() | st.integers(0, 65535)),
    ),
)
def test_judging_any_probes_either_adopts_or_refuses_with_an_adoption_error(
    fields: dict[str, Any], served: frozenset[int], drawn: dict[int, Probe]
) -> None:
    if "dns_udp_fd" in fields:
        fields["dns_udp_fds"] = (fields.pop("dns_udp_fd"),)
    record = LaunchRecord(resident=True, ports=served, **fields)
    probes = {fd: Probe(fd=fd, kind=Kind.NOT_OPEN) for fd in range(3, 9)}
    probes.update({fd: Probe(fd=fd, kind=p.kind, host=p.host, port=p.port)
                   for fd, p in drawn.items()})
    try:
        adoption = judge(record, probes)
    except AdoptionError:
        return
    assert all(probes[item.fd].kind is EXPECTED[item.role] for item in adoption.all())
    assert served <= {item.port for item in adoption.all()}


@given(launches(), st.frozensets(st.integers(1, 65535), max_size=3))
def test_with_a_control_socket_a_served_port_without_a_descriptor_is_left_to_the_push(
    launch: tuple[LaunchRecord, dict[int, Probe]], extra: frozenset[int]
) -> None:
    record, probes = launch
    bound = {probe.port for probe in probes.values()}
    pushed = LaunchRecord(
        resident=True,
        control_socket="/run/fulcrum/valis.sock",
        ports=record.ports | extra,
        dns_udp_fds=record.dns_udp_fds,
        dns_tcp_fd=record.dns_tcp_fd,
        owner_fd=record.owner_fd,
        edge_tcp_fd=record.edge_tcp_fd,
    )
    adoption = judge(pushed, probes)
    assert adoption.to_push == extra - bound
    # every served port is covered by a descriptor or left to the push, never bound here
    assert pushed.ports <= {item.port for item in adoption.all()} | adoption.to_push


def test_without_the_dns_pair_nothing_is_left_to_the_push() -> None:
    # The push carries the edge's TCP ports; the DNS port is never one of them.
    record = LaunchRecord(resident=True, control_socket="/run/fulcrum/valis.sock",
                          ports=frozenset({53, 443}))
    with pytest.raises(AdoptionError, match=r"port 53 is served .*never binds a privileged"):
        judge(record, {})


def test_a_workers_udp_socket_on_another_address_is_refused() -> None:
    probes = {3: good_probe(3, Role.DNS_UDP, "192.0.2.1", 53),
              5: good_probe(5, Role.DNS_UDP, "192.0.2.1", 5353),
              4: good_probe(4, Role.DNS_TCP, "192.0.2.1", 53)}
    record = LaunchRecord(resident=True, ports=frozenset({53}), dns_udp_fds=(3, 5),
                          dns_tcp_fd=4)
    with pytest.raises(AdoptionError, match=r"--dns-udp-fds 5 is bound to 192.0.2.1:5353"):
        judge(record, probes)


def test_a_workers_udp_socket_that_is_no_udp_socket_is_refused() -> None:
    probes = {3: good_probe(3, Role.DNS_UDP, "192.0.2.1", 53),
              5: good_probe(5, Role.DNS_TCP, "192.0.2.1", 53),
              4: good_probe(4, Role.DNS_TCP, "192.0.2.1", 53)}
    record = LaunchRecord(resident=True, ports=frozenset({53}), dns_udp_fds=(3, 5),
                          dns_tcp_fd=4)
    with pytest.raises(AdoptionError, match=r"--dns-udp-fd 5 is a listening TCP socket"):
        judge(record, probes)


def test_a_workers_udp_socket_handed_down_as_another_role_too_is_refused() -> None:
    probes = {3: good_probe(3, Role.DNS_UDP, "192.0.2.1", 53),
              4: good_probe(4, Role.DNS_TCP, "192.0.2.1", 53)}
    record = LaunchRecord(resident=True, ports=frozenset({53}), dns_udp_fds=(3, 4),
                          dns_tcp_fd=4)
    with pytest.raises(AdoptionError, match="descriptor 4 is handed down as both"):
        judge(record, probes)

"""Descriptor adoption, decided: which inherited descriptor is which, or why none fits.

The launcher's descriptor flags say what it bound and handed down; ``--ports`` says
what this node serves. The resident never trusts a flag for what a descriptor is: it
asks the kernel (``descriptors.probe_descriptor``) and this module judges the answers.
Judging is pure — a ``Probe`` per descriptor in, an ``Adoption`` or an
``AdoptionError`` out — so every combination can be tested without a socket.

The rules, in the order they are applied:

1. each flag's descriptor must be what the flag says: ``--dns-udp-fd`` a bound UDP
   socket, ``--dns-tcp-fd``, ``--owner-fd`` and ``--edge-tcp-fd`` listening TCP
   sockets (IPv4 or IPv6); no descriptor may be handed down under two flags (or twice
   under one); with several UDP sockets (``--dns-udp-fds``: one per DNS worker) each is
   judged as the first and must be bound to the first one's address and port;
2. every served port must be satisfied: by a descriptor bound to it, or — when the
   launch names fulcrum's control socket and the DNS pair was handed down — by a push
   (``Adoption.to_push``: the resident mints its own listening socket on an unprivileged
   ephemeral port, and fulcrum's steer brings the port's traffic to it; the push stage
   fails closed when fulcrum refuses).
   The resident never binds a served port itself: for a privileged port that is the
   contract's first fail-closed invariant (binding :53 is the launcher's act, never
   valis's); without a control socket the launcher must hand every port down;
3. DNS is served over a pair: a UDP descriptor without its TCP twin (or the reverse),
   or no pair at all, stops the boot.

The pair is adopted on whatever port the kernel says it is bound to (the launcher's
``designated-port``, 53 by default). A port the launcher's firewall drops never stops
the boot; ``adopted_dns_reachability`` says so, for the log and the status.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from valis_core.dns.serve.listen import PRIVILEGED_PORT_LIMIT
from valis_core.errors import ValisError
from valis_core.launch import LaunchRecord
from valis_core.reachability import DnsReachability, dns_reachability, firewall_accepts

#: Ports below this are privileged: only the launcher binds them.


class Kind(enum.Enum):
    """What the kernel says a descriptor is."""

    NOT_OPEN = "not an open descriptor"
    NOT_SOCKET = "not a socket"
    UDP = "a UDP socket"
    TCP_LISTENING = "a listening TCP socket"
    TCP_NOT_LISTENING = "a TCP socket that is not listening"
    OTHER_SOCKET = "a socket of another family or type"


class Role(enum.Enum):
    """What a launch flag says its descriptor is for; the value is the flag."""

    DNS_UDP = "--dns-udp-fd"
    DNS_TCP = "--dns-tcp-fd"
    OWNER = "--owner-fd"
    EDGE = "--edge-tcp-fd"


#: The kind each role's descriptor must be.
EXPECTED: Mapping[Role, Kind] = {
    Role.DNS_UDP: Kind.UDP,
    Role.DNS_TCP: Kind.TCP_LISTENING,
    Role.OWNER: Kind.TCP_LISTENING,
    Role.EDGE: Kind.TCP_LISTENING,
}

_FIELDS: Mapping[Role, str] = {
    Role.DNS_UDP: "dns_udp_fd",
    Role.DNS_TCP: "dns_tcp_fd",
    Role.OWNER: "owner_fd",
    Role.EDGE: "edge_tcp_fd",
}


@attrs.frozen
class Probe:
    """The kernel's answer about one descriptor.

    ``host`` and ``port`` are its local address (``getsockname``) for an IP socket, and
    ``None`` otherwise; ``detail`` says more about a descriptor of the wrong kind (the
    file type, or the socket's family and type) for the refusal message.
    """

    fd: int
    kind: Kind
    host: str | None = None
    port: int | None = None
    detail: str = ""

    def describe(self) -> str:
        text = self.kind.value
        if self.port is not None:
            text += f" bound to {format_address(self.host, self.port)}"
        if self.detail:
            text += f" ({self.detail})"
        return text


@attrs.frozen
class Adopted:
    """A descriptor judged fit for its role, with the address the kernel reported."""

    role: Role
    fd: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)


@attrs.frozen
class Adoption:
    """Every descriptor the resident takes over, by role."""

    dns_udp: Adopted
    dns_tcp: Adopted
    owner: Adopted | None = None
    edge: Adopted | None = None
    #: served ports no descriptor is bound to: satisfied only by a successful push
    to_push: frozenset[int] = frozenset()
    #: the DNS workers' UDP sockets after the first, on its address (``--dns-udp-fds``)
    dns_udp_more: tuple[Adopted, ...] = ()

    @property
    def dns_udps(self) -> tuple[Adopted, ...]:
        """Every DNS UDP socket, one per worker, the first first."""
        return (self.dns_udp, *self.dns_udp_more)

    def all(self) -> tuple[Adopted, ...]:
        found = (self.dns_udp, self.dns_tcp, self.owner, self.edge, *self.dns_udp_more)
        return tuple(item for item in found if item is not None)


class AdoptionError(ValisError):
    """An inherited descriptor (or the lack of one) that stops the boot."""


def format_address(host: str | None, port: int) -> str:
    if host is not None and ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def handed_down(record: LaunchRecord) -> dict[Role, int]:
    """The descriptors the launch record names, by role."""
    found: dict[Role, int] = {}
    for role, field in _FIELDS.items():
        fd = getattr(record, field)
        if fd is not None:
            found[role] = fd
    return found


def more_udp(record: LaunchRecord) -> tuple[int, ...]:
    """The DNS workers' UDP descriptors after the first (``--dns-udp-fds``)."""
    return record.dns_udp_fds[1:]


def all_handed_down(record: LaunchRecord) -> tuple[int, ...]:
    """Every descriptor the launch record names: what the resident asks the kernel about."""
    return (*handed_down(record).values(), *more_udp(record))


def judge(record: LaunchRecord, probes: Mapping[int, Probe]) -> Adoption:
    """Decide the adoption for ``record`` given the kernel's answer for each descriptor.

    ``probes`` must hold a probe for every descriptor ``all_handed_down(record)`` names.
    """
    roles = handed_down(record)
    named = [*roles.items(), *((Role.DNS_UDP, fd) for fd in more_udp(record))]
    by_fd: dict[int, Role] = {}
    for role, fd in named:
        if fd in by_fd:
            raise AdoptionError(
                f"descriptor {fd} is handed down as both {by_fd[fd].value} and {role.value}; "
                "the launcher must hand each role its own descriptor"
            )
        by_fd[fd] = role

    adopted: dict[Role, Adopted] = {
        role: _judge_one(role, fd, probes[fd]) for role, fd in roles.items()
    }
    more = tuple(_judge_one(Role.DNS_UDP, fd, probes[fd]) for fd in more_udp(record))
    for item in more:
        first = adopted[Role.DNS_UDP]
        if (item.host, item.port) != (first.host, first.port):
            raise AdoptionError(
                f"--dns-udp-fds {item.fd} is bound to {item.address}, not to "
                f"{first.address} as the first DNS UDP socket is; the DNS workers' sockets "
                "share one address — the launcher handed down the wrong descriptor"
            )

    bound = {item.port for item in adopted.values()}
    unbound = record.ports - bound
    udp, tcp = adopted.get(Role.DNS_UDP), adopted.get(Role.DNS_TCP)
    # The push carries the edge's TCP ports, never DNS: without the inherited pair a
    # port left unbound may be the DNS port, so nothing is left to the push then.
    pushable = record.control_socket is not None and udp is not None and tcp is not None
    no_push = "" if record.control_socket is not None else " and no --control-socket to push to"
    for port in sorted(unbound) if not pushable else ():
        if port < PRIVILEGED_PORT_LIMIT:
            raise AdoptionError(
                f"port {port} is served (--ports) but no descriptor is bound to it{no_push}; "
                "the resident never binds a privileged port itself — the launcher must bind "
                "it and hand it down"
            )
        raise AdoptionError(
            f"port {port} is served (--ports) but no descriptor is bound to it{no_push}; "
            "the resident binds no port itself — the launcher must hand it down"
        )

    if udp is None or tcp is None:
        missing = [role.value for role in (Role.DNS_UDP, Role.DNS_TCP) if role not in adopted]
        raise AdoptionError(
            f"no DNS descriptor pair: {' and '.join(missing)} not handed down; the resident "
            "serves DNS over UDP and TCP only on descriptors the launcher binds"
        )
    return Adoption(
        dns_udp=udp, dns_tcp=tcp, owner=adopted.get(Role.OWNER), edge=adopted.get(Role.EDGE),
        to_push=frozenset(unbound), dns_udp_more=more,
    )


def _judge_one(role: Role, fd: int, probe: Probe) -> Adopted:
    expected = EXPECTED[role]
    if probe.kind is not expected or probe.port is None or probe.host is None:
        raise AdoptionError(
            f"{role.value} {fd} is {probe.describe()}, not {expected.value}; "
            "the launcher handed down the wrong descriptor — check its config"
        )
    if probe.port == 0:
        raise AdoptionError(
            f"{role.value} {fd} is {expected.value} bound to no port; "
            "the launcher must bind it before handing it down"
        )
    return Adopted(role=role, fd=fd, host=probe.host, port=probe.port)


def adopted_dns_reachability(record: LaunchRecord, adoption: Adoption) -> DnsReachability | None:
    """Whether the adopted DNS pair is reachable through fulcrum's firewall; None when the
    resident was not launched behind one.

    The resident cannot read the firewall, but its accept set follows from the launch:
    fulcrum passes ``--control-socket`` on every launch, and opens the owner and edge
    ports exactly when it hands their descriptors down. A launch without
    ``--control-socket`` (``valis demo``, a test harness) has no launcher firewall.
    """
    if record.control_socket is None:
        return None
    accepts = firewall_accepts(
        owner_port=adoption.owner.port if adoption.owner is not None else None,
        edge_port=adoption.edge.port if adoption.edge is not None else None,
    )
    served = frozenset({("udp", adoption.dns_udp.port), ("tcp", adoption.dns_tcp.port)})
    return dns_reachability(served, accepts)

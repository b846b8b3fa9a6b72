"""Whether the DNS the unit serves can be reached from outside, and if not, why.

fulcrum's default-deny firewall accepts a fixed, short set (contract §7): DNS on :53 over
UDP and TCP always, the owner port when it is opened, the edge port when one is named.
``designated-port`` is where the DNS pair is bound; it never enters that set. So a unit
whose designated port is not 53 serves behind a dropped port, and the contract says
nothing on the node reports it. This module is the one judgement of that, so
``fulcrum config verify``, ``valis assess``, fulcrum's log and the resident's status all
say the same thing in the same words.

Pure: ports in, a verdict out.
"""

from __future__ import annotations

import attrs

DNS_PORT = 53

#: A (protocol, port) pair: ``("udp", 53)``.
Endpoint = tuple[str, int]


def firewall_accepts(*, owner_port: int | None, edge_port: int | None) -> frozenset[Endpoint]:
    """The (protocol, port) pairs fulcrum's firewall accepts, beyond loopback and
    established/related traffic: DNS on :53, the owner port when opened, the edge port
    when elected. The designated port has no say in it."""
    accept = {("udp", DNS_PORT), ("tcp", DNS_PORT)}
    if owner_port is not None:
        accept.add(("tcp", owner_port))
    if edge_port is not None:
        accept.add(("tcp", edge_port))
    return frozenset(accept)


def dns_endpoints(port: int) -> frozenset[Endpoint]:
    """The DNS pair on ``port``: UDP and TCP."""
    return frozenset({("udp", port), ("tcp", port)})


def render_endpoints(endpoints: frozenset[Endpoint]) -> str:
    """``udp/53, tcp/53, tcp/8053``: by port, then UDP before TCP."""
    ordered = sorted(endpoints, key=lambda item: (item[1], item[0] != "udp", item[0]))
    return ", ".join(f"{proto}/{port}" for proto, port in ordered)


@attrs.frozen
class DnsReachability:
    """The served DNS endpoints against the firewall's accept set."""

    served: frozenset[Endpoint]
    accepts: frozenset[Endpoint]

    @property
    def dropped(self) -> frozenset[Endpoint]:
        """Served endpoints the firewall drops."""
        return self.served - self.accepts

    @property
    def reachable(self) -> bool:
        return not self.dropped

    @property
    def problem(self) -> str | None:
        """One line an operator can act on, or None when every served endpoint is accepted."""
        dropped = self.dropped
        if not dropped:
            return None
        ports = sorted({port for _, port in dropped})
        named = ", ".join(str(port) for port in ports)
        return (
            f"designated-port {named} is not in the firewall's accept set "
            f"({render_endpoints(self.accepts)}): {render_endpoints(dropped)} "
            "dropped, so the resident serves DNS behind a dropped port and nothing outside "
            f"the unit gets an answer; set designated-port = {DNS_PORT} (naming a port there "
            "never opens it)"
        )


def dns_reachability(served: frozenset[Endpoint], accepts: frozenset[Endpoint]) -> DnsReachability:
    """Judge the DNS endpoints ``served`` against the firewall's ``accepts``."""
    return DnsReachability(served=frozenset(served), accepts=frozenset(accepts))

"""``valis assess --json``: the clauses and, when an interface was named, the public
network derived from it, as one JSON document (``valis_core.documents``) in the order a
person reads it (``ok`` first), one-space indent."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from valis_core.documents import Document
from valis_core.errors import ValisError
from valis_core.ops.assessment import Clause
from valis_core.ops.public_network import PublicNetwork


@attrs.frozen
class PublicNetworkReport:
    """What the launcher config's unit-ip, unit-cidr and public-gateway should say."""

    interface: str
    address: str
    prefix: int
    gateway: str


@attrs.frozen
class AssessReport:
    """Whether every clause holds, and each clause."""

    ok: bool
    clauses: tuple[Clause, ...]


@attrs.frozen
class AssessNetworkReport:
    """As ``AssessReport``, with the public network of the interface named (null when it
    gave none)."""

    ok: bool
    clauses: tuple[Clause, ...]
    public_network: PublicNetworkReport | None


def _document(kind: type[object]) -> Document[object]:
    return Document(
        kind=kind, name="valis assess --json", error=ValisError,
        remedy="this is valis assess's own output", indent=1, sort_keys=False,
    )


REPORT = _document(AssessReport)
NETWORK_REPORT = _document(AssessNetworkReport)


def render_report(
    clauses: Sequence[Clause], network: PublicNetwork | None, *, interface_named: bool
) -> str:
    """The report ``valis assess --json`` prints."""
    ok = all(clause.ok for clause in clauses)
    if not interface_named:
        return REPORT.render(AssessReport(ok, tuple(clauses))).decode("ascii")
    derived = None if network is None else PublicNetworkReport(
        network.interface, str(network.address), network.prefix, str(network.gateway)
    )
    return NETWORK_REPORT.render(AssessNetworkReport(ok, tuple(clauses), derived)).decode("ascii")

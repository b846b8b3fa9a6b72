"""The fabric's JSON answers: the node's status document (what ``/status`` answers and
``valis status --json`` prints) and the public view's answer for a zone's apex SOA
(``/view/soa``, which bring-up asks for every served zone).

The resident's views make it (``NodeViews.status``, each part as the class here says,
the edge's ACME part as ``edge.stats.AcmeStatus`` and a secondary's as
``SecondaryState``); the fabric sends it through
``STATUS`` (so what leaves is what this class says); ``valis status`` reads it back through
``STATUS`` and reasons on the class. Every key may be absent — a resident older than a
key did not send it, and ``valis status`` has always read what a node sent — and then
reads as the field's default (null, false, empty); a key of the wrong type, or one this
class does not know, refuses the document naming it.
"""

from __future__ import annotations

from typing import Any

import attrs

from valis_core import documents
from valis_core.dns.transfer.secondary_progress import SecondaryState
from valis_core.documents import Document, may_be_absent
from valis_core.edge.stats import AcmeStatus
from valis_core.errors import ValisError

_ABSENT = may_be_absent()


class StatusRefused(ValisError):
    """A status document this valis does not read (a key of the wrong type, or unknown)."""


def _optional(default: Any = None) -> Any:
    return attrs.field(default=default, metadata=_ABSENT)


@attrs.frozen
class ZoneServed:
    """A served zone as the public view answers its apex SOA."""

    serial: int | None = _optional()
    rcode: str | None = _optional()


@attrs.frozen
class RateLimiting:
    """Response rate limiting as the UDP loop applies it now."""

    rate: int | None = _optional()
    slip: int | None = _optional()
    ipv4_prefix: int | None = _optional()
    ipv6_prefix: int | None = _optional()
    table_size: int | None = _optional()
    exempt: tuple[str, ...] = _optional(())


@attrs.frozen
class DnsWorker:
    """One DNS worker (one UDP socket of the DNS address) and what it served."""

    worker: int | None = _optional()
    answered: int | None = _optional()
    compiled: int | None = _optional()
    handed_to_python: int | None = _optional()
    dropped: int | None = _optional()


@attrs.frozen
class DnsStatus:
    """Where DNS is served and whether the outside can reach it (and why not)."""

    udp: str | None = _optional()
    tcp: str | None = _optional()
    behind_launcher_firewall: bool | None = _optional()
    reachable_from_outside: bool | None = _optional()
    problem: str | None = _optional()
    rate_limiting: RateLimiting | None = attrs.field(default=None, metadata=_ABSENT)
    workers: tuple[DnsWorker, ...] = _optional(())
    """The DNS workers, worker 0 first (empty from a resident older than workers)."""


@attrs.frozen
class DatabaseStatus:
    """Whether the operator-state session stands, since when, and what is served."""

    connected: bool | None = _optional()
    since: float | None = _optional()
    serving: str | None = _optional()
    following: bool | None = _optional()


@attrs.frozen
class EdgeStatus:
    """The DNS-over-HTTPS edge: its certificate's expiry and what it has served."""

    certificate_not_after: float | None = _optional()
    connections: int | None = _optional()
    handshakes_failed: int | None = _optional()
    displaced: int | None = _optional()
    responses: int | None = _optional()
    acme: AcmeStatus | None = attrs.field(default=None, metadata=_ABSENT)


@attrs.frozen
class RolloverStatus:
    """A signed zone's key rollover under way: its step, since and until when."""

    zone: str | None = _optional()
    step: str | None = _optional()
    kind: str | None = _optional()
    since: float | None = _optional()
    due: float | None = _optional()
    key_tags: tuple[int, ...] = _optional(())


def _held_only(instance: SignedZone, attribute: attrs.Attribute[Any], value: Any) -> None:
    if instance.key_held is False and value is not None:
        raise ValueError(f"{attribute.name} is given for a zone whose key is not held")


@attrs.frozen
class SignedZone:
    """A signed zone as this node signs it; one whose key it lacks says only that."""

    zone: str | None = _optional()
    key_held: bool | None = _optional()
    algorithm: int | None = attrs.field(default=None, metadata=_ABSENT, validator=_held_only)
    key_tag: int | None = attrs.field(default=None, metadata=_ABSENT, validator=_held_only)
    dnskey_tags: tuple[int, ...] | None = attrs.field(
        default=None, metadata=_ABSENT, validator=_held_only
    )
    denial: str | None = attrs.field(default=None, metadata=_ABSENT, validator=_held_only)
    signature_validity_seconds: int | None = attrs.field(
        default=None, metadata=_ABSENT, validator=_held_only
    )
    signature_refresh_seconds: int | None = attrs.field(
        default=None, metadata=_ABSENT, validator=_held_only
    )
    signatures_cached: int | None = attrs.field(
        default=None, metadata=_ABSENT, validator=_held_only
    )
    rollover_step: str | None = attrs.field(default=None, metadata=_ABSENT, validator=_held_only)


_unstructure_signed = documents.converter.gen_unstructure_attrs_fromdict(SignedZone)


def _unstructure_signed_zone(zone: SignedZone) -> dict[str, Any]:
    """A zone whose key is not held is spelled by its name and ``key_held`` alone."""
    if zone.key_held is False:
        return {"zone": zone.zone, "key_held": False}
    result: dict[str, Any] = _unstructure_signed(zone)
    return result


documents.converter.register_unstructure_hook(SignedZone, _unstructure_signed_zone)


@attrs.frozen
class NodeStatus:
    """The status document: who the node is, its fence and store, whether it is ready
    and why not, what it serves and how."""

    node: str | None = _optional()
    location: str | None = _optional()
    owner_public_key: str | None = _optional()
    generation: int | None = _optional()
    fence_generation: int | None = _optional()
    ready: bool = _optional(False)
    zones: dict[str, ZoneServed] = attrs.field(factory=dict, metadata=_ABSENT)
    zones_gone_from_database: tuple[str, ...] = _optional(())
    reload_refused: str | None = _optional()
    restart_pending: tuple[str, ...] = _optional(())
    records: int | None = _optional()
    dns: DnsStatus | None = attrs.field(default=None, metadata=_ABSENT)
    fence_holder: str | None = _optional()
    database: DatabaseStatus | None = attrs.field(default=None, metadata=_ABSENT)
    modules: tuple[str, ...] = _optional(())
    secondaries: tuple[SecondaryState, ...] | None = _optional()
    edge: EdgeStatus | None = attrs.field(default=None, metadata=_ABSENT)
    rollovers: tuple[RolloverStatus, ...] = _optional(())
    signed_zones: tuple[SignedZone, ...] = _optional(())
    started_at: float | None = _optional()
    uptime_seconds: float | None = _optional()


STATUS: Document[NodeStatus] = Document(
    kind=NodeStatus,
    name="the node's status",
    error=StatusRefused,
    remedy="is valis status older than the resident it asks? (run the one delivered with it)",
)
"""The status document as a JSON document (``valis_core.documents``): compact on the
fabric's wire, ``indent=1`` where ``valis status --json`` prints it (``render_indented``)."""


@attrs.frozen
class SoaAnswer:
    """The public view's answer for one zone's apex SOA (``/view/soa?zone=Z``)."""

    zone: str
    rcode: str
    authoritative: bool
    soa: str | None
    serial: int | None
    answered: bool
    """Answered authoritatively with the zone's SOA."""


SOA_ANSWER: Document[SoaAnswer] = Document(
    kind=SoaAnswer,
    name="the public view's answer",
    error=StatusRefused,
    remedy="the fabric answers /view/soa with the zone's apex SOA view",
)
"""``/view/soa``'s answer as a JSON document (``valis_core.documents``)."""


@attrs.frozen
class ViewRefusal:
    """Why the fabric refused a view request (HTTP 400)."""

    error: str


VIEW_REFUSAL: Document[ViewRefusal] = Document(
    kind=ViewRefusal,
    name="the fabric's refusal",
    error=StatusRefused,
    remedy="the fabric says why it refused a view in its error",
)


def render_indented(status: NodeStatus) -> bytes:
    """The document as ``valis status --json`` prints it: one-space indent, sorted keys."""
    return attrs.evolve(STATUS, indent=1).render(status)

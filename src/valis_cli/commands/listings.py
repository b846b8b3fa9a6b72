"""The JSON listings ``valis zone list --json``, ``valis zone secondary list --json`` and
``valis zone catalog list --json`` print: attrs classes through ``valis_core.documents``,
keys in the order a person reads them, one-space indent (imported by the handlers only
when ``--json`` is asked)."""

from __future__ import annotations

import attrs

from valis_core.documents import Document
from valis_core.errors import ValisError


@attrs.frozen
class ZoneListing:
    """A zone the operator-state database holds, who serves it and its serial policy."""

    zone: str
    records: int
    serial: int | None
    served_by: tuple[str, ...]
    serial_policy: str | None


@attrs.frozen
class SecondaryListing:
    """A secondary of a zone, the TSIG key it transfers with, the port its NOTIFY goes to
    (``None``: 53), and the catalog the zone has it from (``None``: its own)."""

    zone: str
    address: str
    key_name: str
    algorithm: str
    notify_port: int | None = None
    catalog: str | None = None


@attrs.frozen
class SecondaryListingWithSecret:
    """As ``SecondaryListing``, with the key's secret (``--secrets``)."""

    zone: str
    address: str
    key_name: str
    algorithm: str
    secret: str
    notify_port: int | None = None
    catalog: str | None = None


@attrs.frozen
class CatalogMemberListing:
    """A member zone of a catalog: its unique ID, its group, and the catalog it is moving
    to (``coo``; RFC 9432)."""

    zone: str
    unique_id: str
    group: str | None
    coo: str | None = None


@attrs.frozen
class CatalogListing:
    """A catalog zone and its members, in the order they joined."""

    catalog: str
    members: tuple[CatalogMemberListing, ...]


def _listing(kind: object, name: str) -> Document[object]:
    return Document(
        kind=kind, name=name, error=ValisError, remedy="this is valis's own output",
        indent=1, sort_keys=False,
    )


ZONES = _listing(tuple[ZoneListing, ...], "valis zone list --json")
SECONDARIES = _listing(tuple[SecondaryListing, ...], "valis zone secondary list --json")
SECONDARIES_WITH_SECRETS = _listing(
    tuple[SecondaryListingWithSecret, ...], "valis zone secondary list --secrets --json"
)
CATALOGS = _listing(tuple[CatalogListing, ...], "valis zone catalog list --json")

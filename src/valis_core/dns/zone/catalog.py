"""Catalog zones (RFC 9432), the producer's side: a catalog's membership as values, and
the records of the catalog zone rendered from it.

A catalog zone is an ordinary zone: its SOA, the NS ``invalid.`` every catalog carries
(RFC 9432 section 4.1), the schema version as ``version.<catalog> TXT "2"`` (section
4.2.1), and each member zone as one PTR at ``<unique-id>.zones.<catalog>`` naming the
member (section 4.1), with its optional group as ``group.<unique-id>.zones.<catalog> TXT``
(section 4.4.2). A consumer (Knot's ``catalog-role: interpret``, BIND's
``catalog-zones``) transfers the catalog and serves each member it lists.

A member on its way to another catalog carries ``coo.<unique-id>.zones.<catalog> PTR
<new catalog>`` (change of ownership, section 4.4.1): a consumer of both then takes the
member over from the new catalog, which lists it too, without dropping it first (section
5.6); the producer takes it out of the old catalog once the consumers have followed.

A member's unique ID is chosen once, when it joins, and kept while it stays: adding or
removing other members, or changing its group, never changes it (a changed ID tells a
consumer to reset the member, section 5.4). IDs are drawn by the caller (``fresh``), so
this module stays pure.

Pure: values in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import attrs

from valis_core.dns.wire.records import RecordRow
from valis_core.errors import ValisError

SCHEMA_VERSION = "2"
"""The catalog schema this producer writes (RFC 9432 section 4.2.1)."""

TTL = 0
"""Every catalog record's TTL: a catalog is transferred, never looked up through a cache
(RFC 9432 section 4: its records' TTLs have no meaning to a consumer)."""

NS_TARGET = "invalid."
SOA_RDATA = "invalid. hostmaster.invalid. 1 3600 600 2147483646 0"
"""A new catalog's SOA (its serial then raised by every change; refresh one hour, the
change itself reaching consumers by NOTIFY)."""

_UNIQUE_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_GROUP = re.compile(r'^[!#-\[\]-~]([ !#-\[\]-~]{0,253}[!#-\[\]-~])?$')
"""A group: printable ASCII without '"' or '\\', no leading or trailing space, at most
255 octets (one character-string, RFC 1035 section 3.3)."""


class CatalogError(ValisError):
    """A catalog, member, unique ID or group that cannot be used as given."""


@attrs.frozen
class Member:
    """One member zone of a catalog: its name, its unique ID, its group (or none), and
    the catalog it is moving to (``coo``; none while it stays)."""

    zone: str
    unique_id: str
    group: str | None = None
    coo: str | None = None


@attrs.frozen
class Catalog:
    """A catalog's name and its members, in the order they joined."""

    name: str
    members: tuple[Member, ...] = ()

    def member(self, zone: str) -> Member | None:
        return next((m for m in self.members if m.zone == zone), None)

    def with_member(self, zone: str, group: str | None, fresh: Callable[[], str]) -> Catalog:
        """The catalog with ``zone`` a member in ``group``: a member already keeps its
        unique ID (only its group changes); a new one takes the first ID ``fresh`` draws
        that no member holds."""
        if zone == self.name:
            raise CatalogError(f"catalog {self.name} cannot list itself as a member")
        if group is not None:
            group_text(group)
        held = self.member(zone)
        if held is not None:
            kept = attrs.evolve(held, group=group)
            return attrs.evolve(
                self, members=tuple(kept if m.zone == zone else m for m in self.members)
            )
        taken = {m.unique_id for m in self.members}
        for _ in range(64):
            drawn = unique_id(fresh())
            if drawn not in taken:
                return attrs.evolve(self, members=(*self.members, Member(zone, drawn, group)))
        raise CatalogError(f"catalog {self.name}: no unused unique ID drawn in 64 tries")

    def without_member(self, zone: str) -> Catalog:
        return attrs.evolve(self, members=tuple(m for m in self.members if m.zone != zone))

    def with_coo(self, zone: str, to: str | None) -> Catalog:
        """The catalog with its member ``zone`` moving to catalog ``to`` (``None``, or
        this catalog itself: staying after all)."""
        held = self.member(zone)
        if held is None:
            raise CatalogError(f"zone {zone} is not a member of catalog {self.name}")
        moved = attrs.evolve(held, coo=None if to == self.name else to)
        return attrs.evolve(
            self, members=tuple(moved if m.zone == zone else m for m in self.members)
        )

    def with_joining(self, joining: Member, fresh: Callable[[], str]) -> Catalog:
        """The catalog with ``joining`` (a member of another catalog, moving here) a
        member in its group: under its unique ID when no member here holds it, so its
        consumers keep the zone as it is (RFC 9432 section 5.6); under a fresh one
        otherwise. A member already here keeps its own ID and takes the group."""
        held = self.member(joining.zone)
        taken = {m.unique_id for m in self.members}
        if held is not None or joining.unique_id in taken:
            return self.with_member(joining.zone, joining.group, fresh)
        if joining.zone == self.name:
            raise CatalogError(f"catalog {self.name} cannot list itself as a member")
        kept = Member(joining.zone, joining.unique_id, joining.group)
        return attrs.evolve(self, members=(*self.members, kept))


def unique_id(text: str) -> str:
    """``text`` as a member's unique ID: one lowercase letter-digit-hyphen label."""
    if not _UNIQUE_ID.match(text):
        raise CatalogError(
            f"unique ID {text!r} is not one lowercase label of letters, digits and hyphens"
        )
    return text


def group_text(text: str) -> str:
    """``text`` as a member's group property: printable ASCII, no quote or backslash."""
    if not _GROUP.match(text):
        raise CatalogError(
            f"group {text!r} is not 1 to 255 printable ASCII characters without '\"', '\\' "
            "or spaces at either end (it names a configuration the consumers know, e.g. a "
            "Knot catalog-template or a BIND catalog-zones group)"
        )
    return text


def member_owner(catalog: str, member: Member) -> str:
    """The owner of ``member``'s PTR in ``catalog``."""
    return f"{member.unique_id}.zones.{catalog}"


def catalog_records(catalog: Catalog) -> tuple[RecordRow, ...]:
    """Every record of the catalog zone but its SOA: NS, version, then each member's PTR
    (and its group TXT, and its coo PTR) in the order the members joined."""
    name = catalog.name
    rows = [
        RecordRow(name, name, "NS", TTL, NS_TARGET),
        RecordRow(name, f"version.{name}", "TXT", TTL, f'"{SCHEMA_VERSION}"'),
    ]
    for member in catalog.members:
        owner = member_owner(name, member)
        rows.append(RecordRow(name, owner, "PTR", TTL, member.zone))
        if member.group is not None:
            rows.append(RecordRow(name, f"group.{owner}", "TXT", TTL, f'"{member.group}"'))
        if member.coo is not None:
            rows.append(RecordRow(name, f"coo.{owner}", "PTR", TTL, member.coo))
    return tuple(rows)


def soa_record(catalog: str) -> RecordRow:
    """A new catalog zone's SOA."""
    return RecordRow(catalog, catalog, "SOA", TTL, SOA_RDATA)


def record_changes(
    held: Iterable[RecordRow], catalog: Catalog
) -> tuple[tuple[RecordRow, ...], tuple[RecordRow, ...]]:
    """What makes the stored catalog zone ``held`` hold ``catalog``'s records: the rows to
    delete (as stored) and the rows to add. The SOA is kept (its serial is the journal's
    to raise); anything else the catalog does not render goes."""
    want = {_key(r): r for r in catalog_records(catalog)}
    have = {_key(r) for r in held if r.rtype != "SOA"}
    deletes = tuple(r for r in held if r.rtype != "SOA" and _key(r) not in want)
    adds = tuple(r for key, r in want.items() if key not in have)
    return deletes, adds


def _key(row: RecordRow) -> tuple[str, str, int, str]:
    return (row.owner.lower(), row.rtype, row.ttl, row.rdata)

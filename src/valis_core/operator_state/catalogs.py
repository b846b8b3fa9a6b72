"""Catalog zones in operator state (migration 0016): which zones are catalogs, their
members, and the catalog zones' records kept to match.

A catalog is an ordinary zone of the database, served, journalled, transferred (AXFR,
IXFR) and notified like any other; the rows of ``zone_catalogs`` mark it a catalog and
those of ``zone_catalog_members`` list its members. Every change of membership writes
the member rows and the catalog zone's records (rendered by
``valis_core.dns.zone.catalog``) in one transaction holding the catalog zone's row lock
(the lock imports and node writes of a zone take), so the change journal records the
catalog's change, its commit-time seal raises the catalog's serial, and the resident
NOTIFYs the catalog's secondaries, which transfer the difference.

Deleting a member's zone deletes its membership, and a trigger removes its records from
the catalog (migration 0016); ``valis zone delete`` of a catalog deletes the catalog. A
member moving to another catalog (``move_member``, migration 0021) is listed in both, the
old one naming the new in its ``coo`` property, until it is removed from the old one.
"""

from __future__ import annotations

import enum
import secrets
from typing import Any

import psycopg

from valis_core.dns.zone.catalog import (
    Catalog,
    CatalogError,
    Member,
    catalog_records,
    record_changes,
    soa_record,
)
from valis_core.operator_state.record_writes import lock_zone, write_row_changes
from valis_core.operator_state.secondaries import CHANNEL
from valis_core.operator_state.zones import canonical_zone_name, fetch_zone_rows, import_zone

UNIQUE_ID_BYTES = 8
"""A new member's unique ID: 8 random bytes in hex (16 characters), drawn once."""


def fresh_unique_id() -> str:
    return secrets.token_hex(UNIQUE_ID_BYTES)


class Joined(enum.Enum):
    """What ``add_member`` did."""

    ADDED = "added"
    REGROUPED = "group changed"
    UNCHANGED = "unchanged"


def create_catalog(conn: psycopg.Connection[Any], name: str, *, now: float) -> bool:
    """Make ``name`` a catalog zone with no members (SOA, NS ``invalid.``, version 2);
    return whether it is new (a catalog already there is left as it is). Refused when
    a zone of that name exists and is not a catalog."""
    catalog = canonical_zone_name(name)
    with conn.transaction():
        if _is_catalog(conn, catalog, lock=True):
            return False
        if conn.execute("SELECT 1 FROM zones WHERE name = %s", (catalog,)).fetchone():
            raise CatalogError(
                f"zone {catalog} exists and is not a catalog: a catalog is a zone of its own "
                "that only the catalog verbs write; choose another name (catalog.invalid. "
                "style names are usual) or delete that zone first"
            )
        rows = (soa_record(catalog), *catalog_records(Catalog(catalog)))
        # As an import with the 'increment' policy: a catalog deleted and made again
        # starts above its last serial, never below what its secondaries hold.
        import_zone(conn, rows, policy="increment", now=now)
        conn.execute("INSERT INTO zone_catalogs (name) VALUES (%s)", (catalog,))
    return True


def add_member(
    conn: psycopg.Connection[Any], catalog: str, member: str, group: str | None = None,
) -> tuple[Member, Joined]:
    """Make ``member`` (a zone of this database) a member of ``catalog`` in ``group``:
    a new member is given a unique ID, a member already there keeps its own. The
    catalog zone's records change in the same transaction."""
    name, zone = canonical_zone_name(catalog), canonical_zone_name(member)
    with conn.transaction():
        held = _locked(conn, name)
        if conn.execute("SELECT 1 FROM zones WHERE name = %s", (zone,)).fetchone() is None:
            raise CatalogError(
                f"zone {zone} is not in the operator-state database; import it first "
                "(a catalog lists zones this node serves)"
            )
        before = held.member(zone)
        changed = held.with_member(zone, group, fresh_unique_id)
        joined = changed.member(zone)
        assert joined is not None
        if before == joined:
            return joined, Joined.UNCHANGED
        _keep_member(conn, name, joined)
        _write_records(conn, changed)
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, zone))
    return joined, (Joined.ADDED if before is None else Joined.REGROUPED)


class Moved(enum.Enum):
    """Which step of a move ``move_member`` took."""

    MARKED = "marked"  # the coo written in the old catalog
    LISTED = "listed"  # the member listed in the new catalog
    LISTED_ALREADY = "listed already"
    STAYS = "stays"  # a move withdrawn (or none under way)


def move_member(
    conn: psycopg.Connection[Any], catalog: str, member: str, to: str
) -> tuple[Moved, Member | None]:
    """One step of moving ``member`` from ``catalog`` to catalog ``to`` (change of
    ownership, RFC 9432 section 4.4.1), and the member as ``to`` lists it.

    The first call writes the member's ``coo`` naming ``to`` in ``catalog``; the next
    lists it in ``to``, in its group, under its unique ID when that one is free there
    (so consumers keep the zone as it is). Two steps, each a transaction of its own,
    because a consumer takes a member over only if it has applied the old catalog's coo
    before it applies the new catalog listing the member: BIND 9.18 applies each
    catalog on its own schedule, and one that met the new listing first keeps the
    member the old catalog's, then deletes it when it leaves the old catalog. The
    member stays in ``catalog`` until it is removed from it. ``to`` equal to ``catalog``
    withdraws a move."""
    name, zone, target = (canonical_zone_name(catalog), canonical_zone_name(member),
                          canonical_zone_name(to))
    with conn.transaction():
        # Both catalogs locked in name order: moves between two catalogs either way
        # wait for each other instead of deadlocking.
        locked = {each: _locked(conn, each) for each in sorted({name, target})}
        old = locked[name]
        held = old.member(zone)
        if held is None:
            raise CatalogError(
                f"zone {zone} is not a member of catalog {name} (valis zone catalog list "
                f"{name} shows its members)"
            )
        if target == name or held.coo != target:
            moved = old.with_coo(zone, target)
            if moved != old:
                conn.execute(
                    "UPDATE zone_catalog_members SET coo = %s"
                    " WHERE catalog = %s AND member = %s",
                    (None if target == name else target, name, zone),
                )
                _write_records(conn, moved)
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, zone))
            return (Moved.STAYS, None) if target == name else (Moved.MARKED, None)
        before = locked[target].member(zone)
        new = locked[target].with_joining(held, fresh_unique_id)
        joined = new.member(zone)
        assert joined is not None
        if before == joined:
            return Moved.LISTED_ALREADY, joined
        _keep_member(conn, target, joined)
        _write_records(conn, new)
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, zone))
    return Moved.LISTED, joined


def remove_member(conn: psycopg.Connection[Any], catalog: str, member: str) -> bool:
    """Take ``member`` out of ``catalog``; return whether it was a member."""
    name, zone = canonical_zone_name(catalog), canonical_zone_name(member)
    with conn.transaction():
        held = _locked(conn, name)
        if held.member(zone) is None:
            return False
        # The row's trigger (migration 0016) removes its records and announces it.
        conn.execute(
            "DELETE FROM zone_catalog_members WHERE catalog = %s AND member = %s", (name, zone)
        )
        _write_records(conn, held.without_member(zone))
    return True


def list_catalogs(
    conn: psycopg.Connection[Any], catalog: str | None = None
) -> tuple[Catalog, ...]:
    """Each catalog (or only ``catalog``, refused when it is not one) with its members."""
    names: list[str]
    if catalog is None:
        names = [str(n) for (n,) in conn.execute("SELECT name FROM zone_catalogs ORDER BY name")]
    else:
        names = [canonical_zone_name(catalog)]
        if not _is_catalog(conn, names[0], lock=False):
            raise _not_a_catalog(names[0])
    return tuple(_read(conn, name) for name in names)


def _is_catalog(conn: psycopg.Connection[Any], name: str, *, lock: bool) -> bool:
    query = "SELECT 1 FROM zone_catalogs WHERE name = %s" + (" FOR UPDATE" if lock else "")
    return conn.execute(query, (name,)).fetchone() is not None


def _locked(conn: psycopg.Connection[Any], name: str) -> Catalog:
    """The catalog, its zone's row locked until the transaction ends (membership
    changes of one catalog run one after the other, and after its imports)."""
    with conn.cursor() as cur:
        if not _is_catalog(conn, name, lock=True) or not lock_zone(cur, name):
            raise _not_a_catalog(name)
    return _read(conn, name)


def _read(conn: psycopg.Connection[Any], name: str) -> Catalog:
    found = conn.execute(
        "SELECT member, unique_id, member_group, coo FROM zone_catalog_members"
        " WHERE catalog = %s ORDER BY added_at, unique_id",
        (name,),
    ).fetchall()
    return Catalog(name, tuple(Member(str(m), str(u), g, c) for m, u, g, c in found))


def _keep_member(conn: psycopg.Connection[Any], catalog: str, member: Member) -> None:
    """``member``'s row in ``catalog``: a new one, or its group changed (its unique ID
    and any move under way kept)."""
    conn.execute(
        "INSERT INTO zone_catalog_members (catalog, member, unique_id, member_group)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (catalog, member)"
        " DO UPDATE SET member_group = EXCLUDED.member_group",
        (catalog, member.zone, member.unique_id, member.group),
    )


def _write_records(conn: psycopg.Connection[Any], catalog: Catalog) -> None:
    """Make the catalog zone's records ``catalog``'s, inside the caller's transaction
    (which holds the zone's row lock); the journal's seal raises its serial at commit."""
    held = fetch_zone_rows(conn, [catalog.name], snapshot=False)[0].get(catalog.name, ())
    deletes, adds = record_changes(held, catalog)
    with conn.cursor() as cur:
        write_row_changes(cur, catalog.name, deletes, adds)


def _not_a_catalog(name: str) -> CatalogError:
    return CatalogError(
        f"{name} is not a catalog (valis zone catalog list shows them; "
        f"valis zone catalog create {name} makes one)"
    )

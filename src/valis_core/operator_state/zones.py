"""Zones and their records in the operator-state database: import, read, list, export.

A zone is replaced whole, in one transaction, and only after the zone index has accepted
its rows (``ZoneIndex.from_records``): an unservable zone is refused with nothing written.
An import of a zone that exists writes only the rows that differ from the stored ones, so
its cost in the database (the journal's triggers, the change notes) follows the change,
not the zone.

Operator writes are not fenced. The instance fence arbitrates between *node instances*
(two residents at different locations); the operator who imports a zone stands above
them, and an import must land whichever instance holds the fence. Imports still never
race: each one upserts its ``zones`` row first, which locks that row until the import
commits, so two imports of one zone run one after the other and a reader sees either the
old zone or the new one, never a mixture. A node-side writer of a zone's records takes
the same row lock (and, being a node, its ``fenced_transaction``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import psycopg

from valis_core.dns import wire
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.diff import ZoneDiff, diff_zone, soa_serial, with_serial
from valis_core.dns.zone.serial import choose_serial, next_serial, serial_gt
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.record_writes import write_row_changes
from valis_core.operator_state.site_facts import EVERY_ZONE
from valis_core.operator_state.zone_load import record_batches

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while rows are written."""

_PROGRESS_EVERY = 5000


@attrs.frozen
class ZoneSummary:
    name: str
    records: int
    serial: int | None


def canonical_zone_name(name: str) -> str:
    """The form zone names are stored and compared in: lowercase, with a trailing dot."""
    absolute = name if name.endswith(".") else name + "."
    try:
        return wire.to_text(wire.from_text(absolute).lower())
    except wire.BadName as exc:
        raise ZoneError(name, name, f"bad zone name: {exc}") from None


def checked_zone(rows: Sequence[RecordRow]) -> tuple[str, tuple[RecordRow, ...]]:
    """Validate one zone's rows with the zone index; return its name and the rows to store.

    Raises ``ZoneError`` (naming the zone) for anything the index refuses. The rows come
    back under the canonical zone name, with exact duplicates dropped (a record stated
    twice, or with owners differing only in case, is one record; it keeps the lower TTL).
    """
    if not rows:
        raise ZoneError("(none)", "(none)", "no records given; a zone needs at least SOA and NS")
    index = ZoneIndex.from_records(rows)
    if len(index.zones) != 1:
        raise ZoneError(
            ", ".join(index.zones),
            "(rows)",
            "rows span several zones; import one zone at a time",
        )
    zone = index.zones[0]
    kept: dict[tuple[str, str, str], RecordRow] = {}
    for row in rows:
        key = (row.owner.lower(), row.rtype, row.rdata)
        held = kept.get(key)
        if held is None or row.ttl < held.ttl:
            kept[key] = row if row.zone == zone else attrs.evolve(row, zone=zone)
    return zone, tuple(kept.values())


def replace_zone(
    conn: psycopg.Connection[Any],
    rows: Sequence[RecordRow],
    *,
    progress: Progress | None = None,
) -> ZoneSummary:
    """Replace one zone's records with ``rows`` atomically; refuse an unservable zone.

    Validation happens before the transaction begins, so a refusal writes nothing.
    """
    zone, stored = checked_zone(rows)
    with conn.transaction():
        _write_zone(conn, zone, stored, progress)
    return ZoneSummary(name=zone, records=len(stored), serial=soa_serial(stored))


def _write_zone(
    conn: psycopg.Connection[Any],
    zone: str,
    stored: Sequence[RecordRow],
    progress: Progress | None,
) -> None:
    """Replace the zone's records, inside the caller's transaction."""
    total = len(stored)
    try:
        with conn.transaction(), conn.cursor() as cur:
            # The upsert locks the zone's row until commit: imports of one zone serialize.
            cur.execute(
                "INSERT INTO zones (name) VALUES (%s) "
                "ON CONFLICT (name) DO UPDATE SET updated_at = now()",
                (zone,),
            )
            cur.execute("DELETE FROM records WHERE zone = %s", (zone,))
            with cur.copy("COPY records (zone, owner, rtype, ttl, rdata) FROM STDIN") as copy:
                for done, row in enumerate(stored, start=1):
                    copy.write_row((row.zone, row.owner, row.rtype, row.ttl, row.rdata))
                    if progress is not None and (done % _PROGRESS_EVERY == 0 or done == total):
                        progress(done, total)
    except psycopg.errors.IntegrityError as exc:
        raise OperatorStateError(
            f"zone {zone}: the database refused it: {' '.join(str(exc).split())} "
            "(nothing was written; correct the zone and import it again)"
        ) from exc


def _write_changed_rows(
    conn: psycopg.Connection[Any],
    zone: str,
    held: Sequence[RecordRow],
    stored: Sequence[RecordRow],
    progress: Progress | None,
) -> None:
    """Make the zone's records ``stored`` by deleting and inserting only the rows that
    differ from ``held`` (as stored, exactly), inside the caller's transaction, which
    holds the zone's row lock: the journal and the change notes see the change and not a
    whole zone removed and put back. Should the rows have changed beside the lock (an
    operator's own SQL), the zone is replaced whole instead."""
    have = {(r.owner, r.rtype, r.ttl, r.rdata) for r in held}
    want = {(r.owner, r.rtype, r.ttl, r.rdata) for r in stored}
    deletes = [r for r in held if (r.owner, r.rtype, r.ttl, r.rdata) not in want]
    adds = [r for r in stored if (r.owner, r.rtype, r.ttl, r.rdata) not in have]
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("UPDATE zones SET updated_at = now() WHERE name = %s", (zone,))
            write_row_changes(cur, zone, deletes, adds)
            cur.execute("SELECT count(*) FROM records WHERE zone = %s", (zone,))
            found = cur.fetchone()
            if found is None or found[0] != len(stored):
                raise _Drifted
    except (_Drifted, OperatorStateError, psycopg.errors.UniqueViolation):
        _write_zone(conn, zone, stored, progress)
        return
    except psycopg.errors.IntegrityError as exc:
        raise OperatorStateError(
            f"zone {zone}: the database refused it: {' '.join(str(exc).split())} "
            "(nothing was written; correct the zone and import it again)"
        ) from exc
    if progress is not None:
        progress(len(stored), len(stored))


class _Drifted(Exception):
    """The zone's rows were not the ones read under the lock."""


@attrs.frozen
class ImportOutcome:
    """What an import changed (or, dry, would change), and the serial it stored."""

    summary: ZoneSummary
    diff: ZoneDiff
    written: bool


class _DryRun(Exception):
    """Rolls a dry import's transaction back."""


def import_zone(
    conn: psycopg.Connection[Any],
    rows: Sequence[RecordRow],
    *,
    policy: str | None = None,
    now: float,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> ImportOutcome:
    """Replace one zone's records under serial discipline (``valis_core.dns.zone.serial``):
    an import that changes data without raising the serial is refused unless ``policy``,
    or the zone's stored policy, chooses a serial. Nothing is written when nothing but
    a lower serial would change, nor on a dry run."""
    zone, stored = checked_zone(rows)
    outcome: ImportOutcome | None = None
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT serial_policy FROM zones WHERE name = %s FOR UPDATE", (zone,)
            ).fetchone()
            held: tuple[RecordRow, ...] = ()
            if row is not None:
                _refuse_catalog(conn, zone)
                held = fetch_zone_rows(conn, [zone], snapshot=False)[0][zone]
            offered = soa_serial(stored)
            assert offered is not None  # the index accepted the zone, so it has an SOA
            stored_policy = row[0] if row is not None else None
            # A zone deleted and imported again compares with its last serial as with
            # a stored one: the served serial never goes back.
            old_serial = soa_serial(held) if held else _serial_floor(conn, zone)

            def choose(changed: bool) -> int:
                return choose_serial(
                    zone,
                    policy if policy is not None else stored_policy,
                    old_serial,
                    offered,
                    changed=changed,
                    now=now,
                )

            diff = diff_zone(zone, held, stored, serial=choose)
            serial = diff.new_serial
            assert serial is not None
            if not held and old_serial is not None and not serial_gt(serial, old_serial):
                # ``keep`` over a deleted zone's last serial: raised by one, as the
                # journal's seal raises a kept serial over a stored zone's.
                serial = next_serial(old_serial)
            if serial != offered:
                stored = tuple(with_serial(r, serial) if r.rtype == "SOA" else r for r in stored)
            write = bool(diff.added or diff.removed)
            summary = ZoneSummary(name=zone, records=len(stored), serial=serial)
            outcome = ImportOutcome(summary, diff, write and not dry_run)
            if dry_run:
                raise _DryRun
            if write:
                if row is None:
                    _write_zone(conn, zone, stored, progress)
                    conn.execute("DELETE FROM zone_serial_floor WHERE name = %s", (zone,))
                else:
                    _write_changed_rows(conn, zone, held, stored, progress)
                summary = attrs.evolve(summary, serial=_sealed_serial(conn, zone))
                outcome = attrs.evolve(outcome, summary=summary)
    except _DryRun:
        pass
    assert outcome is not None
    return outcome


def _refuse_catalog(conn: psycopg.Connection[Any], zone: str) -> None:
    """A catalog zone's records are the catalog verbs' to write (migration 0016)."""
    if conn.execute("SELECT 1 FROM zone_catalogs WHERE name = %s", (zone,)).fetchone():
        raise OperatorStateError(
            f"zone {zone} is a catalog: its records follow its members (valis zone catalog "
            "add|remove change them); nothing was imported"
        )


def _sealed_serial(conn: psycopg.Connection[Any], zone: str) -> int | None:
    """The serial the import stores: the change journal's seal (migration 0006) runs now
    rather than at commit, and raises a serial ``keep`` left not above the stored one."""
    conn.execute("SET CONSTRAINTS zone_journal_seal IMMEDIATE")
    found = conn.execute(
        "SELECT valis_soa_serial(rdata) FROM records WHERE zone = %s AND rtype = 'SOA'", (zone,)
    ).fetchone()
    conn.execute("SET CONSTRAINTS zone_journal_seal DEFERRED")
    return None if found is None or found[0] is None else int(found[0])


def delete_zone(conn: psycopg.Connection[Any], zone: str) -> bool:
    """Remove a zone and its records; return whether it existed. Its last serial is kept
    (``zone_serial_floor``), so importing it again cannot take the serial back."""
    name = canonical_zone_name(zone)
    with conn.transaction():
        conn.execute(
            "INSERT INTO zone_serial_floor (name, serial) "
            "SELECT zone, valis_soa_serial(rdata) FROM records "
            "WHERE zone = %s AND rtype = 'SOA' AND valis_soa_serial(rdata) IS NOT NULL "
            "ON CONFLICT (name) DO UPDATE SET serial = EXCLUDED.serial",
            (name,),
        )
        cur = conn.execute("DELETE FROM zones WHERE name = %s", (name,))
        return cur.rowcount == 1


def _serial_floor(conn: psycopg.Connection[Any], zone: str) -> int | None:
    """The last serial of ``zone`` when it was deleted (None: never deleted)."""
    found = conn.execute(
        "SELECT serial FROM zone_serial_floor WHERE name = %s", (zone,)
    ).fetchone()
    return None if found is None else int(found[0])


def served_zones(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, ...]]:
    """Each zone some node serves (its site facts' ``VALIS_SERVED_ZONES``), with the
    nodes serving it, in canonical names; a node serving every zone (``*``) serves each
    zone the database holds."""
    found: dict[str, list[str]] = {}
    rows = conn.execute(
        "SELECT node, value FROM site_facts WHERE key = 'VALIS_SERVED_ZONES' ORDER BY node"
    ).fetchall()
    held: tuple[str, ...] | None = None
    for node, value in rows:
        names = str(value).replace(",", " ").split()
        if names == [EVERY_ZONE]:
            held = zone_names(conn) if held is None else held
            names = list(held)
        for name in names:
            try:
                zone = canonical_zone_name(name)
            except ZoneError:
                continue  # site facts validation reports it; not a zone to protect
            found.setdefault(zone, []).append(str(node))
    return {zone: tuple(nodes) for zone, nodes in found.items()}


def set_serial_policy(conn: psycopg.Connection[Any], zone: str, policy: str | None) -> bool:
    """Store the zone's serial policy (``None``: refuse a serial that did not go up);
    return whether the zone exists."""
    with conn.transaction():
        cur = conn.execute(
            "UPDATE zones SET serial_policy = %s WHERE name = %s",
            (policy, canonical_zone_name(zone)),
        )
        return cur.rowcount == 1


def serial_policies(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The zones that have a serial policy, and it."""
    found = conn.execute("SELECT name, serial_policy FROM zones WHERE serial_policy IS NOT NULL")
    return {str(name): str(policy) for name, policy in found.fetchall()}


def absent_zones(conn: psycopg.Connection[Any], names: Iterable[str]) -> tuple[str, ...]:
    """Those of ``names`` (as written: with or without the trailing dot, any case) that
    the database holds no zone of, in canonical form and the order given."""
    wanted = [canonical_zone_name(name.strip()) for name in names if name.strip()]
    held = {
        name for (name,) in conn.execute(
            "SELECT name FROM zones WHERE name = ANY(%s)", (wanted,)
        )
    }
    return tuple(dict.fromkeys(name for name in wanted if name not in held))


def zone_names(conn: psycopg.Connection[Any]) -> tuple[str, ...]:
    return tuple(name for (name,) in conn.execute("SELECT name FROM zones ORDER BY name"))


def fetch_zone_rows(
    conn: psycopg.Connection[Any], zones: Iterable[str], *, snapshot: bool = True
) -> tuple[dict[str, tuple[RecordRow, ...]], tuple[str, ...]]:
    """The records of each of ``zones`` (canonical names) that exists, read in one
    snapshot (by one ``COPY``: ``zone_load.record_batches``), and the names of those that
    do not exist. ``snapshot=False`` reads inside the caller's transaction instead."""
    wanted = sorted(set(zones))
    rows: dict[str, list[RecordRow]] = {}
    with conn.transaction():
        if snapshot:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for (name,) in conn.execute("SELECT name FROM zones WHERE name = ANY(%s)", (wanted,)):
            rows[name] = []
        for batch in record_batches(conn, list(rows)):
            for zone, owner, rtype, ttl, rdata in batch:
                rows[zone].append(RecordRow(zone, owner, rtype, int(ttl), rdata))
    missing = tuple(zone for zone in wanted if zone not in rows)
    return {zone: tuple(held) for zone, held in rows.items()}, missing


def missing_zones_error(missing: Sequence[str]) -> OperatorStateError:
    return OperatorStateError(
        f"operator state: served zone(s) {', '.join(missing)} not in the database; "
        "import them (valis zone import) or stop serving them (VALIS_SERVED_ZONES)"
    )


def load_zone_rows(
    conn: psycopg.Connection[Any], zones: Iterable[str]
) -> dict[str, tuple[RecordRow, ...]]:
    """Every record of each of ``zones``, read in one snapshot; a zone that is not in the
    database is an ``OperatorStateError`` naming it."""
    rows, missing = fetch_zone_rows(conn, zones)
    if missing:
        raise missing_zones_error(missing)
    return rows


def list_zones(conn: psycopg.Connection[Any]) -> tuple[ZoneSummary, ...]:
    """Each zone with its record count and SOA serial (None when it has no SOA)."""
    found = conn.execute(
        "SELECT z.name, count(r.id),"
        " max(CASE WHEN r.rtype = 'SOA' THEN split_part(r.rdata, ' ', 3) END)"
        " FROM zones z LEFT JOIN records r ON r.zone = z.name"
        " GROUP BY z.name ORDER BY z.name"
    ).fetchall()
    return tuple(
        ZoneSummary(name=name, records=count, serial=int(serial) if serial else None)
        for name, count, serial in found
    )


def export_zone_text(conn: psycopg.Connection[Any], zone: str) -> str:
    """The zone as an RFC 1035 master file: SOA first, absolute names, explicit TTLs."""
    name = canonical_zone_name(zone)
    found, missing = fetch_zone_rows(conn, [name])
    if missing:
        raise OperatorStateError(
            f"zone {name} is not in the operator-state database (valis zone list shows "
            "the zones it holds)"
        )
    return render_master_file(name, found[name])


def render_master_file(zone: str, rows: Iterable[RecordRow]) -> str:
    ordered = sorted(rows, key=_master_order)
    lines = [f"; zone {zone} from the valis operator-state database", f"$ORIGIN {zone}"]
    lines += [f"{r.owner}\t{r.ttl}\tIN\t{r.rtype}\t{r.rdata}" for r in ordered]
    return "\n".join(lines) + "\n"


def _master_order(row: RecordRow) -> tuple[bool, tuple[str, ...], str, str]:
    labels = tuple(reversed(row.owner.lower().rstrip(".").split(".")))
    return (row.rtype != "SOA", labels, row.rtype, row.rdata)

"""Key rollovers in operator state: the ``zone_rollover`` rows and the zones' timings
(migration 0008; the roll's kind, 0010), read and written around the pure table in
``valis_core.dns.dnssec.rollover``.

Every write is a node's (the keys are that node's) and runs in a ``fenced_transaction``
at its standing, the zone's row locked first as every writer of a zone does, then the
roll's row, so the verb confirming a DS and the resident moving a timed step on never
both move one roll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from valis_core.dns.dnssec import rollover
from valis_core.dns.dnssec.rollover import Rollover, RolloverError, Timing
from valis_core.fence import FenceState
from valis_core.operator_state.fence import fenced_transaction

TIMING_COLUMNS = (
    "dnskey_ttl", "ds_ttl", "max_zone_ttl", "propagation_delay", "parent_propagation_delay"
)
ROLL_COLUMNS = ("old_tag", "new_tag", "step", "step_at", *TIMING_COLUMNS, "kind")


def roll_from_row(row: Sequence[Any]) -> Rollover:
    """A roll from ``ROLL_COLUMNS``' values, in that order."""
    old, new, step, since, *timing, kind = row
    return Rollover(int(old), int(new), str(step), float(since),
                    Timing(*(int(value) for value in timing)), str(kind))


def _roll_values(roll: Rollover) -> tuple[object, ...]:
    t = roll.timing
    return (roll.old, roll.new, roll.step, roll.since, t.dnskey_ttl, t.ds_ttl,
            t.max_zone_ttl, t.propagation_delay, t.parent_propagation_delay, roll.kind)


def _locked(
    cur: psycopg.Cursor[Any], zone: str
) -> tuple[int, int, int | None, Timing, Rollover | None]:
    """The zone's signing row (algorithm, key tag, ZSK tag, timing) and its roll, both
    locked."""
    cur.execute("SELECT 1 FROM zones WHERE name = %s FOR UPDATE", (zone,))
    cur.execute(
        f"SELECT algorithm, key_tag, zsk_tag, {', '.join(TIMING_COLUMNS)} FROM zone_signing "
        "WHERE zone = %s FOR UPDATE",
        (zone,),
    )
    row = cur.fetchone()
    if row is None:
        raise RolloverError(
            f"zone {zone} is not signed; 'valis zone sign {zone}' signs it, and a rollover "
            "replaces the key it signs with"
        )
    algorithm, tag, zsk_tag, *timing = row
    cur.execute(
        f"SELECT {', '.join(ROLL_COLUMNS)} FROM zone_rollover WHERE zone = %s FOR UPDATE",
        (zone,),
    )
    found = cur.fetchone()
    roll = None if found is None else roll_from_row(found)
    zsk = None if zsk_tag is None else int(zsk_tag)
    return int(algorithm), int(tag), zsk, Timing(*(int(v) for v in timing)), roll


def zone_key(
    conn: psycopg.Connection[Any], zone: str
) -> tuple[int, int, int | None, Rollover | None]:
    """The zone's algorithm, key tag (its CSK's or KSK's) and ZSK tag (``None``: signed
    with a CSK) as operator state says, and its roll if any."""
    with conn.transaction(), conn.cursor() as cur:
        algorithm, tag, zsk_tag, _timing, roll = _locked(cur, zone)
    return algorithm, tag, zsk_tag, roll


def set_timing(
    conn: psycopg.Connection[Any], standing: FenceState, zone: str, timing: Timing
) -> None:
    """Keep ``timing`` as the zone's, between rolls (a roll waits on the timings it
    began with, so changing them mid-roll is refused)."""
    with fenced_transaction(conn, standing) as cur:
        _algorithm, _tag, _zsk, _held, roll = _locked(cur, zone)
        if roll is not None:
            raise RolloverError(
                f"zone {zone} is rolling (step {roll.step}); its timings change only "
                "between rolls"
            )
        _write_timing(cur, zone, timing)


def _write_timing(cur: psycopg.Cursor[Any], zone: str, timing: Timing) -> None:
    cur.execute(
        "UPDATE zone_signing SET "
        + ", ".join(f"{column} = %s" for column in TIMING_COLUMNS)
        + " WHERE zone = %s",
        (*(getattr(timing, column) for column in TIMING_COLUMNS), zone),
    )


def begin_rollover(
    conn: psycopg.Connection[Any],
    standing: FenceState,
    zone: str,
    new_tag: int,
    *,
    timing: Timing | None,
    now: float,
    zsk: bool = False,
) -> Rollover:
    """Begin rolling ``zone`` to the key ``new_tag``, after setting its timings to
    ``timing`` (``None``: as they are): its ZSK when ``zsk``, else its CSK or KSK. The
    roll waits on the new timings, except the DNSKEY TTL: it waits on the larger of the
    old and the new, since resolvers may hold the DNSKEY RRset served under the old.
    Refused when a roll is already under way."""
    with fenced_transaction(conn, standing) as cur:
        _algorithm, tag, zsk_tag, held, roll = _locked(cur, zone)
        if roll is not None:
            raise RolloverError(
                f"zone {zone} is already rolling from key tag {roll.old} to {roll.new}, at "
                f"step {roll.step}; 'valis zone ds {zone}' shows what the parent should "
                "hold, and the roll must end before another begins"
            )
        wanted = held if timing is None else timing
        _write_timing(cur, zone, wanted)
        waits = Timing(
            max(held.dnskey_ttl, wanted.dnskey_ttl), wanted.ds_ttl, wanted.max_zone_ttl,
            wanted.propagation_delay, wanted.parent_propagation_delay,
        )
        kind = rollover.kind_for(split=zsk_tag is not None, zsk=zsk)
        old = zsk_tag if kind == rollover.ZSK and zsk_tag is not None else tag
        roll = rollover.start(old, new_tag, waits, now, kind)
        cur.execute(
            f"INSERT INTO zone_rollover (zone, {', '.join(ROLL_COLUMNS)}, set_by) "
            f"VALUES (%s, {', '.join(['%s'] * len(ROLL_COLUMNS))}, %s)",
            (zone, *_roll_values(roll), standing.holder),
        )
        return roll


def _store(
    cur: psycopg.Cursor[Any], zone: str, roll: Rollover, moved: Rollover | None, holder: str
) -> None:
    """Write ``moved`` in place of ``roll``; ``None``: the roll is over and the zone signs
    with the new key (as its ZSK, for a ZSK roll)."""
    if moved is None:
        column = "zsk_tag" if roll.kind == rollover.ZSK else "key_tag"
        cur.execute("DELETE FROM zone_rollover WHERE zone = %s", (zone,))
        cur.execute(
            f"UPDATE zone_signing SET {column} = %s, set_by = %s, set_at = now() "
            "WHERE zone = %s",
            (roll.new, holder, zone),
        )
        return
    cur.execute(
        "UPDATE zone_rollover SET step = %s, step_at = %s, set_by = %s, set_at = now() "
        "WHERE zone = %s",
        (moved.step, moved.since, holder, zone),
    )


def confirm_ds(
    conn: psycopg.Connection[Any], standing: FenceState, zone: str, now: float
) -> tuple[Rollover, Rollover | None]:
    """The operator says the parent publishes the DS set the roll's step asks for: the
    roll as it was and as it is now (``None``: over)."""
    with fenced_transaction(conn, standing) as cur:
        _algorithm, _tag, _zsk, _timing, roll = _locked(cur, zone)
        if roll is None:
            raise RolloverError(
                f"zone {zone} is not rolling; 'valis zone rollover {zone}' begins a roll"
            )
        moved = rollover.confirm(roll, now)
        _store(cur, zone, roll, moved, standing.holder)
        return roll, moved


def advance_rollovers(
    conn: psycopg.Connection[Any], standing: FenceState, zones: Sequence[str], now: float
) -> list[tuple[str, Rollover, Rollover | None]]:
    """Move on every roll of ``zones`` whose step's time has come; the rolls moved, as
    they were and as they are now (``None``: over, a ZSK roll's last wait done). Nothing
    is written (not even a lock taken) when none is due."""
    due = [
        str(zone) for zone, *row in conn.execute(
            f"SELECT zone, {', '.join(ROLL_COLUMNS)} FROM zone_rollover WHERE zone = ANY(%s)",
            (list(zones),),
        ).fetchall()
        if rollover.advance(roll_from_row(row), now) != roll_from_row(row)
    ]
    if not due:
        return []
    moved: list[tuple[str, Rollover, Rollover | None]] = []
    with fenced_transaction(conn, standing) as cur:
        for zone in sorted(due):
            _algorithm, _tag, _zsk, _timing, roll = _locked(cur, zone)
            if roll is None:
                continue
            after = rollover.advance(roll, now)
            if after != roll:
                _store(cur, zone, roll, after, standing.holder)
                moved.append((zone, roll, after))
    return moved


def ttl_shortfall(conn: psycopg.Connection[Any], zone: str, timing: Timing) -> str | None:
    """``rollover.ttl_shortfall`` for ``zone`` as operator state holds it: only the
    records whose TTL is above ``timing.max_zone_ttl`` are read (none, usually), and the
    delegation points only when there are some."""
    above = [
        (str(owner), str(rtype), int(ttl)) for owner, rtype, ttl in conn.execute(
            "SELECT owner, rtype, ttl FROM records WHERE zone = %s AND ttl > %s",
            (zone, timing.max_zone_ttl),
        ).fetchall()
    ]
    if not above:
        return None
    cuts = [
        str(owner) for (owner,) in conn.execute(
            "SELECT DISTINCT lower(owner) FROM records WHERE zone = %s AND rtype = 'NS' "
            "AND lower(owner) <> zone",
            (zone,),
        ).fetchall()
    ]
    return rollover.ttl_shortfall(timing, zone, above, cuts)

"""What the zone source hears on ``CHANNEL``: one notification read (``parse_note``), and
the notifications a socket holds folded into one batch of changes (``drain``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import psycopg

from valis_core.dns import wire
from valis_core.operator_state.zone_load import plain_owner

CHANNEL = "valis_zone_owners_changed"
"""The NOTIFY channel the records and zones triggers signal on (payloads: ``parse_note``).
Migration 0003 made it; ``valis_zone_changed`` still carries bare zone names for sources
of older valis versions."""


@attrs.frozen
class Note:
    """One notification on ``CHANNEL``: reload everything, one zone whole, or some owners
    of one zone."""

    everything: bool = False
    zone: str = ""
    owners: tuple[str, ...] = ()


def parse_note(payload: str) -> Note:
    """Read a payload: ``""`` (everything), ``"zone"`` (that zone whole) or
    ``"zone\\nowner\\n..."`` (those owners of it). An owner that is not plain ASCII, or
    not inside the zone, makes the note ask for the zone whole: when in doubt, re-read."""
    if payload == "":
        return Note(everything=True)
    zone, *owners = payload.split("\n")
    if not owners:
        return Note(zone=zone)
    try:
        apex = wire.from_text(zone).lower()
        for owner in owners:
            if not plain_owner(owner):
                return Note(zone=zone)
            if not wire.is_at_or_below(wire.from_text(owner).lower(), apex):
                return Note(zone=zone)
    except wire.BadName:
        return Note(zone=zone)
    return Note(zone=zone, owners=tuple(owner.lower() for owner in owners))


@attrs.frozen
class Changes:
    """What one batch of notifications asks for."""

    everything: bool
    zones: frozenset[str]
    owners: Mapping[str, set[str]]


def drain(listen: psycopg.Connection[Any], served: set[str] | None) -> Changes:
    """Read what the socket holds and fold it into one batch of changes to ``served``
    zones (None: every zone)."""
    pgconn = listen.pgconn
    pgconn.consume_input()  # raises OperationalError when the connection is gone
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("zone source: listen connection is broken")
    everything = False
    zones: set[str] = set()
    owners: dict[str, set[str]] = {}
    while (raw := pgconn.notifies()) is not None:
        note = parse_note(raw.extra.decode("utf-8", "replace"))
        if note.everything:
            everything = True
        elif served is not None and note.zone not in served:
            continue
        elif note.owners:
            owners.setdefault(note.zone, set()).update(note.owners)
        else:
            zones.add(note.zone)
    return Changes(everything, frozenset(zones), owners)

"""Reading a few changed owners' rows on the trio thread, in one round trip.

The zone source applies a small change by re-reading the rows of the owners a change
note names (``zone_source``). That read is the largest part of the time from a commit to
its answer on the wire, so it is made as short as it can be: one query string sent with
libpq's non-blocking API from the trio thread (``wait_readable`` on the connection's
socket; no worker thread to hop to and back from), holding one statement that reads the
owners' rows and which of their zones exist in one snapshot, followed, when the caller
asks, by the fence's row in a later snapshot (the same query string: PostgreSQL runs its
statements in order, each in a snapshot of its own under READ COMMITTED, and never one
earlier than the last's).

Before (2026-12-04): ``zones.fetch_owner_rows`` on a worker thread, BEGIN, SET
TRANSACTION, two SELECTs and COMMIT, then the fence's SELECT: six round trips and two
thread hops, about 2.5 ms of a 5 ms commit-to-answer.

A read cut short (cancelled, or its connection lost) closes the connection: its results
were never all taken, so nothing may use it again; the zone source opens a new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import psycopg
import trio
from psycopg import pq, sql

from valis_core.dns.wire.records import RecordRow
from valis_core.fence import FenceState

_ROWS = sql.SQL(
    "SELECT z.name, r.owner, r.rtype, r.ttl, r.rdata FROM zones z"
    " LEFT JOIN (unnest({zones}::text[], {owners}::text[]) AS w (zone, owner)"
    ' JOIN records r ON r.zone = w.zone AND lower(r.owner COLLATE "C") = w.owner)'
    " ON w.zone = z.name"
    " WHERE z.name = ANY({wanted}::text[])"
)
_FENCE = sql.SQL("; SELECT generation, holder FROM instance_fence WHERE id = 1")


@attrs.frozen
class OwnerRows:
    """What one read found."""

    rows: dict[str, tuple[RecordRow, ...]]
    """The rows of the owners asked for, by zone, for each zone that exists (a zone whose
    owners hold no rows now maps to no rows)."""
    missing: tuple[str, ...]
    """The zones asked for that do not exist."""
    fence: FenceState | None
    """The fence as read after the rows (None when not asked for, or not seeded)."""


def owner_query(
    conn: psycopg.Connection[Any], owners: Mapping[str, Iterable[str]], *, fence: bool
) -> bytes:
    """The query string of one read: ``owners`` maps a zone (canonical name) to owner
    names as the change notes name them (lowercased in ASCII only)."""
    zones: list[str] = []
    names: list[str] = []
    for zone, held in owners.items():
        for owner in dict.fromkeys(held):
            zones.append(zone)
            names.append(owner)
    query = _ROWS.format(
        zones=sql.Literal(zones), owners=sql.Literal(names), wanted=sql.Literal(sorted(owners))
    )
    if fence:
        query = sql.Composed([query, _FENCE])
    return query.as_bytes(conn)


async def read_owner_rows(
    conn: psycopg.Connection[Any], owners: Mapping[str, Iterable[str]], *, fence: bool
) -> OwnerRows:
    """Read the rows of ``owners`` (see ``owner_query``) and, when ``fence``, the fence
    after them, in one round trip without leaving the trio thread. ``conn`` is idle and
    in autocommit; it is idle again afterwards, or closed when the read did not finish.

    Raises ``psycopg.OperationalError`` (the connection is lost), or the error a
    statement failed with."""
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK or (
        pgconn.transaction_status != pq.TransactionStatus.IDLE
    ):
        raise psycopg.InterfaceError("operator state: the query connection is not idle")
    encoding = conn.info.encoding
    query = owner_query(conn, owners, fence=fence)
    finished = False
    try:
        results = await _exchange(pgconn, query)
        finished = True
    finally:
        if not finished:
            conn.close()
    failed = next((r for r in results if r.status != pq.ExecStatus.TUPLES_OK), None)
    if failed is not None:
        raise psycopg.errors.error_from_result(failed, encoding=encoding)
    found: dict[str, list[RecordRow]] = {zone: [] for zone in owners}
    existing: set[str] = set()
    rows = results[0]
    value = rows.get_value
    for n in range(rows.ntuples):
        zone = _text(value(n, 0), encoding)
        existing.add(zone)
        owner = value(n, 1)
        if owner is not None:
            found[zone].append(RecordRow(
                zone, owner.decode(encoding), _text(value(n, 2), encoding),
                int(_text(value(n, 3), encoding)), _text(value(n, 4), encoding),
            ))
    current: FenceState | None = None
    if fence and results[1].ntuples:
        current = FenceState(
            generation=int(_text(results[1].get_value(0, 0), encoding)),
            holder=_text(results[1].get_value(0, 1), encoding),
        )
    return OwnerRows(
        rows={zone: tuple(found[zone]) for zone in owners if zone in existing},
        missing=tuple(sorted(zone for zone in owners if zone not in existing)),
        fence=current,
    )


async def _exchange(pgconn: pq.abc.PGconn, query: bytes) -> list[pq.abc.PGresult]:
    """Send ``query`` and take every result of it, waiting on the socket (never in
    libpq)."""
    pgconn.send_query(query)
    while pgconn.flush():
        await trio.lowlevel.wait_writable(pgconn.socket)
    results: list[pq.abc.PGresult] = []
    while True:
        while pgconn.is_busy():
            await trio.lowlevel.wait_readable(pgconn.socket)
            pgconn.consume_input()  # raises OperationalError when the connection is gone
        result = pgconn.get_result()
        if result is None:
            break
        results.append(result)
    if pgconn.status != pq.ConnStatus.OK:
        raise psycopg.OperationalError("operator state: connection lost reading owners")
    return results


def _text(raw: bytes | None, encoding: str) -> str:
    if raw is None:  # pragma: no cover - every column read is NOT NULL
        raise psycopg.DataError("operator state: a NOT NULL column read as NULL")
    return raw.decode(encoding)

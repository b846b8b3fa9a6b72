"""Reading a few changed owners' rows on the trio thread, in one round trip.

The zone source applies a small change by re-reading the rows of the owners a change
note names (``zone_source``). That read is the largest part of the time from a commit to
its answer on the wire, so it is made as short as it can be: one round trip driven with
libpq's non-blocking API from the trio thread (``wait_readable`` on the connection's
socket; no worker thread to hop to and back from), holding one statement that reads the
owners' rows and which of their zones exist in one snapshot, followed, when the caller
asks, by the fence's row in a later snapshot (PostgreSQL runs the statements of a
pipeline in order, and under READ COMMITTED each in a snapshot never earlier than the
last's).

Before (2026-12-04): ``zones.fetch_owner_rows`` on a worker thread, BEGIN, SET
TRANSACTION, two SELECTs and COMMIT, then the fence's SELECT: six round trips and two
thread hops, about 2.5 ms of a 5 ms commit-to-answer.

A read cut short (cancelled, or its connection lost) closes the connection: its results
were never all taken, so nothing may use it again; the zone source opens a new one.

Since 2026-12-05 the two statements are prepared once per connection and sent as one
pipeline (libpq's pipeline mode: Bind and Execute of each, a Sync after each), their
parameters as text arrays: a change no longer pays PostgreSQL's parse and plan of the
read, nor the composing of a literal query on the trio thread (together about a third of
the resident's share of a change's cost on a busy core, ``benchmarks/change_profile.py``).
Each statement is a transaction of its own, so the fence is still read in a later
snapshot than the rows.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import psycopg
import trio
from psycopg import pq

from valis_core.dns.wire.records import RecordRow
from valis_core.fence import FenceState

_ROWS = (
    b"SELECT z.name, r.owner, r.rtype, r.ttl, r.rdata FROM zones z"
    b" LEFT JOIN (unnest($1::text[], $2::text[]) AS w (zone, owner)"
    b' JOIN records r ON r.zone = w.zone AND lower(r.owner COLLATE "C") = w.owner)'
    b" ON w.zone = z.name"
    b" WHERE z.name = ANY($3::text[])"
)
_FENCE = b"SELECT generation, holder FROM instance_fence WHERE id = 1"
_STATEMENTS = {b"valis_owner_rows": _ROWS, b"valis_owner_fence": _FENCE}
_ROWS_NAME, _FENCE_NAME = _STATEMENTS
_prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = (
    weakref.WeakKeyDictionary()
)
"""The statements prepared on each connection (a session's prepared statements last as
long as it does)."""


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


def owner_params(owners: Mapping[str, Iterable[str]], encoding: str) -> list[bytes | None]:
    """The read's parameters: ``owners`` maps a zone (canonical name) to owner names as
    the change notes name them (lowercased in ASCII only); each is a text array."""
    zones: list[str] = []
    names: list[str] = []
    for zone, held in owners.items():
        for owner in dict.fromkeys(held):
            zones.append(zone)
            names.append(owner)
    return [_text_array(zones, encoding), _text_array(names, encoding),
            _text_array(sorted(owners), encoding)]


def _text_array(values: Iterable[str], encoding: str) -> bytes:
    """A text array in PostgreSQL's text form: every element quoted, so no element is
    read as NULL or split."""
    quoted = (
        '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values
    )
    return ("{" + ",".join(quoted) + "}").encode(encoding)


async def read_owner_rows(
    conn: psycopg.Connection[Any], owners: Mapping[str, Iterable[str]], *, fence: bool
) -> OwnerRows:
    """Read the rows of ``owners`` (see ``owner_params``) and, when ``fence``, the fence
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
    params = owner_params(owners, encoding)
    finished = False
    try:
        prepared = await _prepare(conn)
        results = []
        if all(result.status == pq.ExecStatus.COMMAND_OK for result in prepared):
            reads = [lambda: pgconn.send_query_prepared(_ROWS_NAME, params)]
            if fence:
                reads.append(lambda: pgconn.send_query_prepared(_FENCE_NAME, None))
            results = await _pipeline(pgconn, reads)
        finished = True
    finally:
        if not finished:
            conn.close()
    _raise_failed(prepared, pq.ExecStatus.COMMAND_OK, encoding)
    _raise_failed(results, pq.ExecStatus.TUPLES_OK, encoding)
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


async def _prepare(conn: psycopg.Connection[Any]) -> list[pq.abc.PGresult]:
    """Prepare on ``conn`` the statements it does not hold yet, each in a transaction of
    its own (so one that fails leaves the other's fate plain); the results of those
    prepared now, an empty list when every one was held already (else a failed one is
    among them, for the caller to raise)."""
    held = _prepared.setdefault(conn, set())
    wanted = [name for name in _STATEMENTS if name not in held]
    if not wanted:
        return []
    pgconn = conn.pgconn
    results = await _pipeline(
        pgconn, [functools.partial(pgconn.send_prepare, name, _STATEMENTS[name]) for name in wanted]
    )
    held.update(
        name for name, result in zip(wanted, results, strict=True)
        if result.status == pq.ExecStatus.COMMAND_OK
    )
    return results


def _raise_failed(results: Sequence[pq.abc.PGresult], ok: pq.ExecStatus, encoding: str) -> None:
    failed = next((r for r in results if r.status != ok), None)
    if failed is not None:
        raise psycopg.errors.error_from_result(failed, encoding=encoding)


async def _pipeline(
    pgconn: pq.abc.PGconn, sends: Sequence[Callable[[], None]]
) -> list[pq.abc.PGresult]:
    """Queue each of ``sends`` (one statement each) in a transaction of its own, in one
    pipeline, and take each one's result, waiting on the socket (never in libpq). The
    connection leaves pipeline mode again once every result is taken."""
    pgconn.enter_pipeline_mode()
    for send in sends:
        send()
        pgconn.pipeline_sync()
    while pgconn.flush():
        await trio.lowlevel.wait_writable(pgconn.socket)
    results: list[pq.abc.PGresult] = []
    for _ in sends:
        result = await _next_result(pgconn)
        if result is None:
            raise _lost(pgconn)
        results.append(result)
        if await _next_result(pgconn) is not None:
            raise psycopg.InterfaceError("operator state: a statement gave more than one result")
        synced = await _next_result(pgconn)
        if synced is None or synced.status != pq.ExecStatus.PIPELINE_SYNC:
            raise _lost(pgconn)
    pgconn.exit_pipeline_mode()
    return results


async def _next_result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    while pgconn.is_busy():
        await trio.lowlevel.wait_readable(pgconn.socket)
        pgconn.consume_input()  # raises OperationalError when the connection is gone
    return pgconn.get_result()


def _lost(pgconn: pq.abc.PGconn) -> psycopg.Error:
    if pgconn.status != pq.ConnStatus.OK:
        return psycopg.OperationalError("operator state: connection lost reading owners")
    return psycopg.InterfaceError("operator state: a pipeline's results out of order")


def _text(raw: bytes | None, encoding: str) -> str:
    if raw is None:  # pragma: no cover - every column read is NOT NULL
        raise psycopg.DataError("operator state: a NOT NULL column read as NULL")
    return raw.decode(encoding)

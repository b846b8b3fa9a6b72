"""Reading zones in bulk: every record of some zones in one ``COPY``, streamed into the
zone index as it arrives, each zone built once.

``record_batches`` reads the rows of ``COPY (SELECT ...) TO STDOUT`` in PostgreSQL's text
format and hands them on in batches of fields, so nothing holds a zone's rows twice.
PostgreSQL sends each row of a COPY as a message of its own; they are taken with libpq's
own call (``PGconn.get_copy_data``), since psycopg's ``Copy`` reader costs more per row
than the reading itself, and binary rows, parsed field by field, more again (measured at
10^6 rows on two busy cores: the text lines read and split here 1.2 to 1.5 s, 0.5 s of it
this process's CPU; psycopg's binary ``Copy.rows`` 2.5 s; a binary server-side cursor
1.7 to 2.2 s).

``build_zones`` feeds the rows to one ``Builder`` per zone (``Builder.add_fields``: the
short way for the common rows) and freezes each zone once at the end, telling
``progress`` how far it got as it goes. A zone that cannot be served is refused on its
own: the others are built all the same, and the caller decides what a refusal means.
"""

from __future__ import annotations

import logging
import re
import select
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import psycopg
from psycopg import pq, sql

from valis_core.clock import Clock
from valis_core.dns.wire.records import ZoneError
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.build import Builder
from valis_core.log_throttle import LogThrottle

BATCH = 10_000
"""Rows handed on at a time."""

PROGRESS_EVERY = 1.0
"""Seconds between two lines telling how a load goes."""

log = logging.getLogger("valis.zone_source")

LoadProgress = Callable[[int, int, int], None]
"""Called as ``progress(zones_built, zones, records_read)`` after every batch of rows and
every zone built (often: the caller decides how often to tell anyone)."""

_COPY_ESCAPE = re.compile(r"\\(.)")
_COPY_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
"""What COPY's text format writes for a backslash followed by these (PostgreSQL's COPY
TO writes only these, and a doubled backslash for a backslash)."""


def plain_owner(owner: str) -> bool:
    """Whether an owner's text spells its DNS name one way only up to ASCII case, so that
    reading rows by lowercased text finds every row of that name (the change triggers
    apply the same test before naming an owner)."""
    return owner.isascii() and owner.isprintable() and "\\" not in owner and owner != "."


def record_batches(conn: psycopg.Connection[Any], zones: Sequence[str]) -> Iterator[
    list[list[str]]
]:
    """Every record of ``zones`` (canonical names) as ``[zone, owner, rtype, ttl, rdata]``
    (all text), in batches of up to ``BATCH``, read by one ``COPY`` inside the caller's
    transaction (or its own statement, in autocommit). The connection is idle again when
    the iterator is exhausted; one abandoned part way leaves it unusable (close it).

    libpq is driven without blocking (psycopg's calls keep the interpreter while libpq
    waits): rows are taken while libpq holds them, and only when it holds none is the
    socket waited on, so a ``cancel_safe`` from another thread ends the read promptly."""
    pgconn = conn.pgconn
    query = sql.SQL(
        "COPY (SELECT zone, owner, rtype, ttl, rdata FROM records WHERE zone = ANY({}))"
        " TO STDOUT"
    ).format(sql.Literal(list(zones)))
    encoding = conn.info.encoding
    pgconn.send_query(query.as_bytes(conn))
    while pgconn.flush():
        if _wait(pgconn, select.POLLIN | select.POLLOUT) & select.POLLIN:
            pgconn.consume_input()
    started = _next_result(pgconn)
    if started is None or started.status != pq.ExecStatus.COPY_OUT:
        _finish(pgconn, started, encoding)
        raise psycopg.OperationalError(_message(pgconn, "COPY did not start"))
    get = pgconn.get_copy_data
    batch: list[list[str]] = []
    while True:
        size, data = get(1)
        if size > 0:
            line = str(data, encoding)
            fields = line[:-1].split("\t")
            if "\\" in line:
                fields = [_COPY_ESCAPE.sub(_unescape, field) for field in fields]
            batch.append(fields)
            if len(batch) == BATCH:
                yield batch
                batch = []
        elif size == 0:  # nothing buffered: wait for the server
            _wait(pgconn, select.POLLIN)
            pgconn.consume_input()
        else:
            break
    _finish(pgconn, _next_result(pgconn), encoding)
    if batch:
        yield batch


def _wait(pgconn: pq.abc.PGconn, events: int) -> int:
    """Wait (without the interpreter) until the connection's socket is ready for
    ``events``; the events it is ready for."""
    poller = select.poll()
    poller.register(pgconn.socket, events)
    while True:
        found = poller.poll()
        if found:
            return int(found[0][1])


def _next_result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """libpq's next result, read without blocking in libpq."""
    while pgconn.is_busy():
        _wait(pgconn, select.POLLIN)
        pgconn.consume_input()
    return pgconn.get_result()


def _unescape(match: re.Match[str]) -> str:
    char = match.group(1)
    return _COPY_ESCAPES.get(char, char)


def _finish(pgconn: pq.abc.PGconn, result: pq.abc.PGresult | None, encoding: str) -> None:
    """Take every result left, raising the error among them (the connection is idle
    afterwards)."""
    failed: psycopg.Error | None = None
    while result is not None:
        if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.COPY_OUT):
            failed = failed or psycopg.errors.error_from_result(result, encoding=encoding)
        result = _next_result(pgconn)
    if failed is not None:
        raise failed
    if pgconn.status != pq.ConnStatus.OK:
        raise psycopg.OperationalError(_message(pgconn, "connection lost reading records"))


def _message(pgconn: pq.abc.PGconn, what: str) -> str:
    detail = pgconn.error_message.decode("utf-8", "replace").strip()
    return f"operator state: {what}" + (f": {detail}" if detail else "")


def no_records(zone: str) -> ZoneError:
    """The refusal of a zone the database holds without a record."""
    return ZoneError(zone, zone, "the zone has no records; import it again")


class LoadReport:
    """A ``LoadProgress`` telling how a load goes: one line at most every
    ``PROGRESS_EVERY`` seconds (the first after that long: a small load says nothing
    until it is done), logged and handed to ``progress``."""

    def __init__(self, ticks: Clock, progress: Callable[[str], None] | None) -> None:
        self._ticks = ticks
        self._progress = progress
        self._throttle = LogThrottle(PROGRESS_EVERY)
        self._throttle.admit(ticks())

    def __call__(self, built: int, zones: int, records: int) -> None:
        if self._throttle.admit(self._ticks()) is None:
            return
        text = f"loading zones: {built} of {zones}, {records} records"
        log.info("zone source: %s", text)
        if self._progress is not None:
            self._progress(text)


@attrs.frozen
class BuiltZones:
    """What ``build_zones`` made of each zone asked for."""

    built: dict[str, ZoneIndex]
    """Each zone that exists and could be served, in the order asked, as an index of its
    own."""
    refused: dict[str, ZoneError]
    """Each zone that exists but cannot be served, with the first reason found."""
    missing: tuple[str, ...]
    """The zones asked for that the database does not hold."""
    plain: frozenset[str]
    """The zones whose every owner is written plainly (``plain_owner``)."""


def build_zones(
    conn: psycopg.Connection[Any],
    zones: Sequence[str],
    progress: LoadProgress | None = None,
) -> BuiltZones:
    """Read every record of ``zones`` (canonical names) in one snapshot and index each
    zone once. A zone that exists but holds no records is refused as the index refuses
    a zone without SOA."""
    wanted = list(dict.fromkeys(zones))
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        held = {name for (name,) in conn.execute(
            "SELECT name FROM zones WHERE name = ANY(%s)", (wanted,))}
        existing = [zone for zone in wanted if zone in held]
        builders: dict[str, Builder | None] = {zone: Builder() for zone in existing}
        refused: dict[str, ZoneError] = {}
        unplain: set[str] = set()
        records = 0
        for batch in record_batches(conn, existing):
            for zone, owner, rtype, ttl, rdata in batch:
                builder = builders[zone]
                if builder is None:
                    continue  # refused already
                try:
                    if not builder.add_fields(zone, owner, rtype, int(ttl), rdata) and (
                        not plain_owner(owner)
                    ):
                        unplain.add(zone)
                except ZoneError as exc:
                    refused[zone] = exc
                    builders[zone] = None
            records += len(batch)
            if progress is not None:
                progress(0, len(existing), records)
    built: dict[str, ZoneIndex] = {}
    for done, zone in enumerate(existing, start=1):
        builder = builders.pop(zone)
        if builder is not None:
            try:
                index = ZoneIndex(*builder.finish())
            except ZoneError as exc:
                refused[zone] = exc
            else:
                if zone in index.zones:
                    built[zone] = index
                else:
                    refused[zone] = no_records(zone)
        if progress is not None:
            progress(done, len(existing), records)
    return BuiltZones(
        built=built,
        refused={zone: refused[zone] for zone in existing if zone in refused},
        missing=tuple(sorted(zone for zone in wanted if zone not in held)),
        plain=frozenset(zone for zone in built if zone not in unplain),
    )

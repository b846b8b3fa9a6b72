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

``build_zones`` feeds the rows to one ``Builder`` per zone (``ZoneRows``) and freezes
each zone once at the end, telling ``progress`` how far it got as it goes. A zone that
cannot be served is refused on its own: the others are built all the same, and the
caller decides what a refusal means. The rows take the compiled way when it is built
(``dns.zone.rows``): C takes the lines from libpq itself (through the libpq psycopg
loaded, ``compiled_libpq``) and adds the plain rows, handing every other line back to
be split (``copy_fields``) and added by ``Builder.add_fields``, the reference (measured
at 10^6 rows: 0.6 s of this process's CPU where taking the lines one Python call each
cost 0.8 to 0.9 s before anything was done with them, and adding them 1.7 s more). A
line PostgreSQL would never send is an ``OperatorStateError`` either way.
"""

from __future__ import annotations

import codecs
import functools
import logging
import os
import re
import select
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import psycopg
from psycopg import pq, sql

from valis_core.clock import Clock
from valis_core.dns.wire.records import ZoneError
from valis_core.dns.zone import ZoneIndex, rows
from valis_core.dns.zone.build import Builder
from valis_core.log_throttle import LogThrottle
from valis_core.operator_state.connection import OperatorStateError

BATCH = 10_000
"""Rows handed on at a time."""

PROGRESS_EVERY = 1.0
"""Seconds between two lines telling how a load goes."""

log = logging.getLogger("valis.zone_source")

LoadProgress = Callable[[int, int, int], None]
"""Called as ``progress(zones_built, zones, records_read)`` after every batch of rows and
every zone built (often: the caller decides how often to tell anyone)."""

COLUMNS = ("zone", "owner", "rtype", "ttl", "rdata")
"""The columns a load reads, in the order of its ``COPY``: all of them, or all but the
zone when it reads one zone (``ZoneRows.columns``)."""

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
    (all text, ``copy_fields``), in batches of up to ``BATCH``, read by one ``COPY``
    inside the caller's transaction (or its own statement, in autocommit). The
    connection is idle again when the iterator is exhausted; one abandoned part way
    leaves it unusable (close it)."""
    encoding = conn.info.encoding
    for lines in copy_lines(conn, zones):
        yield [copy_fields(line, encoding) for line in lines]


def copy_lines(
    conn: psycopg.Connection[Any], zones: Sequence[str], columns: Sequence[str] = COLUMNS
) -> Iterator[list[bytes]]:
    """The lines of a ``COPY`` of ``columns`` of every record of ``zones``, as libpq
    gives them (each with its newline), in batches of up to ``BATCH``.

    libpq is driven without blocking (psycopg's calls keep the interpreter while libpq
    waits): rows are taken while libpq holds them, and only when it holds none is the
    socket waited on, so a ``cancel_safe`` from another thread ends the read promptly."""
    pgconn = _start_copy(conn, zones, columns)
    get = pgconn.get_copy_data
    batch: list[bytes] = []
    while True:
        size, data = get(1)
        if size > 0:
            batch.append(bytes(data))
            if len(batch) == BATCH:
                yield batch
                batch = []
        elif size == 0:  # nothing buffered: wait for the server
            _wait(pgconn, select.POLLIN)
            pgconn.consume_input()
        else:
            break
    _finish(pgconn, _next_result(pgconn), conn.info.encoding)
    if batch:
        yield batch


def _start_copy(
    conn: psycopg.Connection[Any], zones: Sequence[str], columns: Sequence[str]
) -> pq.abc.PGconn:
    """Send the ``COPY`` of ``columns`` of every record of ``zones``; libpq, ready to
    give its rows."""
    pgconn = conn.pgconn
    query = sql.SQL("COPY (SELECT {} FROM records WHERE zone = ANY({})) TO STDOUT").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Literal(list(zones)))
    pgconn.send_query(query.as_bytes(conn))
    while pgconn.flush():
        if _wait(pgconn, select.POLLIN | select.POLLOUT) & select.POLLIN:
            pgconn.consume_input()
    started = _next_result(pgconn)
    if started is None or started.status != pq.ExecStatus.COPY_OUT:
        _finish(pgconn, started, conn.info.encoding)
        raise psycopg.OperationalError(_message(pgconn, "COPY did not start"))
    return pgconn


def copy_fields(line: bytes, encoding: str, columns: Sequence[str] = COLUMNS) -> list[str]:
    """One line of ``COPY``'s text format (its newline included) as its fields (one for
    each of ``columns``), unescaped; a line that is not one (which PostgreSQL never
    sends) is an ``OperatorStateError`` saying what is wrong with it."""
    try:
        text = str(line, encoding)
    except UnicodeDecodeError as exc:
        raise _bad_row(line, f"it is not {encoding} text ({exc.reason})") from None
    if not text.endswith("\n"):
        raise _bad_row(line, "it does not end with a newline")
    fields = text[:-1].split("\t")
    if len(fields) != len(columns):
        raise _bad_row(line, f"it has {len(fields)} fields, not {len(columns)}")
    if "\\" in text:
        for column, field in zip(columns, fields, strict=True):
            if field == "\\N":
                raise _bad_row(line, f"its {column} is NULL")
        fields = [_COPY_ESCAPE.sub(_unescape, field) for field in fields]
    return fields


def _bad_row(line: bytes, why: str) -> OperatorStateError:
    shown = line[:200].decode("utf-8", "backslashreplace")
    return OperatorStateError(
        f"operator state: a row of the records table read by COPY cannot be used: {why}"
        f" ({shown!r}); check the database's records table and its client encoding"
    )


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
    *,
    compiled: bool = True,
) -> BuiltZones:
    """Read every record of ``zones`` (canonical names) in one snapshot and index each
    zone once. A zone that exists but holds no records is refused as the index refuses
    a zone without SOA. The rows take the compiled way when it is built (``ZoneRows``),
    straight from libpq when ``compiled_libpq`` found it; ``compiled=False`` takes the
    Python way only (the reference)."""
    wanted = list(dict.fromkeys(zones))
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        held = {name for (name,) in conn.execute(
            "SELECT name FROM zones WHERE name = ANY(%s)", (wanted,))}
        existing = [zone for zone in wanted if zone in held]
        load = ZoneRows(existing, conn.info.encoding, compiled=compiled)
        told = _Told(progress, len(existing))
        if load.compiled and compiled_libpq() is not None:
            _read_compiled(conn, load, told)
        else:
            for lines in copy_lines(conn, existing, load.columns):
                for line in lines:
                    load.add_line(line)
                told(load.records)
        told(load.records, final=True)
    built, refused = load.finish(progress)
    return BuiltZones(
        built=built,
        refused=refused,
        missing=tuple(sorted(zone for zone in wanted if zone not in held)),
        plain=frozenset(zone for zone in built if zone not in load.unplain),
    )


def _read_compiled(conn: psycopg.Connection[Any], load: ZoneRows, told: _Told) -> None:
    """The rows of ``load``'s zones taken from libpq by the compiled reader, each line it
    hands back added the Python way; as ``copy_lines``, without blocking in libpq."""
    reader = load.reader
    assert reader is not None
    pgconn = _start_copy(conn, load.zones, load.columns)
    while True:
        # The PGconn * as a number, asked anew each time (a connection closed meanwhile
        # has none, and is never read through a stale pointer).
        pointer: int | None = getattr(pgconn, "pgconn_ptr", None)
        if pointer is None:
            raise psycopg.OperationalError(_message(pgconn, "connection lost reading records"))
        status, taken, line = reader.read(pointer, BATCH - load.records % BATCH)
        load.records += taken
        if line is not None:
            load.add_line_python(line)
        told(load.records)
        if status == rows.WAIT:
            _wait(pgconn, select.POLLIN)
            pgconn.consume_input()
        elif status in (rows.DONE, rows.FAILED):
            break
    _finish(pgconn, _next_result(pgconn), conn.info.encoding)


class _Told:
    """Tells ``progress`` of the records read at every ``BATCH`` and at the end."""

    def __init__(self, progress: LoadProgress | None, zones: int) -> None:
        self._progress = progress
        self._zones = zones
        self._next = BATCH
        self._last = 0

    def __call__(self, records: int, *, final: bool = False) -> None:
        if self._progress is None or not (
            records >= self._next or (final and records != self._last)
        ):
            return
        self._next = (records // BATCH + 1) * BATCH
        self._last = records
        self._progress(0, self._zones, records)


class ZoneRows:
    """The zones of one load as their rows arrive: one ``Builder`` each, the first
    refusal of each zone refused, and which zones hold owners not written plainly.

    A line goes to the compiled reader first (``rows.RowReader``, when it is built and
    the connection's encoding is ASCII with more), and the Python way when the reader
    hands it back, or for every line with ``compiled=False``: split and unescaped
    (``copy_fields``), then ``Builder.add_fields``. The two give the same zones,
    refusals and errors (tests/property/test_zone_rows.py)."""

    def __init__(self, zones: Sequence[str], encoding: str, *, compiled: bool = True) -> None:
        self.zones = list(zones)
        self.encoding = encoding
        types: dict[str, int] = {}  # one for all the builders (``Builder``'s doc)
        self.builders: dict[str, Builder | None] = {
            zone: Builder(types) for zone in self.zones
        }
        self.refused: dict[str, ZoneError] = {}
        self.unplain: set[str] = set()
        self.records = 0
        """Lines added (or skipped, their zone refused)."""
        self._positions = {zone: position for position, zone in enumerate(self.zones)}
        self._armed: set[str] = set()
        self.columns = COLUMNS[1:] if len(self.zones) == 1 else COLUMNS
        """The columns of its lines: one zone's leave the zone out (a fifth less for the
        server to write, measured)."""
        self.reader: rows.RowReader | None = None
        if compiled and rows.COMPILED and codecs.lookup(encoding).name in _ASCII_MORE:
            self.reader = rows.RowReader([zone.encode(encoding) for zone in self.zones],
                                         zone_column=self.columns == COLUMNS)

    @property
    def compiled(self) -> bool:
        return self.reader is not None

    def add_line(self, line: bytes) -> None:
        """Add one line of the ``COPY`` (its newline included)."""
        if self.reader is not None and self.reader.line(line):
            self.records += 1
        else:
            self.add_line_python(line)

    def add_line_python(self, line: bytes) -> None:
        """Add one line the Python way."""
        self.records += 1
        fields = copy_fields(line, self.encoding, self.columns)
        zone, owner, rtype, ttl, rdata = fields if len(fields) == 5 else [self.zones[0], *fields]
        if zone not in self.builders:
            raise _bad_row(line, f"its zone {zone!r} is not one of those asked for")
        builder = self.builders[zone]
        if builder is None:
            return  # refused already
        try:
            seconds = int(ttl)
        except ValueError:
            raise _bad_row(line, f"its TTL {ttl!r} is not a number") from None
        try:
            if not builder.add_fields(zone, owner, rtype, seconds, rdata) and (
                not plain_owner(owner)
            ):
                self.unplain.add(zone)
        except ZoneError as exc:
            self.refused[zone] = exc
            self.builders[zone] = None
            if self.reader is not None:
                self.reader.refuse(self._positions[zone])
            return
        if self.reader is not None and zone not in self._armed:
            self._armed.add(zone)
            self.reader.arm(self._positions[zone], builder, zone)

    def finish(
        self, progress: LoadProgress | None = None
    ) -> tuple[dict[str, ZoneIndex], dict[str, ZoneError]]:
        """Freeze each zone once: those built, in the order asked, and those refused."""
        built: dict[str, ZoneIndex] = {}
        refused = self.refused
        self.reader = None  # it holds the zones' parts: each is freed once it is frozen
        for done, zone in enumerate(self.zones, start=1):
            builder = self.builders.pop(zone)
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
                progress(done, len(self.zones), self.records)
        return built, {zone: refused[zone] for zone in self.zones if zone in refused}


_ASCII_MORE = frozenset({"utf-8", "ascii", "iso8859-1"})
"""Encodings in which a byte below 0x80 is always that ASCII character (the compiled
reader hands back every line holding another byte)."""


@functools.cache
def compiled_libpq() -> int | None:
    """The version of the libpq psycopg loaded, once the compiled reader reads through
    it; ``None`` (the rows are taken one Python call each) when it cannot be told which
    libpq that is: exactly one must be mapped in this process, of psycopg's version.
    Which way the rows go is logged once."""
    if not rows.COMPILED:
        log.info("zone source: the compiled row reader is not built; rows take the Python way")
        return None
    found, why = _libpq_path()
    version = None
    if found is not None:
        try:
            version = rows.use_libpq(found)
        except OSError as exc:
            why = str(exc)
        else:
            if version != pq.version():
                why = f"{found} is libpq {version}, psycopg's is {pq.version()}"
    if why:
        log.info("zone source: rows are taken from psycopg one at a time (%s)", why)
        return None
    log.info("zone source: the compiled row reader reads rows through %s", found)
    return version


def _libpq_path() -> tuple[str | None, str]:
    """The one libpq mapped in this process, or why there is none to name."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            found = {
                path for line in maps
                if (path := line.split(maxsplit=5)[-1].strip()).startswith("/")
                and os.path.basename(path).startswith("libpq")
            }
    except OSError as exc:
        return None, f"cannot read /proc/self/maps: {exc.strerror}"
    if len(found) != 1:
        return None, f"{len(found)} libpq libraries are loaded, not one"
    return found.pop(), ""

"""Reading RFC 1035 master files into records, quickly for the plain lines big zones hold.

dnspython's master-file reader understands the whole format (``$GENERATE``, parentheses,
quoting, escapes, every type) but tokenizes one character at a time, so a million-line
zone takes minutes. Lines of the plain shape zones are made of, ``$ORIGIN`` and ``$TTL``
with a plain value and ``owner [ttl] [IN] type rdata`` of the types in ``_PLAIN_TYPES``
without escapes or parentheses (quotes only around a TXT record's strings), are decoded
here directly (their runs in C, ``_master.c``, with ``plain_line`` the reference), and
dnspython is not even imported for a file made only of them. Every other line
(multi-line records, other types, other directives, anything doubtful) goes to
dnspython's reader
(``master_general``) together with the state the file has built up so far (origin,
previous owner, TTLs), and the state comes back afterwards, so the file reads exactly as
dnspython alone would read it. ``$INCLUDE`` is never followed.
"""

from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

import valis_core.dns.wire.names as wire
from valis_core.dns.wire._reading import (
    Emit,
    Lines,
    MasterFileError,
    ReadingState,
    Record,
    parenthesis_depth,
)
from valis_core.dns.wire.plain_types import AAAA, CNAME, MX, NS, PTR, SOA, SRV, A

_UINT32 = 2**32 - 1
"""The largest TTL dnspython's reader takes (the index refuses above RFC 2181's 2**31 - 1),
and the largest serial."""


def _spellings(word: str) -> list[str]:
    """``word`` in every mix of cases: dnspython takes mnemonics so, and one dictionary
    lookup of the token as written is the cheapest test."""
    return ["".join(chars) for chars in itertools.product(*({c, c.lower()} for c in word))]


TXT = 16

_PLAIN_TYPES = {
    spelling: number
    for word, number in (
        ("A", A),
        ("NS", NS),
        ("CNAME", CNAME),
        ("SOA", SOA),
        ("PTR", PTR),
        ("MX", MX),
        ("AAAA", AAAA),
        ("SRV", SRV),
        ("TXT", TXT),
    )
    for spelling in _spellings(word)
}
_CLASS_IN = frozenset(_spellings("IN"))
_NAME_RDATA = frozenset({NS, CNAME, PTR})
_DOUBTFUL = re.compile(r"[^\t\n\x20-\x27\x2a-\x5b\x5d-\x7e]")
"""What a plain line never holds: anything but printable ASCII and tabs, and backslashes
and parentheses. (A quote may stand in a TXT record's strings: ``plain_line`` reads a
line with quotes only as such, ``_quoted_tokens``.)"""
_QUOTED_TOKEN = re.compile(r'[ \t]*(?:("[^"]*")|([^ \t"]+))(?=[ \t]|$)')
"""One token of a line with quotes: a quoted string or a word without quotes, each ended
by a blank or the end of the line (dnspython would also read ``"a""b"``; that is its)."""
_MAX_STRING = 255
_ROW_DOUBTFUL = re.compile(r"[^\t\x20\x21\x23-\x27\x2a-\x3a\x3c-\x5b\x5d-\x7e]")
"""What the rdata of a row ``row_rdata`` reads never holds: anything but printable ASCII,
blanks and tabs, and quotes, backslashes, parentheses and semicolons (dnspython's
tokenizer gives those a meaning)."""
_OCTETS = {str(value): value for value in range(256)}
"""The spellings of an IPv4 address's octet dnspython takes: decimal, no leading zero."""
_SOA_TIMERS = struct.Struct("!IIIII")
_SRV_FIELDS = struct.Struct("!HHH")

_plain_lines: Callable[..., tuple[int, bytes | None, int | None]] | None
RecordTable: type[_master.RecordTable] | None
"""Records read into C memory (``read_master(text, origin, table.append)``): a table of
them without a Python object per record, for a reader of the whole file that needs
only their values (``zone.check.clean_count``); None when not built."""
try:  # the compiled reading of a run of plain lines (_master.c), equal to plain_line's
    from valis_core.dns.wire import _master
    from valis_core.dns.wire._master import plain_lines as _plain_lines

    RecordTable = _master.RecordTable
except ImportError:  # not built: plain_line reads every line
    _plain_lines = RecordTable = None
COMPILED = _plain_lines is not None
"""Whether the compiled plain lines are built (without them the plain path is Python's
alone)."""


if TYPE_CHECKING:
    Table: TypeAlias = _master.RecordTable
    """The type of a ``RecordTable`` (for annotations outside this package)."""


class TableLines:
    """``read_master``'s ``positions`` for the records it emits to a ``RecordTable``
    (``table.append``): each line goes to the table's last record, as the records the
    compiled plain lines write there carry theirs already."""

    __slots__ = ("append",)

    def __init__(self, table: Table) -> None:
        self.append = table.set_line


def read_master(
    text: str,
    origin: str | None,
    emit: Emit,
    *,
    problems: list[MasterFileError] | None = None,
    positions: Lines | None = None,
) -> None:
    """Feed every record of ``text`` to ``emit``; raise ``MasterFileError`` if it does
    not parse. ``origin`` (an absolute name) resolves relative names until a ``$ORIGIN``
    line changes it.

    With ``problems``, every faulty entry is appended there and reading goes on after
    it (a checker reports all of them in one run); with ``positions``, the line of each
    emitted record is appended there, in emitting order."""
    state = ReadingState(wire.from_text(origin) if origin is not None else None)
    if "\r" in text:  # a line's one final carriage return is not part of it
        text = text.replace("\r\n", "\n").removesuffix("\r")
    lines = text.split("\n")
    doubtful = _doubtful_lines(text)
    marks = sorted(doubtful)  # where each run of plain lines ends
    mark = 0
    pending: list[str] = []  # consecutive lines for dnspython, read in one go
    first = 0
    depth = 0
    opened = 0  # the line whose parenthesis the pending lines have left open
    number = 0
    while number < len(lines):  # bounded: each pass reads one line or more
        line = lines[number]
        number += 1
        plain = number not in doubtful
        if pending and plain and depth <= 0:
            _read_pending(pending, first, state, emit, problems, positions)
            pending.clear()
            depth = 0
        if plain and not pending and _plain_lines is not None:
            while mark < len(marks) and marks[mark] < number:
                mark += 1
            stop = marks[mark] - 1 if mark < len(marks) else len(lines)
            after = compiled_run(lines, number - 1, stop, state, emit, positions)
            if after >= number:
                number = after
                continue
        if not pending:
            record = plain_line(line, state) if plain else None
            if record is not None:
                if record:
                    emit(record)
                    if positions is not None:
                        positions.append(number)
                continue
            first = number
        pending.append(line)
        if depth <= 0:
            opened = number
        depth += parenthesis_depth(line)
    if pending and depth > 0:
        _unclosed(pending, first, opened, state, emit, problems, positions)
    elif pending:
        _read_pending(pending, first, state, emit, problems, positions)


def _doubtful_lines(text: str) -> set[int]:
    """The lines (numbered from 1) holding a character no plain line holds, found in one
    pass over the text rather than line by line: most lines of a large zone hold none."""
    found: set[int] = set()
    line = 1
    counted = 0  # newlines are counted up to here
    start = 0
    while (match := _DOUBTFUL.search(text, start)) is not None:  # each pass ends a line
        where = match.start()
        line += text.count("\n", counted, where)
        counted = where
        found.add(line)
        start = text.find("\n", where) + 1
        if not start:
            break
    return found


def _read_pending(  # noqa: PLR0917 - read_master's reading state, handed on
    lines: list[str],
    first: int,
    state: ReadingState,
    emit: Emit,
    problems: list[MasterFileError] | None,
    positions: Lines | None,
) -> None:
    """Read lines the plain path did not take one by one: one record that parentheses
    hold across them (an SOA as most files write it) as ``plain_line`` reads it joined,
    else all of them with dnspython."""
    record = _grouped_record(lines, state)
    if record is None:
        _read_with_dnspython(lines, first, state, emit, problems, positions)
        return
    emit(record)
    if positions is not None:
        positions.append(first)


_GROUP_DOUBTFUL = re.compile(r'[^\t\x20\x21\x23-\x5b\x5d-\x7e]')
"""What lines joined by parentheses never hold for ``_grouped_record``: anything but
printable ASCII and tabs, and quotes and backslashes (parentheses may stand anywhere)."""


def _grouped_record(lines: list[str], state: ReadingState) -> Record | None:
    """The record of ``lines`` when they are one entry, a pair of parentheses (or
    several) opened on the first line holding it open to the last, and ``plain_line``
    reads it with each comment cut and each parenthesis a blank, as dnspython's
    tokenizer sees them; None otherwise (``state`` unchanged)."""
    if not lines or lines[0][:1] in ("", "(", ")", "$", ";"):
        return None
    parts = []
    depth = 0
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if _GROUP_DOUBTFUL.search(line) is not None:
            return None
        data = line.split(";", 1)[0]
        for char in data:
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth < 0:
                    return None
        if depth == 0 and number != last:
            return None  # closed before the last line: more than one entry
        parts.append(data)
    if depth:
        return None
    record = plain_line(" ".join(parts).replace("(", " ").replace(")", " "), state)
    return record or None


def _read_with_dnspython(  # noqa: PLR0917 - read_master's reading state, handed on
    lines: list[str],
    first: int,
    state: ReadingState,
    emit: Emit,
    problems: list[MasterFileError] | None = None,
    positions: Lines | None = None,
) -> None:
    """Read some lines with dnspython's reader (imported only now: a plain file never
    needs it), starting from and updating ``state``."""
    from valis_core.dns.wire.master_general import read_general

    read_general(lines, first, state, emit, problems, positions)


def _unclosed(  # noqa: PLR0917 - read_master's reading state, handed on
    pending: list[str],
    first: int,
    opened: int,
    state: ReadingState,
    emit: Emit,
    problems: list[MasterFileError] | None,
    positions: Lines | None,
) -> None:
    """The file ended inside parentheses: read what came before the opening line, then
    name the line that opened them (dnspython would only name the end of the file)."""
    before = opened - first
    if before:
        _read_with_dnspython(pending[:before], first, state, emit, problems, positions)
    error = MasterFileError(
        opened,
        "a parenthesis opened on this line is never closed; close it with ')' after the "
        "record's last field",
    )
    if problems is None:
        raise error
    problems.append(error)
    # Carry on at the next line that starts an entry of its own (an owner in column 1).
    for offset, line in enumerate(pending[before + 1 :], opened + 1):
        if line[:1] not in ("", " ", "\t", ";"):
            _read_with_dnspython(
                pending[offset - first :], offset, state, emit, problems, positions
            )
            return


def plain_line(line: str, state: ReadingState) -> tuple[()] | Record | None:
    """The record of a line without ``_DOUBTFUL`` characters, ``()`` for a line with no record
    (nothing on it, or a directive this took), or ``None`` when the line needs dnspython
    after all. ``state`` changes only when the result is not ``None``."""
    cut = line.find(";")
    quoted = '"' in line
    if not quoted:
        if cut >= 0:
            line = line[:cut]
        tokens = line.split()
    elif cut >= 0:
        return None  # which ";" starts the comment is dnspython's to say
    else:
        found = _quoted_tokens(line)
        if not found:
            return None
        tokens = found
    origin = state.origin
    if not tokens:
        # dnspython takes a line that starts blank for the previous owner's next record,
        # which needs an origin even when nothing follows.
        return None if origin is None and line[:1] in (" ", "\t") else ()
    head = line[0]
    if head in " \t":
        owner = state.last_owner
        i = 0
    elif head == "$":
        return _directive(tokens, state)
    else:
        owner = _name(tokens[0], origin)
        i = 1
    if owner is None or origin is None:
        return None  # dnspython refuses any record before the origin is known
    # A TTL and the class may stand before the type, in either order (never last).
    count = len(tokens)
    if i == count:
        return None
    token = tokens[i]
    ttl: int | None = None
    if i + 1 < count:
        if token.isdigit():
            ttl = int(token)
            i += 1
            token = tokens[i]
            if token in _CLASS_IN and i + 1 < count:
                i += 1
                token = tokens[i]
        elif token in _CLASS_IN:
            i += 1
            token = tokens[i]
            if token.isdigit() and i + 1 < count:
                ttl = int(token)
                i += 1
                token = tokens[i]
    rtype = _PLAIN_TYPES.get(token)
    if rtype is None or (ttl is not None and ttl > _UINT32):
        return None
    if quoted and (rtype != TXT or any(token[0] == '"' for token in tokens[: i + 1])):
        return None  # a quote outside a TXT record's strings
    if rtype == A:  # the bulk of a large zone
        rdata = ipv4(tokens[i + 1]) if i + 2 == count else None
    elif rtype == TXT:
        rdata = _txt(tokens[i + 1 :])
    else:
        rdata = _plain_rdata(rtype, tokens[i + 1 :], origin)
    if rdata is None:
        return None
    # dnspython's pre-RFC 2308 rule: without $TTL, the first SOA's minimum is the default.
    soa_default = rtype == SOA and not state.default_ttl_known
    if ttl is not None:
        state.last_ttl = ttl
        state.last_ttl_known = True
    else:
        ttl = state.implicit_ttl()
        if ttl is None and not soa_default:
            return None  # dnspython says no TTL is known (nothing was changed)
    if soa_default:
        state.default_ttl = _SOA_TIMERS.unpack_from(rdata, len(rdata) - 20)[4]
        state.default_ttl_known = True
        state.default_ttl_from_soa = True
    state.last_owner = owner
    return owner, rtype, state.default_ttl if ttl is None else ttl, rdata


def compiled_run(  # noqa: PLR0917 - read_master's reading state, handed on
    lines: list[str],
    start: int,
    stop: int,
    state: ReadingState,
    emit: Emit,
    positions: Lines | None,
) -> int:
    """Read ``lines[start:stop]`` (plain lines) in C while each is a record of a type C
    reads (or holds none), exactly as ``plain_line`` reads them from ``state``, emitting
    their records and updating ``state``; return the index of the first line not read
    (``start`` if none was)."""
    origin = state.origin
    if _plain_lines is None or origin is None:
        return start
    if isinstance(positions, TableLines):
        lines_told: list[int] | Callable[[int], object] | None = positions.append
    elif positions is None or isinstance(positions, list):
        lines_told = positions
    else:
        return start  # C appends to a list or tells a table; another receiver, Python's
    follows = not state.default_ttl_known or state.default_ttl_from_soa
    after, owner, stated = _plain_lines(
        lines,
        start,
        stop,
        origin,
        state.last_owner,
        state.implicit_ttl(),
        follows,
        emit,
        lines_told,
    )
    if owner is not None:
        state.last_owner = owner
    if stated is not None:
        state.last_ttl = stated
        state.last_ttl_known = True
    return after


def _quoted_tokens(line: str) -> list[str] | None:
    """The tokens of a line with quotes and no comment, quoted strings with their quotes;
    ``None`` if a quote stands anywhere but around a whole token."""
    tokens = []
    at = 0
    end = len(line.rstrip(" \t"))
    while at < end:  # bounded: each match moves past one token
        match = _QUOTED_TOKEN.match(line, at, end)
        if match is None:
            return None
        tokens.append(match.group(1) or match.group(2))
        at = match.end()
    return tokens


def _txt(fields: list[str]) -> bytes | None:
    """TXT rdata of words and quoted strings without escapes, each a character-string."""
    out = bytearray()
    for field in fields:
        text = field[1:-1] if field[0] == '"' else field
        if len(text) > _MAX_STRING or not text.isascii():
            return None
        out.append(len(text))
        out += text.encode("ascii")
    return bytes(out) if fields else None


def _directive(tokens: list[str], state: ReadingState) -> tuple[()] | None:
    """``$TTL`` in seconds and ``$ORIGIN`` with a plain name; ``None`` for anything else."""
    if len(tokens) != 2:
        return None
    keyword = tokens[0].upper()
    if keyword == "$TTL":
        ttl = _uint(tokens[1], _UINT32)
        if ttl is None:
            return None
        state.default_ttl = ttl
        state.default_ttl_known = True
        state.default_ttl_from_soa = False
        return ()
    if keyword == "$ORIGIN":
        origin = _name(tokens[1], state.origin)
        if origin is None:
            return None
        state.origin = origin
        return ()
    return None


def _name(token: str, origin: bytes | None) -> bytes | None:
    """A plain name token made absolute, or ``None`` if it needs dnspython's judgement."""
    if token[-1] != ".":
        if token == "@" or origin is None:
            return origin
        labels = wire.plain_labels(token)
        if labels is None or len(labels) + len(origin) > wire.MAX_NAME:
            return None
        return labels + origin
    if token == ".":
        return wire.ROOT
    labels = wire.plain_labels(token[:-1])
    if labels is None or len(labels) >= wire.MAX_NAME:
        return None
    return labels + wire.ROOT


def _uint(token: str, limit: int) -> int | None:
    if not token.isdigit():
        return None
    value = int(token)
    return value if value <= limit else None


def _plain_rdata(rtype: int, fields: list[str], origin: bytes | None) -> bytes | None:
    """The wire form of the rdata fields of a plain type other than A (``plain_line``
    decodes that itself), or ``None`` for dnspython. Without an ``origin`` only absolute
    names are read."""
    count = len(fields)
    if rtype in _NAME_RDATA:
        return _name(fields[0], origin) if count == 1 else None
    if rtype == AAAA:
        return _ipv6(fields[0]) if count == 1 else None
    if rtype == MX and count == 2:
        preference = _uint(fields[0], 0xFFFF)
        exchange = _name(fields[1], origin)
        if preference is None or exchange is None:
            return None
        return struct.pack("!H", preference) + exchange
    if rtype == SOA and count == 7:
        mname = _name(fields[0], origin)
        rname = _name(fields[1], origin)
        numbers = [_uint(field, _UINT32) for field in fields[2:]]
        if mname is None or rname is None or None in numbers:
            return None
        return mname + rname + _SOA_TIMERS.pack(*numbers)
    if rtype == SRV and count == 4:
        shorts = [_uint(field, 0xFFFF) for field in fields[:3]]
        target = _name(fields[3], origin)
        if target is None or None in shorts:
            return None
        return _SRV_FIELDS.pack(*shorts) + target
    return None


def row_rdata(rtype: int, text: str) -> bytes | None:
    """The wire form of a row's rdata (presentation form, names absolute) of A and the
    types ``_plain_rdata`` reads, exactly as ``dns.rdata.from_text`` (and, for A,
    ``dns.ipv4.inet_aton``) gives it; ``None`` when it needs dnspython's judgement, which
    includes every text dnspython refuses."""
    if rtype == A:
        return ipv4(text)
    if rtype == AAAA or _ROW_DOUBTFUL.search(text) is not None:
        return None
    return _plain_rdata(rtype, text.split(), None)


def ipv4(text: str) -> bytes | None:
    """A dotted quad as dnspython's ``inet_aton`` takes it (four decimal octets, no
    leading zeros); ``None`` for anything else."""
    octets = _OCTETS
    try:
        a, b, c, d = text.split(".")
        return bytes((octets[a], octets[b], octets[c], octets[d]))
    except (KeyError, ValueError):  # not four parts, or a part not an octet
        return None


def _ipv6(text: str) -> bytes | None:
    import dns.exception  # a light part of dnspython: no names, no reader
    import dns.ipv6

    try:
        return dns.ipv6.inet_aton(text)
    except (dns.exception.DNSException, ValueError):
        return None

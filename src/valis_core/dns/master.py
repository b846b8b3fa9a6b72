"""Reading RFC 1035 master files into records, quickly for the plain lines big zones hold.

dnspython's master-file reader understands the whole format (``$ORIGIN``, ``$TTL``,
``$GENERATE``, parentheses, quoting, escapes, every type) but tokenizes one character at
a time, so a million-line zone takes minutes. Lines of the plain shape large zones are
made of, ``owner [ttl] [IN] A|AAAA|NS|CNAME|PTR|MX rdata`` without quotes, escapes or
parentheses, are decoded here directly. Every other line (directives, the SOA,
multi-line records, other types, anything doubtful) goes to dnspython's reader together
with the state the file has built up so far (origin, previous owner, TTLs), and the
state comes back afterwards, so the file reads exactly as dnspython alone would read it.
``$INCLUDE`` is never followed.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

import dns.exception
import dns.ipv4
import dns.ipv6
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.tokenizer
import dns.transaction
import dns.zonefile

from valis_core.dns import wire

Emit = Callable[[bytes, int, int, bytes], None]
"""Receives each record: owner (wire form, as written), type, TTL, rdata (wire form)."""

_MAX_TTL = 2**31 - 1
_PLAIN_TYPES = {"A": 1, "NS": 2, "CNAME": 5, "PTR": 12, "MX": 15, "AAAA": 28}
_NAME_RDATA = frozenset({2, 5, 12})
_PLAIN_LINE = re.compile(r"[\t\x20\x21\x23-\x27\x2a-\x5b\x5d-\x7e]*")
"""Printable ASCII and tabs, without quotes, backslashes or parentheses."""


class MasterFileError(ValueError):
    """A master file that does not parse; ``line`` is where the faulty entry starts."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.where = f"line {line}"
        self.reason = reason
        super().__init__(f"{self.where}: {reason}")


class _State:
    """What a master file has established so far, in dnspython's reader's terms."""

    def __init__(self, origin: dns.name.Name | None) -> None:
        self.origin = origin
        self.origin_text = origin.to_text() if origin is not None else None
        self.last_owner: bytes | None = None
        self.last_ttl = 0
        self.last_ttl_known = False
        self.default_ttl = 0
        self.default_ttl_known = False
        self.default_ttl_from_soa = False

    def implicit_ttl(self) -> int | None:
        """The TTL of a record that states none (dnspython's RFC 2308 rule)."""
        if self.last_ttl_known and (not self.default_ttl_known or self.default_ttl_from_soa):
            return self.last_ttl
        if self.default_ttl_known:
            return self.default_ttl
        return None

    def give(self, reader: dns.zonefile.Reader) -> None:
        reader.current_origin = self.origin
        reader.last_name = (
            dns.name.from_wire(self.last_owner, 0)[0] if self.last_owner is not None else None
        )
        reader.last_ttl = self.last_ttl
        reader.last_ttl_known = self.last_ttl_known
        reader.default_ttl = self.default_ttl
        reader.default_ttl_known = self.default_ttl_known
        reader.default_ttl_from_soa = self.default_ttl_from_soa

    def take(self, reader: dns.zonefile.Reader) -> None:
        if reader.current_origin != self.origin:
            self.origin = reader.current_origin
            self.origin_text = self.origin.to_text() if self.origin is not None else None
        if reader.last_name is not None:
            self.last_owner = wire.name_wire(reader.last_name)
        self.last_ttl = reader.last_ttl
        self.last_ttl_known = reader.last_ttl_known
        self.default_ttl = reader.default_ttl
        self.default_ttl_known = reader.default_ttl_known
        self.default_ttl_from_soa = reader.default_ttl_from_soa


def read_master(
    text: str,
    origin: dns.name.Name | None,
    emit: Emit,
    *,
    problems: list[MasterFileError] | None = None,
    positions: list[int] | None = None,
) -> None:
    """Feed every record of ``text`` to ``emit``; raise ``MasterFileError`` if it does
    not parse. ``origin`` resolves relative names until a ``$ORIGIN`` line changes it.

    With ``problems``, every faulty entry is appended there and reading goes on after
    it (a checker reports all of them in one run); with ``positions``, the line of each
    emitted record is appended there, in emitting order."""
    state = _State(origin)
    pending: list[str] = []  # consecutive lines for dnspython, read in one go
    first = 0
    depth = 0
    opened = 0  # the line whose parenthesis the pending lines have left open
    number = 0
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        plain = not line.startswith("$") and _PLAIN_LINE.fullmatch(line) is not None
        if pending and plain and depth <= 0:
            _read_with_dnspython(pending, first, state, emit, problems, positions)
            pending.clear()
            depth = 0
        if not pending:
            record = _plain_line(line, state) if plain else None
            if record is not None:
                if record:
                    emit(*record)
                    if positions is not None:
                        positions.append(number)
                continue
            first = number
        pending.append(line)
        if depth <= 0:
            opened = number
        depth += _parenthesis_depth(line)
    if pending and depth > 0:
        _unclosed(pending, first, opened, state, emit, problems, positions)
    elif pending:
        _read_with_dnspython(pending, first, state, emit, problems, positions)


def _unclosed(  # noqa: PLR0917 - read_master's reading state, handed on
    pending: list[str],
    first: int,
    opened: int,
    state: _State,
    emit: Emit,
    problems: list[MasterFileError] | None,
    positions: list[int] | None,
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


def _plain_line(line: str, state: _State) -> tuple[()] | tuple[bytes, int, int, bytes] | None:
    """A plain-looking line's record, ``()`` for a line with nothing on it, or ``None``
    when the line needs dnspython after all. State changes only when a record is
    returned."""
    if state.origin is None:
        return None  # dnspython refuses any record before the origin is known
    cut = line.find(";")
    if cut >= 0:
        line = line[:cut]
    tokens = line.split()
    if not tokens:
        return ()
    if line[0] in " \t":
        owner = state.last_owner
        i = 0
    else:
        owner = _name(tokens[0], state.origin_text)
        i = 1
    if owner is None:
        return None
    ttl: int | None = None
    seen_class = False
    while i < len(tokens) - 1:
        token = tokens[i]
        if ttl is None and token.isdigit():
            ttl = int(token)
            if ttl > _MAX_TTL:
                return None
        elif not seen_class and token.upper() == "IN":
            seen_class = True
        else:
            break
        i += 1
    rtype = _PLAIN_TYPES.get(tokens[i].upper()) if i < len(tokens) else None
    if rtype is None:
        return None
    rdata = _plain_rdata(rtype, tokens[i + 1 :], state.origin_text)
    if rdata is None:
        return None
    if ttl is None:
        ttl = state.implicit_ttl()
        if ttl is None:
            return None
    else:
        state.last_ttl = ttl
        state.last_ttl_known = True
    state.last_owner = owner
    return owner, rtype, ttl, rdata


def _name(token: str, origin: str | None) -> bytes | None:
    """A name token made absolute, or ``None`` if it needs dnspython's judgement."""
    if token == "@":
        text = origin
    elif token.endswith("."):
        text = token
    elif origin is None:
        return None
    else:
        text = token + "." + origin if origin != "." else token + "."
    if text is None:
        return None
    try:
        return wire.from_text(text)
    except wire.BadName:
        return None


def _plain_rdata(rtype: int, tokens: list[str], origin: str | None) -> bytes | None:
    try:
        if rtype == 1 and len(tokens) == 1:
            return _ipv4(tokens[0])
        if rtype == 28 and len(tokens) == 1:
            return dns.ipv6.inet_aton(tokens[0])
    except (dns.exception.DNSException, ValueError):
        return None
    if rtype in _NAME_RDATA and len(tokens) == 1:
        return _name(tokens[0], origin)
    if rtype == 15 and len(tokens) == 2 and tokens[0].isdigit():
        preference = int(tokens[0])
        exchange = _name(tokens[1], origin)
        if preference <= 0xFFFF and exchange is not None:
            return struct.pack("!H", preference) + exchange
    return None


def _ipv4(text: str) -> bytes | None:
    """A dotted quad as dnspython's ``inet_aton`` takes it (four decimal octets, no
    leading zeros), decoded without its generality; ``None`` for anything else."""
    parts = text.split(".")
    if len(parts) != 4:
        return None
    for part in parts:
        if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
            return None
    try:
        return bytes(map(int, parts))
    except ValueError:  # an octet above 255
        return None


def _parenthesis_depth(line: str) -> int:
    """How many parentheses the line leaves open, outside quotes and comments."""
    depth = 0
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 1
        elif char == '"':
            quoted = not quoted
        elif not quoted:
            if char == ";":
                break
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
        i += 1
    return depth


def _read_with_dnspython(  # noqa: PLR0917 - read_master's reading state
    lines: list[str],
    first: int,
    state: _State,
    emit: Emit,
    problems: list[MasterFileError] | None = None,
    positions: list[int] | None = None,
) -> None:
    """Read some lines with dnspython's reader, starting from and updating ``state``;
    with ``problems``, note each faulty entry and go on after it."""
    while lines:  # each pass consumes at least one line
        tok = _EntryTokenizer("\n".join(lines) + "\n", "<zone>")

        def forward(name: dns.name.Name, ttl: int, rdata: dns.rdata.Rdata) -> None:
            data = rdata.to_wire()
            assert data is not None  # no file given, so dnspython returns the bytes
            emit(wire.name_wire(name), int(rdata.rdtype), ttl, data)
            if positions is not None:
                positions.append(first + tok.entry_line - 1)  # noqa: B023 - called at once

        reader = dns.zonefile.Reader(
            tok,
            dns.rdataclass.IN,
            _StreamTransaction(_StreamManager(state.origin), forward),
            allow_include=False,
            allow_directives={"$ORIGIN", "$TTL", "$GENERATE"},
        )
        # The reader silently skips records outside its zone; claim the whole tree
        # instead (relative names still use the origin), so the index refuses them by name.
        reader.zone_origin = dns.name.root
        state.give(reader)
        try:
            reader.read()
        except (dns.exception.DNSException, ValueError) as exc:
            entry = tok.entry_line
            error = MasterFileError(first + entry - 1, _explain(lines[entry - 1], exc))
            if problems is None:
                raise error from None
            problems.append(error)
            state.take(reader)
            resume = max(tok.line_number, _entry_end(lines, entry) + 1)
            lines = lines[resume - 1 :]
            first += resume - 1
            continue
        state.take(reader)
        return


def _entry_end(lines: list[str], entry: int) -> int:
    """The last line (1-based) of the entry starting on line ``entry``: where the
    parentheses it opens close, or the file's end if they never do."""
    depth = 0
    for number in range(entry, len(lines) + 1):
        depth += _parenthesis_depth(lines[number - 1])
        if depth <= 0:
            return number
    return len(lines)


_ADDRESS_TYPES = {"A": "IPv4", "AAAA": "IPv6"}


def _explain(line: str, exc: Exception) -> str:
    """An operator's reading of dnspython's complaint about the entry starting ``line``:
    name the field that is wrong rather than what the tokenizer expected next."""
    detail = str(exc) or type(exc).__name__
    if detail.startswith("<zone>:"):
        detail = detail.split(": ", 1)[-1]
    if "$INCLUDE" in detail:
        return detail + "; $INCLUDE is not supported, paste the included records in instead"
    tokens = line.split(";", 1)[0].split()
    unknown = re.fullmatch(r"unknown rdatatype '(.*)'", detail)
    if unknown and unknown.group(1)[:1].isdigit():
        ttl = unknown.group(1)
        if ttl.isdigit():
            return f"TTL {ttl} is larger than {_MAX_TTL} (RFC 2181)"
        return f"bad TTL {ttl!r}: write seconds (3600) or units (1h, 30m, 1d)"
    if unknown:
        return f"unknown record type {unknown.group(1)!r}"
    if line[:1] not in (" ", "\t"):
        tokens = tokens[1:]  # the owner, which may well be spelled "a"
    if detail == "Missing default TTL value":
        return "no TTL: give the record one, or start the file with a $TTL line"
    if "malformed" not in detail:
        rtype = _record_type(tokens)
        return detail if rtype is None else f"{rtype} record: {detail}"
    upper = [token.upper() for token in tokens]
    for rtype, family in _ADDRESS_TYPES.items():
        if rtype in upper[:3] and upper.index(rtype) + 1 < len(tokens):
            address = tokens[upper.index(rtype) + 1]
            return _bad_address(rtype, family, address) or detail
    return detail


def _record_type(tokens: list[str]) -> str | None:
    """The type of the record whose fields (owner removed) are ``tokens``: the first
    token that is not a TTL or class, if dnspython knows it as a type."""
    for token in tokens[:3]:
        if token[:1].isdigit() or token.upper() in ("IN", "CH", "HS", "CS"):
            continue
        try:
            return dns.rdatatype.to_text(dns.rdatatype.from_text(token.upper()))
        except (dns.exception.DNSException, ValueError):
            return None
    return None


def _bad_address(rtype: str, family: str, address: str) -> str | None:
    try:
        (dns.ipv4 if rtype == "A" else dns.ipv6).inet_aton(address)
    except (dns.exception.DNSException, ValueError):
        pass
    else:
        return None
    parts = address.split(".")
    if rtype == "A" and len(parts) == 4 and all(p.isdigit() for p in parts):
        high = next(p for p in parts if int(p) > 255) if any(int(p) > 255 for p in parts) else ""
        if high:
            return f"A address {address} is out of range: {high} is more than 255"
    if rtype == "AAAA" and ":" not in address and len(parts) == 4:
        return f"AAAA address {address} is an IPv4 address; put it in an A record"
    if rtype == "A" and ":" in address:
        return f"A address {address} is an IPv6 address; put it in an AAAA record"
    return f"{rtype} address {address!r} is not an {family} address"


class _EntryTokenizer(dns.tokenizer.Tokenizer):
    """Remembers the line each entry starts on: dnspython's own error position is the
    line after a record whose rdata failed, because the newline was already read."""

    entry_line = 1

    def get(self, want_leading: bool = False, want_comment: bool = False) -> dns.tokenizer.Token:
        if want_leading:
            self.entry_line = self.line_number
        return super().get(want_leading, want_comment)


class _StreamManager(dns.transaction.TransactionManager):
    """Just enough of a transaction manager for dnspython's master-file reader."""

    def __init__(self, origin: dns.name.Name | None) -> None:
        self.origin = origin

    def reader(self) -> dns.transaction.Transaction:  # pragma: no cover - never called
        raise NotImplementedError

    def writer(self, replacement: bool = False) -> dns.transaction.Transaction:
        raise NotImplementedError  # pragma: no cover - never called

    def origin_information(self) -> tuple[dns.name.Name | None, bool, dns.name.Name | None]:
        return (self.origin, False, self.origin)

    def get_class(self) -> dns.rdataclass.RdataClass:
        return dns.rdataclass.IN


class _StreamTransaction(dns.transaction.Transaction):
    """Hands each record the reader parses straight on, one at a time.

    dnspython's own rrset reader merges records and looks nodes up by scanning, which is
    quadratic over a large zone; the index merges and checks records itself, the same
    way for rows and files, so this transaction only forwards.
    """

    def __init__(self, manager: _StreamManager, forward: Callable[..., None]) -> None:
        super().__init__(manager, replacement=True, read_only=False)
        self.forward = forward

    def check_put_rdataset(self, check: Any) -> None:
        """The index checks CNAME-and-other-data itself, naming zone and owner."""

    def add(self, *args: Any) -> None:
        name, ttl, rdata = args
        self.forward(name, ttl, rdata)

    def _set_origin(self, origin: Any) -> None:
        pass

    def _get_rdataset(self, name: Any, rdtype: Any, covers: Any) -> None:
        return None

    def _get_node(self, name: Any) -> None:
        return None

    def _put_rdataset(self, name: Any, rdataset: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def _delete_name(self, name: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def _delete_rdataset(self, name: Any, rdtype: Any, covers: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def _name_exists(self, name: Any) -> bool:  # pragma: no cover
        return False

    def _changed(self) -> bool:  # pragma: no cover
        return True

    def _end_transaction(self, commit: bool) -> None:
        pass

    def _iterate_rdatasets(self) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _iterate_names(self) -> Any:  # pragma: no cover
        raise NotImplementedError

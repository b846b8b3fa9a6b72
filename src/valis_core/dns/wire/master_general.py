"""The master-file reader's general path: dnspython's reader, for the lines ``master``
does not decode itself (multi-line entries, quoted or escaped text, other types and
directives, and every line that does not parse).

It starts from the reading state the file has built up so far and hands it back, so a
file reads exactly as dnspython alone would read it; a faulty entry is named by the line
it starts on, in an operator's words. Kept apart so a plain file never imports dnspython.
"""

from __future__ import annotations

import re
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

import valis_core.dns.wire.names as wire
from valis_core.dns.wire._reading import (
    Emit,
    Lines,
    MasterFileError,
    ReadingState,
    parenthesis_depth,
)
from valis_core.dns.wire.records import rdata_bytes

_MAX_TTL = 2**31 - 1


def read_general(  # noqa: PLR0917 - read_master's reading state
    lines: list[str],
    first: int,
    state: ReadingState,
    emit: Emit,
    problems: list[MasterFileError] | None = None,
    positions: Lines | None = None,
) -> None:
    """Read some lines with dnspython's reader, starting from and updating ``state``;
    with ``problems``, note each faulty entry and go on after it."""
    while lines:  # each pass consumes at least one line
        tok = _EntryTokenizer("\n".join(lines) + "\n", "<zone>")

        def forward(name: dns.name.Name, ttl: int, rdata: dns.rdata.Rdata) -> None:
            data = rdata_bytes(rdata)
            emit((wire.name_wire(name), int(rdata.rdtype), ttl, data))
            if positions is not None:
                line = min(tok.entry_line, len(lines))  # noqa: B023 - called at once
                positions.append(first + line - 1)  # noqa: B023

        origin = _origin(state)
        reader = dns.zonefile.Reader(
            tok,
            dns.rdataclass.IN,
            _StreamTransaction(_StreamManager(origin), forward),
            allow_include=False,
            allow_directives={"$ORIGIN", "$TTL", "$GENERATE"},
        )
        # The reader silently skips records outside its zone; claim the whole tree
        # instead (relative names still use the origin), so the index refuses them by name.
        reader.zone_origin = dns.name.root
        _give(state, origin, reader)
        try:
            reader.read()
        except (dns.exception.DNSException, ValueError) as exc:
            # dnspython also ends a line at a lone carriage return, so its count of lines
            # can run ahead of the file's: never point past the lines it was given.
            entry = min(tok.entry_line, len(lines))
            error = MasterFileError(first + entry - 1, _explain(lines[entry - 1], exc))
            if problems is None:
                raise error from None
            problems.append(error)
            _take(state, reader)
            resume = max(tok.line_number, _entry_end(lines, entry) + 1)
            lines = lines[resume - 1 :]
            first += resume - 1
            continue
        _take(state, reader)
        return


def _origin(state: ReadingState) -> dns.name.Name | None:
    return dns.name.from_wire(state.origin, 0)[0] if state.origin is not None else None


def _give(state: ReadingState, origin: dns.name.Name | None, reader: dns.zonefile.Reader) -> None:
    reader.current_origin = origin
    reader.last_name = (
        dns.name.from_wire(state.last_owner, 0)[0] if state.last_owner is not None else None
    )
    reader.last_ttl = state.last_ttl
    reader.last_ttl_known = state.last_ttl_known
    reader.default_ttl = state.default_ttl
    reader.default_ttl_known = state.default_ttl_known
    reader.default_ttl_from_soa = state.default_ttl_from_soa


def _take(state: ReadingState, reader: dns.zonefile.Reader) -> None:
    origin = reader.current_origin
    state.origin = wire.name_wire(origin) if origin is not None else None
    if reader.last_name is not None:
        state.last_owner = wire.name_wire(reader.last_name)
    state.last_ttl = reader.last_ttl
    state.last_ttl_known = reader.last_ttl_known
    state.default_ttl = reader.default_ttl
    state.default_ttl_known = reader.default_ttl_known
    state.default_ttl_from_soa = reader.default_ttl_from_soa
def _entry_end(lines: list[str], entry: int) -> int:
    """The last line (1-based) of the entry starting on line ``entry``: where the
    parentheses it opens close, or the file's end if they never do."""
    depth = 0
    for number in range(entry, len(lines) + 1):
        depth += parenthesis_depth(lines[number - 1])
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
    if not tokens and line[:1] not in (" ", "\t", "$", "(", ""):
        return "an owner and nothing else: a record needs its type and data after the owner"
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
    line after a record whose rdata failed, because the newline was already read. A
    token handed back again was read before: reading it may already have passed the
    newline after it (an owner alone on its line), so it keeps the line it was read on."""

    entry_line = 1

    def get(self, want_leading: bool = False, want_comment: bool = False) -> dns.tokenizer.Token:
        if want_leading and self.ungotten_token is None:
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

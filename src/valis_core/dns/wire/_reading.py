"""What the two master-file readers share: the record they emit, the error naming a
line, the reading state one hands the other, and the parenthesis count.

``master`` reads the plain lines itself and hands the rest to ``master_general``
(dnspython's reader), which reads on from the same state; both take these from here so
neither imports the other's module at the top (``master`` imports ``master_general``
when a line needs it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Record = tuple[bytes, int, int, bytes]
"""One record read: owner (wire form, as written), type, TTL, rdata (wire form)."""
Emit = Callable[[Record], None]
"""Receives each record read (``list.append`` will do)."""


class Lines(Protocol):
    """Told the line each record read starts on, right after the record (a ``list[int]``
    will do)."""

    def append(self, line: int, /) -> object: ...

class MasterFileError(ValueError):
    """A master file that does not parse; ``line`` is where the faulty entry starts."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.where = f"line {line}"
        self.reason = reason
        super().__init__(f"{self.where}: {reason}")


class ReadingState:
    """What a master file has established so far, in dnspython's reader's terms (names
    in wire form, as written)."""

    __slots__ = (
        "default_ttl",
        "default_ttl_from_soa",
        "default_ttl_known",
        "last_owner",
        "last_ttl",
        "last_ttl_known",
        "origin",
    )

    def __init__(self, origin: bytes | None) -> None:
        self.origin = origin
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



def parenthesis_depth(line: str) -> int:
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

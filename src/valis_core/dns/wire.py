"""Domain names in wire form: the few operations the zone index and the answer path share.

A name is kept as its uncompressed wire bytes (length-prefixed labels ending in a zero
byte), and its lowercased form is the lookup key everywhere. Lowercasing a whole wire
name with ``bytes.lower`` is safe: a label length is at most 63, below ``ord("A")``, so
only label text changes.
"""

from __future__ import annotations

import dns.exception
import dns.name

MAX_NAME = 255
MAX_LABEL = 63
ROOT = b"\x00"


class BadName(ValueError):
    """Text that is not an absolute domain name."""


def from_text(text: str) -> bytes:
    """The uncompressed wire form of an absolute name in presentation format.

    Plain ASCII names are encoded directly (building a dnspython ``Name`` per record
    dominates loading a million-record zone); escapes and non-ASCII text go through
    dnspython, so both spell a name the same way.
    """
    if text.isascii() and "\\" not in text and text.endswith(".") and text != ".":
        out = bytearray()
        for label in text[:-1].split("."):
            size = len(label)
            if size == 0 or size > MAX_LABEL:
                break
            out.append(size)
            out += label.encode("ascii")
        else:
            out.append(0)
            if len(out) <= MAX_NAME:
                return bytes(out)
    try:
        name = dns.name.from_text(text, origin=None)
    except (dns.exception.DNSException, UnicodeError, ValueError) as exc:
        raise BadName(f"{text!r} is not a domain name ({exc})") from None
    if not name.is_absolute():
        raise BadName(f"{text!r} is not absolute; write it in full with a trailing dot")
    return name_wire(name)


def name_wire(name: dns.name.Name) -> bytes:
    """The uncompressed wire form of a dnspython name."""
    data = name.to_wire()
    assert data is not None  # no file given, so dnspython returns the bytes
    return data


def to_text(wire: bytes) -> str:
    """Presentation form of an uncompressed wire name (for messages to operators)."""
    labels = [wire[i + 1 : i + 1 + wire[i]] for i in label_offsets(wire)]
    labels.append(b"")
    return dns.name.Name(labels).to_text()


def label_offsets(wire: bytes) -> list[int]:
    """Where each label of an uncompressed wire name starts, leftmost first (the root's
    terminating zero is not a label). ``wire[i:]`` for each offset is an ancestor."""
    offsets = []
    i = 0
    while wire[i]:
        offsets.append(i)
        i += wire[i] + 1
    return offsets


def is_at_or_below(name: bytes, apex: bytes) -> bool:
    """Whether ``name`` equals ``apex`` or lies beneath it, comparing whole labels."""
    cut = len(name) - len(apex)
    if cut < 0 or name[cut:] != apex:
        return False
    i = 0
    while i < cut:
        i += name[i] + 1
    return i == cut


def parent(wire: bytes) -> bytes:
    """The name one label up; the root is its own parent."""
    return wire[wire[0] + 1 :] if wire[0] else wire


def read_name(data: bytes, offset: int) -> tuple[bytes, int]:
    """An uncompressed name stored at ``offset`` in rdata, and the offset after it."""
    i = offset
    while data[i]:
        i += data[i] + 1
    return data[offset : i + 1], i + 1

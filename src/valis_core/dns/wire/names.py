"""Domain names in wire form: the few operations the zone index and the answer path share.

A name is kept as its uncompressed wire bytes (length-prefixed labels ending in a zero
byte), and its lowercased form is the lookup key everywhere. Lowercasing a whole wire
name with ``bytes.lower`` is safe: a label length is at most 63, below ``ord("A")``, so
only label text changes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dns.name

MAX_NAME = 255
MAX_LABEL = 63
ROOT = b"\x00"
_LENGTHS = [bytes((size,)) for size in range(MAX_LABEL + 1)]
_UNESCAPED = re.compile(rb"[\x21\x23-\x27\x2a-\x2d\x2f-\x3a\x3c-\x3f\x41-\x5b\x5d-\x7e]*")
"""Label octets dnspython writes as themselves: printable ASCII but for ``"().;\\@$``."""


class BadName(ValueError):
    """Text that is not an absolute domain name."""


def from_text(text: str) -> bytes:
    """The uncompressed wire form of an absolute name in presentation format.

    Plain ASCII names are encoded directly (building a dnspython ``Name`` per record
    dominates loading a million-record zone, and importing dnspython a short check);
    escapes and non-ASCII text go through dnspython, so both spell a name the same way.
    """
    if text == ".":
        return ROOT
    if text.isascii() and "\\" not in text and text.endswith("."):
        labels = plain_labels(text[:-1])
        if labels is not None and len(labels) < MAX_NAME:
            return labels + ROOT
    import dns.exception  # only escapes, non-ASCII text and errors need dnspython
    import dns.name

    try:
        name = dns.name.from_text(text, origin=None)
    except (dns.exception.DNSException, UnicodeError, ValueError) as exc:
        raise BadName(f"{text!r} is not a domain name ({exc})") from None
    if not name.is_absolute():
        raise BadName(f"{text!r} is not absolute; write it in full with a trailing dot")
    return name_wire(name)


def plain_labels(text: str) -> bytes | None:
    """The wire form of dot-separated labels written without escapes (ASCII text, no
    backslash, no final dot), without the root; ``None`` if a label is empty or longer
    than 63 octets. The name's length is the caller's to check."""
    if "." not in text:
        size = len(text)
        return _LENGTHS[size] + text.encode("ascii") if 0 < size <= MAX_LABEL else None
    out = []
    for label in text.split("."):
        size = len(label)
        if size == 0 or size > MAX_LABEL:
            return None
        out.append(_LENGTHS[size] + label.encode("ascii"))
    return b"".join(out)


def name_wire(name: dns.name.Name) -> bytes:
    """The uncompressed wire form of a dnspython name."""
    data = name.to_wire()
    assert data is not None  # no file given, so dnspython returns the bytes
    return data


def to_text(wire: bytes) -> str:
    """Presentation form of an uncompressed wire name (for messages to operators)."""
    labels = [wire[i + 1 : i + 1 + wire[i]] for i in label_offsets(wire)]
    if not labels:
        return "."
    if _UNESCAPED.fullmatch(b"".join(labels)):
        return ".".join([label.decode("ascii") for label in labels]) + "."
    import dns.name  # only labels that need escapes need dnspython

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

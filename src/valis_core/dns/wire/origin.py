"""The origin a master file names for itself, or its file name implies: how ``valis
serve`` and ``valis zone check`` read a file given without ``--origin``. Kept apart from
the file server so a check does not load the serving stack."""

from __future__ import annotations

import os
from collections.abc import Iterator

from valis_core.errors import ValisError

ZONE_FILE_SUFFIXES = (".zone", ".db")


class ZoneFileError(ValisError):
    """A zone file that cannot be read, or whose origin cannot be told."""


def origin_of(path: str, text: str) -> str:
    """The origin a zone file names for itself (a leading ``$ORIGIN``, or the absolute
    owner of a first record that is an SOA), else the one its file name implies
    (``example.com.zone``, ``example.com.db``, ``db.example.com``, ``example.com``)."""
    named = _origin_in_text(text)
    if named is not None:
        return named
    name = os.path.basename(path)
    if name.startswith("db."):
        name = name[3:]
    for suffix in ZONE_FILE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name:
        import dns.exception  # only a file that does not name its origin needs dnspython
        import dns.name

        try:
            return dns.name.from_text(name).to_text()
        except dns.exception.DNSException:
            pass
    raise ZoneFileError(
        f"serve: cannot tell the origin of zone file {path}; name it on the command line "
        f"(--zone example.com={path}) or start the file with '$ORIGIN example.com.'"
    )


def _lines(text: str) -> Iterator[str]:
    """The text's lines, split as they are read: the first record decides, and a large
    file is not split whole for it."""
    start = 0
    while start < len(text):  # bounded: each pass moves past one line
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield text[start:end]
        start = end + 1


def _origin_in_text(text: str) -> str | None:
    for line in _lines(text):
        content = line.split(";", 1)[0]
        if not content.strip():
            continue
        tokens = content.split()
        if tokens[0].upper() == "$ORIGIN" and len(tokens) > 1:
            return tokens[1] if tokens[1].endswith(".") else None
        if tokens[0].startswith("$"):
            continue
        if content[0].isspace():
            return None
        owner = tokens[0]
        if owner.endswith(".") and "SOA" in (token.upper() for token in tokens[1:]):
            return owner
        return None
    return None

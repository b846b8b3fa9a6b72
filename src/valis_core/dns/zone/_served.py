"""One served zone as the answer path reads it (``ServedZone``): frozen, and shared
between index versions (``ZoneIndex``, in ``_index``, holds them; ``build`` makes them and
``_patch`` makes a zone's next version from its last).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import attrs

from valis_core.dns.wire import names as wire

_VERSIONS = itertools.count(1)


@attrs.frozen(eq=False)
class ServedZone:
    """One zone as the answer path reads it: frozen, and shared between index versions.

    ``nodes`` maps each owner (lowercased wire form) to its records, encoded as
    ``records`` says (read them with ``decode_node``); ``empty_nonterminals`` are names
    that exist only because something lies beneath them; ``cuts`` are delegation points
    (NS below the apex, including their own DS); ``dnames`` are DNAME owners.
    ``children`` counts, for every name with something beneath it, the names one label
    below it that exist (have data or are empty non-terminals), and ``wildcards`` how
    many existing names are wildcards: the bookkeeping that lets ``replace_owners``
    keep the empty non-terminals and ``has_wildcard`` right without walking the whole
    zone. No version of a zone ever mutates ``nodes`` or ``children`` once built.
    ``version`` tells this version apart from every other made in this process: what
    the answers kept across swaps are checked against (``answer._cache``).
    """

    origin: str
    apex: bytes
    nodes: Mapping[bytes, bytes]
    empty_nonterminals: frozenset[bytes]
    cuts: frozenset[bytes]
    dnames: frozenset[bytes]
    soa: bytes
    negative_ttl: int
    children: Mapping[bytes, int]
    wildcards: int
    record_count: int
    has_wildcard: bool = attrs.field(init=False)
    version: int = attrs.field(init=False, factory=lambda: next(_VERSIONS))

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "has_wildcard", self.wildcards > 0)

    def exists(self, name: bytes) -> bool:
        """Whether ``name`` (lowercased wire form) exists in this zone, data or not."""
        return name in self.nodes or name in self.empty_nonterminals

    def wildcard_covering(self, name: bytes) -> bytes | None:
        """The wildcard owner (``*.`` and the closest encloser, RFC 4592) that answers
        for ``name`` (lowercased wire form, at or below the apex), or ``None``: ``name``
        exists, lies at or beneath a delegation or DNAME, or no wildcard covers it."""
        if not self.has_wildcard or self.exists(name):
            return None
        encloser = wire.parent(name)
        while not self.exists(encloser) and len(encloser) > len(self.apex):
            encloser = wire.parent(encloser)
        source = b"\x01*" + encloser
        if not self.exists(source):
            return None
        above = encloser
        while True:
            if above in self.cuts or above in self.dnames:
                return None
            if len(above) <= len(self.apex):
                return source
            above = wire.parent(above)

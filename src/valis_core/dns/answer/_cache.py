"""The encoded responses kept per snapshot (``ResponseCache``) and their bounds."""

from __future__ import annotations

import collections

from valis_core.dns.answer.message import Entry

CACHE_ENTRIES = 65536
"""Encoded responses kept per snapshot (least recently used go first)."""

NEGATIVE_ENTRIES = 4096
"""Prebuilt negative answers kept per snapshot: one per zone, RCODE and offset of the
zone's apex in the question; past this many (thousands of zones) they are built afresh."""


class ResponseCache(collections.OrderedDict[bytes, Entry]):
    """Encoded responses keyed by question, and beside them (``negatives``) the
    negative answers prebuilt per zone; owned and filled by the answer path."""

    def __init__(self) -> None:
        super().__init__()
        self.negatives: dict[tuple[bytes, int, int], Entry] = {}

"""The authoritative DNS engine, one room per concept, each behind its face.

- ``wire``: names in wire form, records, master-file reading;
- ``zone``: the zone index (``ZoneIndex``), its build, patch, check, diff and serial;
- ``dnssec``: keys and signatures, NSEC3, rollover, the signature cache, key files;
- ``answer``: answering a query (``answer``, ``Transport``), signed answers, the
  snapshot and its caches, the compiled UDP fast path;
- ``transfer``: AXFR/IXFR, the journal, NOTIFY, TSIG verdicts, secondaries' progress;
- ``serve``: the UDP and TCP serve loops, listening, rate limiting, the file server.

Each room imports only the rooms before it (wire, zone, dnssec, answer, transfer,
serve), and another room's face or public modules, never its private ones.

The face: build a ``ZoneIndex`` from master-file text or record rows (``ZoneError`` names
what is wrong).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.wire import RecordRow, ZoneError
    from valis_core.dns.zone import ZoneIndex, parse_zone_text

__all__ = [
    "RecordRow",
    "ZoneError",
    "ZoneIndex",
    "parse_zone_text",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "RecordRow": "valis_core.dns.wire",
        "ZoneError": "valis_core.dns.wire",
        "ZoneIndex": "valis_core.dns.zone",
        "parse_zone_text": "valis_core.dns.zone",
    },
)

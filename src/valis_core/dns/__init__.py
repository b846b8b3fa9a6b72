"""The authoritative DNS engine: zone index, answering, serve loops.

The face: build a ``ZoneIndex`` from master-file text or record rows (``ZoneError`` names
what is wrong). Answering is the module ``valis_core.dns.answer`` (``answer``,
``Transport``), not re-exported here so the module's name stays the module's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.records import RecordRow, ZoneError
    from valis_core.dns.zone import ZoneIndex
    from valis_core.dns.zone_build import parse_zone_text

__all__ = [
    "RecordRow",
    "ZoneError",
    "ZoneIndex",
    "parse_zone_text",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "RecordRow": "valis_core.dns.records",
        "ZoneError": "valis_core.dns.records",
        "ZoneIndex": "valis_core.dns.zone",
        "parse_zone_text": "valis_core.dns.zone_build",
    },
)

"""The zone room: the zone index and its served zones (``ZoneIndex``, ``ServedZone``),
built from master-file text or rows (``build``), patched (``_patch``), checked (``check``),
compared (``diff``), and the SOA serial's arithmetic and policies (``serial``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.zone._index import ZoneIndex
    from valis_core.dns.zone._served import ServedZone
    from valis_core.dns.zone.build import (
        parse_zone_text,
    )

__all__ = [
    "ServedZone",
    "ZoneIndex",
    "parse_zone_text",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "ServedZone": "valis_core.dns.zone._served",
        "ZoneIndex": "valis_core.dns.zone._index",
        "parse_zone_text": "valis_core.dns.zone.build",
    },
)

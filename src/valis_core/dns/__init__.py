"""The authoritative DNS engine: zone index, answering, serve loops.

The face: build a ``ZoneIndex`` from master-file text or record rows (``ZoneError`` names
what is wrong), and ``answer`` a query's wire bytes from it.
"""

from valis_core.dns.answer import Transport, answer
from valis_core.dns.records import RecordRow, ZoneError
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone_build import parse_zone_text

__all__ = ["RecordRow", "Transport", "ZoneError", "ZoneIndex", "answer", "parse_zone_text"]

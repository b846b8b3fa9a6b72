"""The wire room: DNS names in wire form (``names``), records and their type and rcode
numbers (``records``: ``RecordRow``, ``ZoneError``), and master-file reading (``master``,
``master_general``, ``origin``).

The face re-exports ``names``'s functions, so ``from valis_core.dns import wire`` then
``wire.from_text(...)`` reads as before; the other modules are imported by their path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.dns.wire._reading import Emit, MasterFileError, Record
    from valis_core.dns.wire.names import (
        MAX_LABEL,
        MAX_NAME,
        ROOT,
        BadName,
        from_text,
        is_at_or_below,
        label_offsets,
        name_wire,
        parent,
        plain_labels,
        read_name,
        to_text,
    )
    from valis_core.dns.wire.records import (
        RecordRow,
        ZoneError,
    )

__all__ = [
    "MAX_LABEL",
    "MAX_NAME",
    "ROOT",
    "BadName",
    "Emit",
    "MasterFileError",
    "Record",
    "RecordRow",
    "ZoneError",
    "from_text",
    "is_at_or_below",
    "label_offsets",
    "name_wire",
    "parent",
    "plain_labels",
    "read_name",
    "to_text",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "Emit": "valis_core.dns.wire._reading",
        "MasterFileError": "valis_core.dns.wire._reading",
        "Record": "valis_core.dns.wire._reading",
        "BadName": "valis_core.dns.wire.names",
        "MAX_LABEL": "valis_core.dns.wire.names",
        "MAX_NAME": "valis_core.dns.wire.names",
        "ROOT": "valis_core.dns.wire.names",
        "RecordRow": "valis_core.dns.wire.records",
        "ZoneError": "valis_core.dns.wire.records",
        "from_text": "valis_core.dns.wire.names",
        "is_at_or_below": "valis_core.dns.wire.names",
        "label_offsets": "valis_core.dns.wire.names",
        "name_wire": "valis_core.dns.wire.names",
        "parent": "valis_core.dns.wire.names",
        "plain_labels": "valis_core.dns.wire.names",
        "read_name": "valis_core.dns.wire.names",
        "to_text": "valis_core.dns.wire.names",
    },
)

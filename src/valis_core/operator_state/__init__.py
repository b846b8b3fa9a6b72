"""Operator state in PostgreSQL: schema, fence, zone source, site facts.

The face: ``connect`` over the UNIX socket (peer authentication), ``migrate``, the
instance fence as stored (``read_instance_fence``), and the zones kept there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.fence import FencedOut, FenceState, SeedRefused, StaleClaim
    from valis_core.operator_state.connection import OperatorStateError, connect
    from valis_core.operator_state.fence import read_instance_fence
    from valis_core.operator_state.schema import migrate, schema_version
    from valis_core.operator_state.zones import (
        ZoneSummary,
        export_zone_text,
        list_zones,
        replace_zone,
    )

__all__ = [
    "FenceState",
    "FencedOut",
    "OperatorStateError",
    "SeedRefused",
    "StaleClaim",
    "ZoneSummary",
    "connect",
    "export_zone_text",
    "list_zones",
    "migrate",
    "read_instance_fence",
    "replace_zone",
    "schema_version",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "FenceState": "valis_core.fence",
        "FencedOut": "valis_core.fence",
        "OperatorStateError": "valis_core.operator_state.connection",
        "SeedRefused": "valis_core.fence",
        "StaleClaim": "valis_core.fence",
        "ZoneSummary": "valis_core.operator_state.zones",
        "connect": "valis_core.operator_state.connection",
        "export_zone_text": "valis_core.operator_state.zones",
        "list_zones": "valis_core.operator_state.zones",
        "migrate": "valis_core.operator_state.schema",
        "read_instance_fence": "valis_core.operator_state.fence",
        "replace_zone": "valis_core.operator_state.zones",
        "schema_version": "valis_core.operator_state.schema",
    },
)

"""Operator state in PostgreSQL: schema, fence, zone source, site facts.

The face: ``connect`` over the UNIX socket (peer authentication), ``migrate``, the
instance fence as stored (``read_instance_fence``), and the zones kept there.
"""

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

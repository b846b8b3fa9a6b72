"""The resident: ``valis --resident``, the unprivileged node that adopts the descriptors
its launcher bound, brings itself up stage by stage, serves, and fails closed.

The face: read a running node's status from its fabric.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.resident.fabric import FabricError
    from valis_core.resident.node_status import NodeNotRunning, fetch_node_status, read_node_status

__all__ = [
    "FabricError",
    "NodeNotRunning",
    "fetch_node_status",
    "read_node_status",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "FabricError": "valis_core.resident.fabric",
        "NodeNotRunning": "valis_core.resident.node_status",
        "fetch_node_status": "valis_core.resident.node_status",
        "read_node_status": "valis_core.resident.node_status",
    },
)

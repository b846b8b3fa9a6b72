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
    from valis_core.resident.status_document import STATUS, NodeStatus, StatusRefused

__all__ = [
    "STATUS",
    "FabricError",
    "NodeNotRunning",
    "NodeStatus",
    "StatusRefused",
    "fetch_node_status",
    "read_node_status",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "FabricError": "valis_core.resident.fabric",
        "NodeNotRunning": "valis_core.resident.node_status",
        "NodeStatus": "valis_core.resident.status_document",
        "STATUS": "valis_core.resident.status_document",
        "StatusRefused": "valis_core.resident.status_document",
        "fetch_node_status": "valis_core.resident.node_status",
        "read_node_status": "valis_core.resident.node_status",
    },
)

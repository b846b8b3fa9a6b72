"""The resident: ``valis --resident``, the unprivileged node that adopts the descriptors
its launcher bound, brings itself up stage by stage, serves, and fails closed.

The face: read a running node's status from its fabric.
"""

from valis_core.resident.fabric import FabricError
from valis_core.resident.node_status import NodeNotRunning, fetch_node_status, read_node_status

__all__ = ["FabricError", "NodeNotRunning", "fetch_node_status", "read_node_status"]

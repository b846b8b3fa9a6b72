"""The resident: ``valis --resident``, the unprivileged node that adopts the descriptors
its launcher bound, brings itself up stage by stage, serves, and fails closed.

The face: read a running node's status from its fabric. Its names are imported when
first used, not with the package: the resident itself imports this package, and must
not load the serving stack before its ``codec`` stage has checked it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from valis_core.resident.fabric import FabricError
    from valis_core.resident.node_status import (
        NodeNotRunning,
        fetch_node_status,
        read_node_status,
    )

_HOMES = {
    "FabricError": "valis_core.resident.fabric",
    "NodeNotRunning": "valis_core.resident.node_status",
    "fetch_node_status": "valis_core.resident.node_status",
    "read_node_status": "valis_core.resident.node_status",
}

__all__ = ["FabricError", "NodeNotRunning", "fetch_node_status", "read_node_status"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

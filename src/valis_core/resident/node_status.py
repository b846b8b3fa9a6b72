"""A running node's status, read from its fabric the way an operator tool would.

The resident publishes where its fabric listens (``fabric.json``) and the capability
token it demands (``fabric.token``) in its state directory, and removes both when it
stops. A reader with access to the state directory (the run account, or root) and to the
fabric's loopback (the same network namespace) asks ``/status`` with that token.
"""

from __future__ import annotations

from pathlib import Path

import trio

from valis_core.resident.fabric import (
    INFO_DOCUMENT,
    FabricAddress,
    FabricError,
    fabric_get,
)
from valis_core.resident.status_document import STATUS, NodeStatus
from valis_core.state_layout import fabric_info_path, fabric_token_path

_MAX_FILE = 1 << 16


class NodeNotRunning(FabricError):
    """No fabric is published under the state directory: the node is not up."""


def fabric_of(state_dir: Path) -> tuple[FabricAddress, str]:
    """Where the node's fabric listens and its token, from the state directory."""
    info_path, token_path = fabric_info_path(state_dir), fabric_token_path(state_dir)
    try:
        info = info_path.read_bytes()[:_MAX_FILE]
        token = token_path.read_text("ascii")[:_MAX_FILE].strip()
    except FileNotFoundError:
        raise NodeNotRunning(
            f"no node is serving from {state_dir}: it publishes {info_path.name} and "
            f"{token_path.name} there while it runs (is it up, and is this its state "
            "directory?)"
        ) from None
    except (OSError, ValueError) as exc:
        raise FabricError(f"cannot read the fabric's address under {state_dir}: {exc}") from exc
    return INFO_DOCUMENT.read(info, name=str(info_path)).address, token


async def fetch_node_status(state_dir: Path) -> NodeStatus:
    """The node's ``/status`` document (ready, generations, zones and serials, DNS)."""
    address, token = fabric_of(state_dir)
    try:
        status, body = await fabric_get(address, token, "/status")
    except (OSError, trio.TooSlowError) as exc:
        raise FabricError(
            f"the fabric at {address.url} did not answer ({exc or type(exc).__name__}); "
            "ask from the node's own network namespace"
        ) from exc
    if status != 200:
        raise FabricError(f"the fabric at {address.url} answered HTTP {status} to /status")
    return STATUS.read(body, name=f"the status the fabric at {address.url} sent")


def read_node_status(state_dir: Path) -> NodeStatus:
    """``fetch_node_status`` for code that is not already running under trio."""
    return trio.run(fetch_node_status, state_dir)

"""What the edge has done since boot: counters the status view and the log read."""

from __future__ import annotations

import collections

import attrs


@attrs.define
class EdgeStats:
    """Counters only; the edge's tasks are the one writer."""

    connections: int = 0
    handshakes_failed: int = 0
    displaced: int = 0
    """Connections closed to make room for a new one at the connection bound."""
    responses: collections.Counter[tuple[int, str]] = attrs.field(factory=collections.Counter)

    def responded(self, status: int, protocol: str) -> None:
        self.responses[(status, protocol)] += 1

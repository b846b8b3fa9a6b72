"""What the edge has done since boot: counters the status view and the log read, and how
its certificate's ACME side goes, as the node's status says it."""

from __future__ import annotations

import collections
from typing import Any

import attrs

from valis_core.documents import may_be_absent


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


def _optional() -> Any:
    return attrs.field(default=None, metadata=may_be_absent())


@attrs.frozen
class AcmeStatus:
    """How obtaining and renewing the edge's certificate goes (``CertificateKeeper.status``),
    as the node's status document says it (``resident.status_document``)."""

    domain: str | None = _optional()
    directory_url: str | None = _optional()
    orders: int | None = _optional()
    failures_in_a_row: int | None = _optional()
    last_error: str | None = _optional()
    last_step: str | None = _optional()
    next_attempt: float | None = _optional()

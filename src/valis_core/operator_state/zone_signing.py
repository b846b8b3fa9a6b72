"""Which zones are signed, in operator state: the ``zone_signing`` rows (migration 0007).

Turning signing on is a node's write (the key it names is that node's), so it runs in a
``fenced_transaction`` at the node's standing: a node fenced out cannot change what the
serving node signs. The zone's row is locked first, as every writer of a zone does.
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg

from valis_core.fence import FenceState
from valis_core.operator_state.fence import fenced_transaction


@attrs.frozen
class ZoneSigning:
    """One signed zone: its name (absolute, lowercase), algorithm and key tag."""

    zone: str
    algorithm: int
    key_tag: int


def enable_signing(
    conn: psycopg.Connection[Any], standing: FenceState, signing: ZoneSigning
) -> bool:
    """Record that ``signing.zone`` is signed with the key ``signing`` names; whether the
    zone exists (nothing is written when it does not). Raises ``FencedOut`` when
    ``standing`` is no longer the fence's."""
    with fenced_transaction(conn, standing) as cur:
        cur.execute("SELECT 1 FROM zones WHERE name = %s FOR UPDATE", (signing.zone,))
        if cur.fetchone() is None:
            return False
        cur.execute(
            "INSERT INTO zone_signing (zone, algorithm, key_tag, set_by) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (zone) DO UPDATE SET "
            "algorithm = EXCLUDED.algorithm, key_tag = EXCLUDED.key_tag, "
            "set_by = EXCLUDED.set_by, set_at = now()",
            (signing.zone, signing.algorithm, signing.key_tag, standing.holder),
        )
        return True


def signed_zones(conn: psycopg.Connection[Any]) -> dict[str, ZoneSigning]:
    """Every signed zone's row, by zone name."""
    rows = conn.execute("SELECT zone, algorithm, key_tag FROM zone_signing").fetchall()
    return {str(zone): ZoneSigning(str(zone), int(alg), int(tag)) for zone, alg, tag in rows}

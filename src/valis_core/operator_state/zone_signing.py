"""Which zones are signed, in operator state: the ``zone_signing`` rows (migration 0007;
the rollover timings and the roll under way, 0008; the ZSK of a split zone, 0010).

Turning signing on is a node's write (the key it names is that node's), so it runs in a
``fenced_transaction`` at the node's standing: a node fenced out cannot change what the
serving node signs. The zone's row is locked first, as every writer of a zone does.
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg

from valis_core.dns.dnssec.rollover import Rollover, RolloverError, Timing
from valis_core.fence import FenceState
from valis_core.operator_state.fence import fenced_transaction
from valis_core.operator_state.zone_rollover import ROLL_COLUMNS, TIMING_COLUMNS, roll_from_row


@attrs.frozen
class ZoneSigning:
    """One signed zone: its name (absolute, lowercase), algorithm and key tag (its CSK's,
    or its KSK's when ``zsk_tag`` names a ZSK), its rollover timings and the roll under
    way, if any."""

    zone: str
    algorithm: int
    key_tag: int
    timing: Timing = attrs.field(factory=Timing)
    rollover: Rollover | None = None
    zsk_tag: int | None = None


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
            "SELECT old_tag, new_tag, step FROM zone_rollover WHERE zone = %s", (signing.zone,)
        )
        rolling = cur.fetchone()
        if rolling is not None:
            raise RolloverError(
                f"zone {signing.zone} is rolling from key tag {rolling[0]} to {rolling[1]} "
                f"(step {rolling[2]}); its key changes only by that roll"
            )
        cur.execute(
            "INSERT INTO zone_signing (zone, algorithm, key_tag, zsk_tag, set_by) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (zone) DO UPDATE SET "
            "algorithm = EXCLUDED.algorithm, key_tag = EXCLUDED.key_tag, "
            "zsk_tag = EXCLUDED.zsk_tag, set_by = EXCLUDED.set_by, set_at = now()",
            (signing.zone, signing.algorithm, signing.key_tag, signing.zsk_tag,
             standing.holder),
        )
        return True


def signed_zones(conn: psycopg.Connection[Any]) -> dict[str, ZoneSigning]:
    """Every signed zone's row, by zone name, with its roll."""
    rows = conn.execute(
        "SELECT s.zone, s.algorithm, s.key_tag, s.zsk_tag, "
        + ", ".join(f"s.{column}" for column in TIMING_COLUMNS) + ", "
        + ", ".join(f"r.{column}" for column in ROLL_COLUMNS)
        + " FROM zone_signing s LEFT JOIN zone_rollover r ON r.zone = s.zone"
    ).fetchall()
    found = {}
    width = len(TIMING_COLUMNS)
    for zone, alg, tag, zsk_tag, *rest in rows:
        timing = Timing(*(int(value) for value in rest[:width]))
        roll = None if rest[width] is None else roll_from_row(rest[width:])
        zsk = None if zsk_tag is None else int(zsk_tag)
        found[str(zone)] = ZoneSigning(str(zone), int(alg), int(tag), timing, roll, zsk_tag=zsk)
    return found

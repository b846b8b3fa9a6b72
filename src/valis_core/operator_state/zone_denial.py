"""How a signed zone denies existence, in operator state: the ``zone_signing`` row's
``denial`` and NSEC3 parameters (migration 0009).

Compact denial (RFC 9824) is the default; NSEC3 (RFC 5155) is the option for a zone whose
secondaries must serve it signed, since only a chain can be transferred. Switching is a
node's write like turning signing on, so it runs in a ``fenced_transaction`` at the node's
standing, the zone's row locked first.
"""

from __future__ import annotations

from typing import Any

import psycopg

from valis_core.dns.dnssec.nsec3 import MAX_ITERATIONS, MAX_SALT, Nsec3Params
from valis_core.errors import ValisError
from valis_core.fence import FenceState
from valis_core.operator_state.fence import fenced_transaction

COMPACT = "compact"
NSEC3 = "nsec3"
DENIALS = (COMPACT, NSEC3)


class DenialError(ValisError):
    """A denial of existence that cannot be set as asked."""


def checked_params(iterations: int, salt: bytes) -> Nsec3Params:
    """NSEC3 parameters within what the schema and validators accept."""
    if not 0 <= iterations <= MAX_ITERATIONS:
        raise DenialError(
            f"NSEC3 iterations {iterations} is outside 0..{MAX_ITERATIONS}; RFC 9276 asks "
            "for 0, and validators treat larger counts as insecure"
        )
    if len(salt) > MAX_SALT:
        raise DenialError(f"an NSEC3 salt is at most {MAX_SALT} octets, not {len(salt)}")
    return Nsec3Params(iterations, salt)


def set_denial(
    conn: psycopg.Connection[Any], standing: FenceState, zone: str, nsec3: Nsec3Params | None
) -> bool:
    """Have the signed ``zone`` deny with an NSEC3 chain of ``nsec3``'s parameters, or
    compactly (``None``); whether the zone is signed (nothing is written when it is not).
    Raises ``FencedOut`` when ``standing`` is no longer the fence's."""
    params = nsec3 or Nsec3Params()
    with fenced_transaction(conn, standing) as cur:
        cur.execute("SELECT 1 FROM zones WHERE name = %s FOR UPDATE", (zone,))
        cur.execute(
            "UPDATE zone_signing SET denial = %s, nsec3_iterations = %s, nsec3_salt = %s, "
            "set_by = %s, set_at = now() WHERE zone = %s",
            (COMPACT if nsec3 is None else NSEC3, params.iterations, params.salt,
             standing.holder, zone),
        )
        return cur.rowcount == 1


def zone_denials(conn: psycopg.Connection[Any]) -> dict[str, Nsec3Params]:
    """The signed zones that deny with NSEC3, by zone name, and their chains' parameters;
    every other signed zone denies compactly."""
    rows = conn.execute(
        "SELECT zone, nsec3_iterations, nsec3_salt FROM zone_signing WHERE denial = %s",
        (NSEC3,),
    ).fetchall()
    return {str(zone): Nsec3Params(int(iterations), bytes(salt)) for zone, iterations, salt in rows}


def denial_of(conn: psycopg.Connection[Any], zone: str) -> str | None:
    """How the signed ``zone`` denies existence (``COMPACT`` or ``NSEC3``); ``None`` when
    it is not signed."""
    row = conn.execute("SELECT denial FROM zone_signing WHERE zone = %s", (zone,)).fetchone()
    return None if row is None else str(row[0])

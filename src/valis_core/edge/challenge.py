"""The DNS-01 challenge record (RFC 8555 §8.4), written into the node's own zone.

The ``_acme-challenge.<served domain>`` TXT is a change to the zone like any signed
update: one fenced operator-state transaction, written by the owner terminus's own path
(``record_writes.write_update``: the zone's serial policy moves the SOA serial, the change
is checked against the index being served, the journal and the change notes name the
owner, the zone source swaps it in within milliseconds, and secondaries get it by NOTIFY
and IXFR).
A node the fence has moved past writes nothing: ``FencedOut`` propagates, so a
fenced-out node cannot obtain a certificate. Publishing replaces any TXT left at the
name; withdrawing removes them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import psycopg
from dns.rcode import Rcode

from valis_core.dns.zone import ZoneIndex
from valis_core.errors import ValisError
from valis_core.fence import FenceState
from valis_core.operator_state.fence import fenced_transaction
from valis_core.operator_state.record_writes import write_update
from valis_core.owner.update import UpdateOutcome, UpdateRequest, UpdateRR

CHALLENGE_LABEL = "_acme-challenge"
CHALLENGE_TTL = 60
"""Short: a stale value is gone from resolvers' caches soon after the record goes."""

_IN = dns.rdataclass.IN
_TXT = dns.rdatatype.TXT


class ChallengeError(ValisError):
    """A challenge record that cannot be placed in (or removed from) the served zones."""


def challenge_name(domain: str) -> str:
    """The absolute owner name of ``domain``'s DNS-01 record."""
    return dns.name.from_text(f"{CHALLENGE_LABEL}.{domain.rstrip('.')}.").to_text()


def challenge_zone(domain: str, served_zones: Sequence[str]) -> str:
    """The served zone holding ``domain``'s challenge record: the deepest one enclosing
    it. Raises ``ChallengeError`` when no served zone does."""
    name = dns.name.from_text(challenge_name(domain))
    enclosing = [
        zone for zone in served_zones
        if name.is_subdomain(dns.name.from_text(zone if zone.endswith(".") else zone + "."))
    ]
    if not enclosing:
        raise ChallengeError(
            f"edge: the served domain {domain} is in none of the served zones "
            f"({', '.join(served_zones)}), so the node cannot answer its DNS-01 challenge; "
            "set VALIS_SERVED_DOMAIN to a name inside a served zone"
        )
    chosen = max(enclosing, key=lambda zone: len(dns.name.from_text(zone.rstrip(".") + ".")))
    return dns.name.from_text(chosen.rstrip(".") + ".").to_text().lower()


def _txt_wire(value: str) -> bytes:
    data = dns.rdata.from_text(_IN, _TXT, f'"{value}"').to_wire()
    assert data is not None  # to_wire without a file returns the bytes
    return data


def publish_request(zone: str, domain: str, value: str) -> UpdateRequest:
    """The update replacing the TXT at ``domain``'s challenge name with ``value``."""
    name = challenge_name(domain)
    return UpdateRequest(zone=zone, updates=(
        UpdateRR(name, dns.rdataclass.ANY, _TXT, 0, None),
        UpdateRR(name, _IN, _TXT, CHALLENGE_TTL, _txt_wire(value)),
    ))


def withdraw_request(zone: str, domain: str) -> UpdateRequest:
    """The update removing every TXT at ``domain``'s challenge name."""
    return UpdateRequest(zone=zone, updates=(
        UpdateRR(challenge_name(domain), dns.rdataclass.ANY, _TXT, 0, None),
    ))


def write_fenced(
    conn: psycopg.Connection[Any],
    standing: FenceState,
    request: UpdateRequest,
    served_zones: Sequence[str],
    index: ZoneIndex,
    *,
    now: float,
) -> UpdateOutcome:
    """Apply ``request`` in one fenced transaction on ``conn`` (autocommit), by the owner
    terminus's own write path (``record_writes.write_update``: the zone's serial policy at
    UNIX time ``now``, the change checked against ``index``, the index being served).
    Raises ``FencedOut`` (nothing written) when ``standing`` is no longer the fence's, and
    ``ChallengeError`` when the zone is not in operator state or the change is refused."""
    with fenced_transaction(conn, standing) as cur:
        outcome = write_update(
            cur, request, request.zone, served=served_zones, index=index, now=now
        )
        if outcome is None:
            raise ChallengeError(
                f"edge: zone {request.zone} is not in operator state, so the DNS-01 "
                "record cannot be written there"
            )
        if outcome.rcode != Rcode.NOERROR:
            raise ChallengeError(
                f"edge: the DNS-01 record in {request.zone} was refused "
                f"({outcome.rcode.name}: {outcome.reason})"
            )
        return outcome

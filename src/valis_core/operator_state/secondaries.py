"""The secondaries of each zone in operator state: who may transfer a zone (AXFR) and who
is sent a NOTIFY when it changes, each with its TSIG key (migration 0005) and the port
its NOTIFY goes to (migration 0015).

A secondary is one address (a host, IPv4 or IPv6), the key its requests are signed
with, and optionally the port it listens on for NOTIFY (``ADDR:PORT``, ``[ADDR]:PORT``
for IPv6; none: 53). Transfers are judged by the address alone. Keys are kept in the
database beside the zone, so whatever restores the database (``pg_dump``, a standby)
restores them too. The operator adds and removes secondaries
(``valis zone secondary``); each change is announced on ``CHANNEL`` (``pg_notify`` in
its transaction, so on commit), and the resident, which keeps the list in memory, reads
it again at once (and every 10 s besides, so a change made by plain SQL applies too).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import secrets
from typing import Any

import attrs
import psycopg

from valis_core.dns import wire
from valis_core.errors import ValisError
from valis_core.operator_state.zones import canonical_zone_name

ALGORITHMS = ("hmac-sha256", "hmac-sha384", "hmac-sha512", "hmac-sha224", "hmac-sha1")
"""TSIG algorithms a secondary's key may use (RFC 8945 section 6), the first the default."""

DEFAULT_ALGORITHM = ALGORITHMS[0]
GENERATED_SECRET_SIZE = 32
MIN_SECRET_SIZE = 16
MAX_SECRET_SIZE = 512
CHANNEL = "valis_secondaries_changed"
"""Where a change of the secondaries is announced (payload: the zone)."""


class SecondaryError(ValisError):
    """A secondary that cannot be added, removed or read as given."""


@attrs.frozen
class Secondary:
    """One secondary of ``zone``: its address, the TSIG key it signs with, the port its
    NOTIFY is sent to (``None``: 53), and the catalog the zone has it from (``None``: the
    zone lists it itself)."""

    zone: str
    address: str
    key_name: str
    algorithm: str
    secret: bytes = attrs.field(repr=False)
    notify_port: int | None = None
    catalog: str | None = None

    @property
    def target(self) -> str:
        """The address, and the NOTIFY port when one was given, as the operator writes
        them (``192.0.2.2:5300``, ``[2001:db8::2]:5300``)."""
        return target_text(self.address, self.notify_port)

    @property
    def secret_base64(self) -> str:
        return base64.b64encode(self.secret).decode("ascii")

    def bind_key(self) -> str:
        """The key as a BIND/NSD ``key`` statement, for the secondary's configuration."""
        return (
            f'key "{self.key_name}" {{\n'
            f"\talgorithm {self.algorithm};\n"
            f'\tsecret "{self.secret_base64}";\n'
            "};\n"
        )


def host_address(text: str) -> str:
    """``text`` as one host's address in its canonical spelling; refuse anything else."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise SecondaryError(
            f"secondary address {text!r} is not an IPv4 or IPv6 address of one host "
            "(give the address the secondary sends its transfer requests from)"
        ) from None


def target_text(address: str, port: int | None) -> str:
    """``address`` with ``port`` as ``ADDR:PORT`` (``[ADDR]:PORT`` for IPv6), or alone."""
    if port is None:
        return address
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def host_and_port(text: str) -> tuple[str, int | None]:
    """``ADDR``, ``ADDR:PORT`` or ``[ADDR]:PORT`` (an IPv6 address with a port in brackets)
    as one host's canonical address and the port (``None`` when none is given); refuse
    anything else, naming what was wrong."""
    given = text.strip()
    port_text: str | None = None
    if given.startswith("["):
        inside, bracket, rest = given[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise SecondaryError(
                f"secondary {text!r}: write an IPv6 address with a port as [ADDR]:PORT "
                "(e.g. [2001:db8::2]:5300)"
            )
        given, port_text = inside, (rest[1:] if rest else None)
    elif given.count(":") == 1:
        given, _, port_text = given.partition(":")
    address = host_address(given)
    if port_text is None:
        return address, None
    if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise SecondaryError(
            f"secondary {text!r}: the port {port_text!r} is not a whole number from 1 to "
            "65535 (the port the secondary takes NOTIFY on; leave it out for 53)"
        )
    return address, int(port_text)


def key_name(text: str) -> str:
    """A TSIG key name as stored: absolute, lowercase."""
    absolute = text if text.endswith(".") else text + "."
    try:
        return wire.to_text(wire.from_text(absolute).lower())
    except wire.BadName as exc:
        raise SecondaryError(f"TSIG key name {text!r} is not a domain name: {exc}") from None


def algorithm(text: str) -> str:
    name = text.strip().lower().rstrip(".")
    if name not in ALGORITHMS:
        raise SecondaryError(
            f"TSIG algorithm {text!r} is not one valis signs with; use one of "
            f"{', '.join(ALGORITHMS)}"
        )
    return name


def secret(text: str | None) -> bytes:
    """The secret from its base64 text, or a fresh random one when none is given."""
    if text is None:
        return secrets.token_bytes(GENERATED_SECRET_SIZE)
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise SecondaryError("the TSIG secret is not base64 (as in a BIND key statement)") from None
    if not MIN_SECRET_SIZE <= len(raw) <= MAX_SECRET_SIZE:
        raise SecondaryError(
            f"the TSIG secret is {len(raw)} bytes; give {MIN_SECRET_SIZE} to "
            f"{MAX_SECRET_SIZE} (32 random bytes is usual: leave --secret out to have one made)"
        )
    return raw


def add_secondary(conn: psycopg.Connection[Any], secondary: Secondary) -> bool:
    """Store ``secondary`` (replacing the key and NOTIFY port of one already listed at its
    address);
    return whether it was new. Refused when the zone is not in operator state."""
    zone = canonical_zone_name(secondary.zone)
    with conn.transaction():
        if conn.execute("SELECT 1 FROM zones WHERE name = %s", (zone,)).fetchone() is None:
            raise SecondaryError(
                f"zone {zone} is not in the operator-state database; import it first"
            )
        row = conn.execute(
            "INSERT INTO zone_secondaries"
            " (zone, address, key_name, algorithm, secret, notify_port)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (zone, address) DO UPDATE SET key_name = EXCLUDED.key_name,"
            " algorithm = EXCLUDED.algorithm, secret = EXCLUDED.secret,"
            " notify_port = EXCLUDED.notify_port, added_at = now()"
            " RETURNING (xmax = 0)",
            (zone, secondary.address, secondary.key_name, secondary.algorithm,
             secondary.secret, secondary.notify_port),
        ).fetchone()
        _announce(conn, zone)
    return bool(row and row[0])


def remove_secondary(conn: psycopg.Connection[Any], zone: str, address: str) -> bool:
    """Forget the secondary of ``zone`` at ``address``; return whether it was listed."""
    with conn.transaction():
        cur = conn.execute(
            "DELETE FROM zone_secondaries WHERE zone = %s AND address = %s",
            (canonical_zone_name(zone), host_address(address)),
        )
        if cur.rowcount:
            _announce(conn, canonical_zone_name(zone))
        return cur.rowcount == 1


def _announce(conn: psycopg.Connection[Any], zone: str) -> None:
    """Tell listening residents, on commit, that ``zone``'s secondaries changed."""
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, zone))


def serving_secondaries(
    conn: psycopg.Connection[Any], zone: str | None = None
) -> tuple[Secondary, ...]:
    """Who may transfer each zone (``zone`` alone when given) and is notified of its
    changes: each zone's own secondaries, and a catalog member's catalogs' secondaries
    (RFC 9432: a consumer transfers the members from the primaries it has for the
    catalog), with the catalog's key, at the addresses the member does not list itself;
    by zone then address."""
    query = (
        "SELECT DISTINCT ON (zone, address) zone, host(address), key_name, algorithm, secret,"
        " notify_port, catalog"
        " FROM (SELECT zone, address, key_name, algorithm, secret, notify_port,"
        "  NULL::text AS catalog, 0 AS rank"
        "  FROM zone_secondaries"
        "  UNION ALL SELECT m.member, s.address, s.key_name, s.algorithm, s.secret,"
        "  s.notify_port, m.catalog, 1"
        "  FROM zone_catalog_members m JOIN zone_secondaries s ON s.zone = m.catalog) AS e"
    )
    params: tuple[str, ...] = ()
    if zone is not None:
        query += " WHERE zone = %s"
        params = (canonical_zone_name(zone),)
    query += " ORDER BY zone, address, rank, key_name, catalog"
    return tuple(
        Secondary(str(z), str(a), str(k), str(al), bytes(s), None if p is None else int(p),
                  None if c is None else str(c))
        for z, a, k, al, s, p, c in conn.execute(query, params).fetchall()
    )

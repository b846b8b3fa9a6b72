"""Response rate limiting (RRL) for UDP, as NSD and Knot offer it: a pure core.

A spoofed flood makes an authoritative server reflect its answers at a victim. RRL caps
the responses sent towards one source prefix (IPv4 /24 and IPv6 /56 by default) for one
response class: a token bucket per (prefix, kind, name) refilled at ``rate`` responses a
second and holding at most ``burst``. The kind and name come from the response itself:

- positive (answers) and NODATA: the question name, so a flood of one name is one bucket;
- NXDOMAIN: the zone (the SOA owner in authority), so random names are one bucket too;
- wildcard: an answer or NODATA a wildcard synthesized, keyed by the wildcard's owner
  (``*.example.com``), so random names under one wildcard are one bucket, as NSD keys
  them;
- referral: the delegation point (the NS owner in authority);
- any other RCODE (REFUSED, FORMERR, ...): one bucket per prefix, whatever the name.

The response does not say it came from a wildcard, nor, under compact denial (RFC 9824:
a signed zone's NODATA for a name that does not exist), that it denies a name. So the
limiter is given the zones served at the moment (``zones``) and looks the question name
up there: only for answers and NODATA, and only while limiting is on. A NODATA for a
name the zone does not hold, and no wildcard covers, is an NXDOMAIN keyed by the zone.

Sources in ``exempt`` (Knot's ``whitelist``) are never limited.

A response over its bucket's rate is dropped, except that every ``slip``-th one of that
bucket is sent as a minimal reply (the question, TC=1): an honest client whose address
was spoofed retries over TCP, which is never limited (a spoofed source cannot complete
a handshake). ``slip`` 0 drops every limited response, 1 truncates every one.

The table is a fixed number of slots, so memory is bounded whatever the spread of
sources. A bucket's slot is a keyed hash (BLAKE2b with a key the caller draws at random
per process) of its key, so an attacker cannot aim at a victim's slot. Keys that share a
slot share its bucket: limiting stays within the rate per slot, at the price that a
client may be limited along with a flood that happens to land in its slot (with ``k``
busy buckets, a chance of about ``k / table_size``).

Nothing here reads a clock or a socket: time is a parameter of every call.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from valis_core.dns.zone import ZoneIndex

DEFAULT_SLIP = 2
"""As NSD's ``rrl-slip`` and Knot's recommended ``slip``: half the limited responses
are truncated replies, so an honest client gets through on its first or second retry."""
DEFAULT_IPV4_PREFIX = 24
DEFAULT_IPV6_PREFIX = 56
"""Knot's IPv6 netblock; NSD uses /64. A /56 is a typical end site's assignment."""
DEFAULT_TABLE_SIZE = 393241
"""Knot's default ``table-size``: about 9 MB here (24 bytes a slot)."""

_NOERROR = 0
_NXDOMAIN = 3
_MAX_LABELS = 128
_MEMO = 4096
_MEMO_SIZE = 512
_EXEMPT = -1
"""The slot remembered for an exempt source: no bucket, always sent."""


class Kind(enum.IntEnum):
    """The response classes that get buckets of their own."""

    POSITIVE = 0
    NODATA = 1
    NXDOMAIN = 2
    REFERRAL = 3
    ERROR = 4
    WILDCARD = 5


class Verdict(enum.IntEnum):
    SEND = 0
    DROP = 1
    SLIP = 2


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
"""A source prefix (``exempt``)."""


@attrs.frozen
class RrlSettings:
    """How hard to limit: ``rate`` responses a second per bucket, ``burst`` at once.

    A value handed in: the site facts' ``VALIS_RRL_*`` are read at the operator-state
    edge (``site_facts.rrl_settings``), never here."""

    rate: int
    slip: int = DEFAULT_SLIP
    ipv4_prefix: int = DEFAULT_IPV4_PREFIX
    ipv6_prefix: int = DEFAULT_IPV6_PREFIX
    table_size: int = DEFAULT_TABLE_SIZE
    exempt: tuple[Network, ...] = ()
    burst: int = attrs.field()

    @burst.default
    def _one_second(self) -> int:
        return self.rate

    def __attrs_post_init__(self) -> None:
        if self.rate < 1 or self.burst < 1 or self.slip < 0 or self.table_size < 1:
            raise ValueError(f"not usable rate-limit settings: {self!r}")
        if not (0 <= self.ipv4_prefix <= 32 and 0 <= self.ipv6_prefix <= 128):
            raise ValueError(f"not usable prefix lengths: {self!r}")


def describe(settings: RrlSettings | None) -> str:
    """One log line of what is limited, or that nothing is."""
    if settings is None:
        return "response rate limiting: off"
    exempt = ", ".join(map(str, settings.exempt)) or "none"
    return (
        f"response rate limiting: {settings.rate} responses/s per IPv4 "
        f"/{settings.ipv4_prefix} or IPv6 /{settings.ipv6_prefix} and response class over "
        f"UDP, slip {settings.slip}, {settings.table_size} buckets, exempt {exempt}"
    )


def source_prefix(host: str, ipv4_prefix: int, ipv6_prefix: int) -> bytes:
    """The source prefix ``host`` (a peer address as the socket reports it) belongs to,
    as bytes that differ between families; an IPv4-mapped IPv6 address is its IPv4."""
    address = _address(host)
    if address is None:
        return b"?" + host.encode("utf-8", "replace")
    bits, value = address
    if bits == 32:
        return b"4" + _masked(value, 32, ipv4_prefix)
    return b"6" + _masked(value, 128, ipv6_prefix)


def is_exempt(host: str, exempt: tuple[Network, ...]) -> bool:
    """Whether ``host`` lies in one of the ``exempt`` prefixes (an IPv4-mapped IPv6
    address as its IPv4 address); an address that cannot be read is not exempt."""
    address = _address(host) if exempt else None
    if address is None:
        return False
    bits, value = address
    for network in exempt:
        length = network.prefixlen
        if (
            network.max_prefixlen == bits
            and value >> (bits - length) == int(network.network_address) >> (bits - length)
        ):
            return True
    return False


def _address(host: str) -> tuple[int, int] | None:
    """``host`` as (32, IPv4 value) or (128, IPv6 value); ``None`` if it is neither."""
    try:
        if ":" not in host:
            return 32, _ipv4(host)
        value = _ipv6(host.partition("%")[0])
    except ValueError:
        return None
    if value >> 32 == 0xFFFF:
        return 32, value & 0xFFFFFFFF
    return 128, value


def _ipv4(host: str) -> int:
    packed = bytes(map(int, host.split(".")))  # ValueError past 255 or below 0
    if len(packed) != 4:
        raise ValueError(host)
    return int.from_bytes(packed, "big")


def _ipv6(host: str) -> int:
    return int(ipaddress.IPv6Address(host))


def _masked(value: int, bits: int, prefix: int) -> bytes:
    return (value >> (bits - prefix)).to_bytes(bits // 8, "big") + bytes((prefix,))


Zones = Callable[[], "ZoneIndex"]
"""The zones served at the moment (the current snapshot's index)."""


def classify(response: bytes, zones: ZoneIndex | None = None) -> tuple[Kind, bytes, int]:
    """The kind of ``response``, the name its bucket is keyed by (lowercased wire form),
    and the offset where its question ends. Given the ``zones`` that answered, an answer
    or NODATA a wildcard synthesized is a WILDCARD keyed by the wildcard's owner, and a
    NODATA for a name that does not exist (compact denial) an NXDOMAIN keyed by the
    zone. Never raises: a response it cannot read is an ERROR with no name."""
    kind, name, qend = _classify(response)
    if zones is not None and kind in (Kind.POSITIVE, Kind.NODATA):
        zone = zones.zone_for(name)
        if zone is not None:
            owner = zone.wildcard_covering(name)
            if owner is not None:
                return Kind.WILDCARD, owner, qend
            if kind is Kind.NODATA and not zone.exists(name):
                return Kind.NXDOMAIN, zone.apex, qend
    return kind, name, qend


def _classify(response: bytes) -> tuple[Kind, bytes, int]:
    size = len(response)
    if size < 12:
        return Kind.ERROR, b"", size
    rcode = response[3] & 0x0F
    qend = _question_end(response, size)
    if qend is None:
        return Kind.ERROR, b"", 12
    if rcode not in (_NOERROR, _NXDOMAIN):
        return Kind.ERROR, b"", qend
    qname = response[12 : qend - 4].lower()
    ancount = response[6] << 8 | response[7]
    if rcode == _NOERROR:
        if ancount:
            return Kind.POSITIVE, qname, qend
        if response[2] & 0x04 or not (response[8] | response[9]):
            return Kind.NODATA, qname, qend
        owner = _authority_owner(response, qend, 0, size)
        return Kind.REFERRAL, (owner if owner is not None else qname), qend
    owner = _authority_owner(response, qend, ancount, size)
    return Kind.NXDOMAIN, (owner if owner is not None else qname), qend


def _question_end(message: bytes, size: int) -> int | None:
    """The offset after the one question (a name without compression, type, class)."""
    if message[4] << 8 | message[5] != 1:
        return None
    at = 12
    for _ in range(_MAX_LABELS):
        if at >= size:
            return None
        length = message[at]
        if length == 0:
            end = at + 5
            return end if end <= size else None
        if length > 63:
            return None
        at += length + 1
    return None


def _authority_owner(message: bytes, at: int, skip: int, size: int) -> bytes | None:
    """The owner name of the first authority record, after ``skip`` answer records."""
    for _ in range(skip):
        end = _name_end(message, at, size)
        if end is None or end + 10 > size:
            return None
        at = end + 10 + (message[end + 8] << 8 | message[end + 9])
    if at >= size:
        return None
    return _decode_name(message, at, size)


def _name_end(message: bytes, at: int, size: int) -> int | None:
    for _ in range(_MAX_LABELS):
        if at >= size:
            return None
        length = message[at]
        if length == 0:
            return at + 1
        if length >= 0xC0:
            return at + 2
        if length > 63:
            return None
        at += length + 1
    return None


def _decode_name(message: bytes, at: int, size: int) -> bytes | None:
    """A possibly compressed name, lowercased; ``None`` for a malformed one. Pointers
    must point backwards, so every name read ends within a bounded number of steps."""
    out = bytearray()
    for _ in range(_MAX_LABELS):
        if at >= size:
            return None
        length = message[at]
        if length == 0:
            out.append(0)
            return bytes(out).lower()
        if length >= 0xC0:
            if at + 1 >= size:
                return None
            target = (length & 0x3F) << 8 | message[at + 1]
            if target >= at:
                return None
            at = target
            continue
        if length > 63 or at + 1 + length > size:
            return None
        out += message[at : at + 1 + length]
        at += length + 1
    return None


def slip_reply(response: bytes, qend: int) -> bytes:
    """The minimal truncated reply in place of ``response``: its header with TC set and
    no records, and its question (``qend`` from ``classify``)."""
    if qend > len(response) or qend < 12:
        qend = 12
    qdcount = b"\x00\x01" if qend > 12 else b"\x00\x00"
    return (
        response[:2] + bytes((response[2] | 0x02, response[3])) + qdcount
        + b"\x00\x00\x00\x00\x00\x00" + response[12:qend]
    )


class RateLimiter:
    """The bucket table and its counters: mutable state that only ``take`` and ``limit``
    change, given the time. ``key`` keys the slot hash; draw it at random per process.

    ``zones``, when given, gives the zones served at the moment, for ``classify``.

    ``limit`` remembers the slot of recent (source, response) pairs, the ID aside: a
    flood repeats its query, so most responses skip classifying and hashing. The memo
    holds at most ``_MEMO`` entries of responses up to ``_MEMO_SIZE`` bytes and starts
    afresh when full, so it stays bounded however many sources and names there are."""

    __slots__ = ("_hasher", "_limited", "_recent", "_stamps", "_tokens", "_zones",
                 "settings")

    def __init__(self, settings: RrlSettings, key: bytes, zones: Zones | None = None) -> None:
        self.settings = settings
        self._zones = zones
        self._hasher = hashlib.blake2b(digest_size=8, key=key[:64])
        self._recent: dict[tuple[str, bytes], tuple[int, int]] = {}
        size = settings.table_size
        self._tokens = array("d", [float(settings.burst)]) * size
        self._stamps = array("d", [float("-inf")]) * size
        self._limited = array("Q", [0]) * size

    @property
    def footprint(self) -> int:
        """Bytes the table holds: fixed when it is made, whatever the sources."""
        return sum(len(c) * c.itemsize for c in (self._tokens, self._stamps, self._limited))

    @property
    def remembered(self) -> int:
        """(source, response) pairs whose slot is remembered: at most ``_MEMO``."""
        return len(self._recent)

    def slot(self, bucket: bytes) -> int:
        """Where the bucket keyed ``bucket`` lives."""
        hasher = self._hasher.copy()  # cheaper than keying a new one
        hasher.update(bucket)
        return int.from_bytes(hasher.digest(), "little") % self.settings.table_size

    def take(self, bucket: bytes, now: float) -> Verdict:
        """Spend one response from the bucket keyed ``bucket`` at time ``now``: send it,
        or, over the rate, drop it or slip it."""
        return self._spend(self.slot(bucket), now)

    def _spend(self, slot: int, now: float) -> Verdict:
        settings = self.settings
        tokens = self._tokens[slot]
        elapsed = now - self._stamps[slot]
        if elapsed > 0:
            tokens = min(float(settings.burst), tokens + elapsed * settings.rate)
            self._stamps[slot] = now
        if tokens >= 1.0:
            self._tokens[slot] = tokens - 1.0
            return Verdict.SEND
        self._tokens[slot] = tokens
        limited = self._limited[slot] + 1
        self._limited[slot] = limited
        slip = settings.slip
        return Verdict.SLIP if slip and limited % slip == 0 else Verdict.DROP

    def limit(self, response: bytes, host: str, now: float) -> bytes | None:
        """What to send instead of ``response`` to ``host`` at ``now``: the response
        itself (the same object), its slip reply, or nothing."""
        memo = (host, response[2:]) if len(response) <= _MEMO_SIZE else None
        found = self._recent.get(memo) if memo is not None else None
        if found is None:
            settings = self.settings
            if is_exempt(host, settings.exempt):
                found = (_EXEMPT, 0)
            else:
                zones = self._zones
                kind, name, qend = classify(response, zones() if zones is not None else None)
                prefix = source_prefix(host, settings.ipv4_prefix, settings.ipv6_prefix)
                found = (self.slot(bucket_key(prefix, kind, name)), qend)
            if memo is not None:
                if len(self._recent) >= _MEMO:
                    self._recent.clear()
                self._recent[memo] = found
        if found[0] == _EXEMPT:
            return response
        verdict = self._spend(found[0], now)
        if verdict is Verdict.SEND:
            return response
        if verdict is Verdict.SLIP:
            return slip_reply(response, found[1])
        return None


def bucket_key(prefix: bytes, kind: Kind, name: bytes) -> bytes:
    """The bytes a bucket is keyed by: unambiguous, since a prefix ends in its length."""
    return bytes((len(prefix), kind)) + prefix + name

"""The signatures a signer has made, kept so that an RRset is signed once per refresh
window: by the answer path and by signed zone transfers apart, and across the signers the
resident builds as what it signs changes.

Both stores key a signature by what it covers, so a kept signature can only ever be
served for the data, key and window it was made for:

- ``SignatureCache`` (the answer path's) is partitioned by zone, signing key and refresh
  window, a key known by its DNSKEY rdata (algorithm, flags and public key: a key tag is
  not unique, and two keys sharing one must never share signatures), then by the RRset's
  owner, type, TTL and rdatas. It is handed from one ``Signer`` to the next
  (``retain``): the partitions of the keys each zone still signs with stay, the others
  are dropped, so a rollover step of one zone re-signs nothing of another's, and a zone's
  counts go on. A window's partition drops the zone's earlier ones; past
  ``SIGNATURE_ENTRIES`` signatures in all it starts again (a flood of names that do not
  exist, each with its own denial).
- ``TransferSignatures`` (one per NSEC3 zone) holds the signatures of the zone's signed
  AXFR for one refresh window and set of keys, by owner and the owner's encoded records
  (which versions patched from one another share), and by NSEC3 record (its hash and
  rdata). It keeps the
  signatures the last transferred version used and the ones the version being
  transferred uses, so a second transfer of an unchanged zone signs nothing and a changed
  one signs only the RRsets and NSEC3 records the change touched, while a transfer of a
  large zone never pushes the answer path's hot signatures out. Its size is the zone's:
  at most two versions' signatures, about 260 bytes each (``docs/dnssec.md``). The
  stores of all zones together keep at most ``transfer_limit`` signatures (the site fact
  ``VALIS_TRANSFER_SIGNATURES``): as each signed transfer ends, while they hold more,
  the store of the zone transferred longest ago is dropped (least recently used by zone;
  the one just transferred last, so a zone larger than the bound is re-signed at each
  transfer rather than kept), each drop counted in ``transfer_evictions``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping

SIGNATURE_ENTRIES = 200_000
"""Answer-path signatures kept; past this many the cache starts again."""

TRANSFER_SIGNATURES = 2_000_000
"""Signatures the transfer stores of all zones keep together by default (about 500 MiB;
the site fact ``VALIS_TRANSFER_SIGNATURES``): ten zones of 100 000 owners transferred in
turn."""

Partition = tuple[bytes, bytes, int]
"""A zone's apex, a signing key's DNSKEY rdata, and a refresh window."""
TransferTag = tuple[int, int, tuple[bytes, ...]]
"""A refresh window, the zone's negative TTL (its NSEC3 records'), and the DNSKEY rdatas
of the keys signing a transfer."""


class TransferSignatures:
    """One NSEC3 zone's transfer signatures for one refresh window and key set (``tag``):
    those of the version being transferred, and of the one transferred before it. An
    entry's signatures are kept end to end in one string (they are all as long: one
    signer name, one algorithm), which halves what a signature costs to keep."""

    __slots__ = ("_current", "_previous", "_sizes", "_version", "size", "tag")

    def __init__(self, tag: TransferTag) -> None:
        self.tag = tag
        self._version: int | None = None
        self._current: dict[Hashable, bytes] = {}
        self._previous: dict[Hashable, bytes] = {}
        self._sizes = [0, 0]
        """The octets of signatures held in ``_current`` and ``_previous``."""
        self.size = 0
        """The length of one signature (0 until one is kept)."""

    @property
    def signatures(self) -> int:
        """How many signatures are kept (both versions')."""
        return sum(self._sizes) // self.size if self.size else 0

    def begin(self, version: int) -> None:
        """A transfer of ``version`` (the zone object's identity) starts: another version
        than the last one's makes the last one's signatures the fallback, and drops the
        ones before (reachable only from older versions)."""
        if version == self._version:
            return
        self._version = version
        self._previous, self._current = self._current, {}
        self._sizes = [0, self._sizes[0]]

    def get(self, key: Hashable, count: int) -> tuple[bytes, ...] | None:
        """The ``count`` signatures kept under ``key``."""
        found = self._current.get(key)
        if found is None:
            found = self._previous.pop(key, None)
            if found is None:
                return None
            self._current[key] = found
            self._sizes[0] += len(found)
            self._sizes[1] -= len(found)
        if not count:
            return ()
        size = self.size
        if not size or len(found) != count * size:
            return None
        return tuple(found[at:at + size] for at in range(0, len(found), size))

    def put(self, key: Hashable, signatures: tuple[bytes, ...]) -> None:
        if not signatures:
            joined = b""
        else:
            size = len(signatures[0])
            if self.size != size:
                if self.size:  # never so in one zone and key set: kept no longer
                    return
                self.size = size
            if any(len(signature) != size for signature in signatures):
                return
            joined = b"".join(signatures)
        self._sizes[0] += len(joined) - len(self._current.get(key, b""))
        self._current[key] = joined


class SignatureCache:
    """The answer path's signatures by partition, the transfer stores by zone, and the
    counts by zone (made, and served from a store instead of made) since the node
    started."""

    def __init__(self, transfer_limit: int = TRANSFER_SIGNATURES) -> None:
        self._parts: dict[Partition, dict[Hashable, bytes]] = {}
        self._entries = 0
        self._allowed: dict[bytes, frozenset[bytes]] | None = None
        self._transfers: OrderedDict[bytes, TransferSignatures] = OrderedDict()
        """By zone, the one whose transfer began longest ago first."""
        self._lock = threading.Lock()
        self.made: dict[bytes, int] = {}
        self.hits: dict[bytes, int] = {}
        self.transfer_limit = transfer_limit
        """Signatures the transfer stores keep together, checked as each transfer ends."""
        self.transfer_evictions = 0
        """Zones' transfer stores dropped to stay within ``transfer_limit``."""

    def retain(
        self, signing: Mapping[bytes, frozenset[bytes]], transferred: frozenset[bytes]
    ) -> None:
        """Keep only what the keys ``signing`` names per zone (their DNSKEY rdatas) made,
        and transfer stores only for the ``transferred`` zones (those denying with NSEC3):
        a zone no longer signed, or a key that no longer signs, loses its signatures,
        and a signer still answering with them adds none back."""
        with self._lock:
            self._allowed = dict(signing)
            for part in [p for p in self._parts if p[1] not in signing.get(p[0], ())]:
                self._entries -= len(self._parts.pop(part))
            for apex in [a for a, kept in self._transfers.items()
                         if a not in transferred
                         or not set(kept.tag[2]) <= signing.get(a, frozenset())]:
                del self._transfers[apex]

    def get(self, part: Partition, key: Hashable) -> bytes | None:
        kept = self._parts.get(part)
        found = None if kept is None else kept.get(key)
        if found is not None:
            self.hits[part[0]] = self.hits.get(part[0], 0) + 1
        return found

    def put(self, part: Partition, key: Hashable, signature: bytes) -> None:
        """Keep ``signature`` (made just now: counted)."""
        apex, dnskey, window = part
        with self._lock:
            self.made[apex] = self.made.get(apex, 0) + 1
            if self._allowed is not None and dnskey not in self._allowed.get(apex, ()):
                return
            if self._entries >= SIGNATURE_ENTRIES:
                self._parts.clear()
                self._entries = 0
            kept = self._parts.get(part)
            if kept is None:  # a new window: the zone's earlier ones are not served again
                for older in [p for p in self._parts
                              if p[0] == apex and p[1] == dnskey and p[2] < window]:
                    self._entries -= len(self._parts.pop(older))
                kept = self._parts[part] = {}
            if key not in kept:
                self._entries += 1
            kept[key] = signature

    def transfer(self, apex: bytes, tag: TransferTag, version: int) -> TransferSignatures:
        """``apex``'s transfer store for ``tag``, begun for ``version``; a new one when
        the tag changed."""
        with self._lock:
            kept = self._transfers.get(apex)
            if kept is None or kept.tag != tag:
                kept = self._transfers[apex] = TransferSignatures(tag)
            self._transfers.move_to_end(apex)
            kept.begin(version)
            return kept

    def counted(self, apex: bytes, made: int, hits: int) -> None:
        """Count signatures a transfer made and found (as it ends), and drop the stores
        used longest ago while they hold more than ``transfer_limit``."""
        with self._lock:
            self.made[apex] = self.made.get(apex, 0) + made
            self.hits[apex] = self.hits.get(apex, 0) + hits
            held = sum(kept.signatures for kept in self._transfers.values())
            while held > self.transfer_limit and self._transfers:
                _, dropped = self._transfers.popitem(last=False)
                held -= dropped.signatures
                self.transfer_evictions += 1

    def transfer_signatures(self) -> int:
        """How many signatures the transfer stores of all zones keep."""
        with self._lock:
            return sum(kept.signatures for kept in self._transfers.values())

    def transfer_zones(self) -> tuple[bytes, ...]:
        """The zones with a transfer store, the one used longest ago first."""
        with self._lock:
            return tuple(self._transfers)

    def cached_by_zone(self) -> dict[bytes, int]:
        """How many signatures are kept for each zone, both stores'."""
        with self._lock:
            cached: dict[bytes, int] = {}
            for (apex, _, _), kept in self._parts.items():
                cached[apex] = cached.get(apex, 0) + len(kept)
            for apex, transfer in self._transfers.items():
                cached[apex] = cached.get(apex, 0) + transfer.signatures
            return cached


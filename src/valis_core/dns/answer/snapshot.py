"""One version of what is served, and the holder that swaps versions.

A ``Snapshot`` pairs a zone index with the cache of encoded responses derived from it,
the way dnspython's versioned zones pair a version with what readers see: its own cache
lives and dies with its index, so no answer is ever taken from a cache filled by another
version. ``IndexHolder.swap`` makes the new snapshot; a reader takes ``snapshot`` once
per query and answers wholly from it. The holder's snapshots share what outlives a
swap (``_cache.KeptAnswers``): the answers found, each taken by a later snapshot only
when every zone version it was read from is that snapshot's too, so a swap that changes
one zone keeps every other zone's answers, at no cost to the swap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from valis_core.dns.answer._cache import KeptAnswers, ResponseCache
from valis_core.dns.zone import ZoneIndex

if TYPE_CHECKING:
    from valis_core.dns.answer.signed import Signer


@attrs.frozen(eq=False)
class Snapshot:
    """A zone index and the responses encoded from it (filled as queries arrive), and
    the signer of its signed zones, if any (``valis_core.dns.answer.signed``)."""

    index: ZoneIndex
    cache: ResponseCache = attrs.field(factory=ResponseCache)
    signer: Signer | None = None


class IndexHolder:
    """The snapshot currently served. ``swap`` replaces it in one assignment."""

    __slots__ = ("_kept", "_signer", "_snapshot", "_swaps", "_watchers")

    def __init__(self, index: ZoneIndex, signer: Signer | None = None) -> None:
        self._signer = signer
        self._kept = KeptAnswers()
        self._snapshot = self._next(index)
        self._swaps = 0
        self._watchers: list[Callable[[Snapshot], object]] = []

    def watch(self, watcher: Callable[[Snapshot], object]) -> Callable[[], None]:
        """Call ``watcher`` with each new snapshot, in ``swap`` (or ``sign_with``) once it
        is served, until the function returned is called: the UDP workers' table moves
        at the swap (``fastpath.shared_table``), not when a worker next asks."""
        self._watchers.append(watcher)

        def unwatch() -> None:
            self._watchers.remove(watcher)

        return unwatch

    def _served(self) -> None:
        for watcher in tuple(self._watchers):
            watcher(self._snapshot)

    def _next(self, index: ZoneIndex) -> Snapshot:
        return Snapshot(index, ResponseCache(self._kept), self._signer)

    def sign_with(self, signer: Signer | None) -> None:
        """Answer with ``signer`` (``None``: unsigned) from the next query on; the
        signer is kept across swaps."""
        self._signer = signer
        self._snapshot = self._next(self._snapshot.index)
        self._served()

    @property
    def signer(self) -> Signer | None:
        return self._signer

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def current(self) -> ZoneIndex:
        """The index currently served."""
        return self._snapshot.index

    @property
    def swaps(self) -> int:
        """How many times the index has been replaced since this holder was made."""
        return self._swaps

    def swap(self, new: ZoneIndex) -> ZoneIndex:
        """Serve ``new`` (with a cache of its own, and the answers of every zone it
        shares with the last one) from the next query on; return the index it replaces."""
        old, self._snapshot = self._snapshot.index, self._next(new)
        self._swaps += 1
        self._served()
        return old

"""A persistent sorted sequence of distinct byte strings, read as a ring: the NSEC3
chain's hashes (``valis_core.dns.dnssec.nsec3``), which a zone's next version changes by a
few names while answers are still made from the last one.

The items are kept in order in chunks of about ``CHUNK`` items (tuples, never changed
once made) with the first item of each in a tuple beside them, so an item is found by
two bisections. ``changed`` makes a new ring sharing every chunk the change did not
touch: it copies the chunks it touches and the tuples of chunks and first items, so a
change of a few items costs about ``CHUNK`` plus ``len / CHUNK`` pointer copies (50 to
150 microseconds at a million items on a busy two-core machine, where copying a sorted
list of them to place one item takes 45 ms), and a reader of the old ring never sees the
new one's items.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import attrs

CHUNK = 1024
"""Items per chunk as a ring is made; a chunk grown past twice this is split, and one
shrunk below a quarter of it is joined to the next."""
MERGE = 16
"""Past this many changes in one chunk, they are merged by one sort, not placed one by
one."""


@attrs.frozen(eq=False)
class Ring:
    """The items in ascending order (``chunks``, none empty), each chunk's first item
    (``firsts``), how many there are, and the chunks' size as the ring was made."""

    chunks: tuple[tuple[bytes, ...], ...] = ()
    firsts: tuple[bytes, ...] = ()
    size: int = 0
    chunk: int = CHUNK

    @classmethod
    def of(cls, items: Iterable[bytes], chunk: int = CHUNK) -> Ring:
        """The ring of ``items`` (distinct; sorted here) in chunks of about ``chunk``."""
        ordered = sorted(items)
        chunks: list[tuple[bytes, ...]] = []
        firsts: list[bytes] = []
        _append_split(chunks, firsts, ordered, chunk)
        return cls(tuple(chunks), tuple(firsts), len(ordered), chunk)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            yield from chunk

    def _chunk_of(self, key: bytes) -> int:
        """The chunk ``key`` belongs in: the last whose first item is not above it."""
        return max(bisect.bisect_right(self.firsts, key) - 1, 0)

    def at_or_after(self, key: bytes) -> bytes | None:
        """The first item not below ``key`` (``None``: every item is below it)."""
        if not self.size:
            return None
        at = self._chunk_of(key)
        chunk = self.chunks[at]
        pos = bisect.bisect_left(chunk, key)
        if pos < len(chunk):
            return chunk[pos]
        return self.chunks[at + 1][0] if at + 1 < len(self.chunks) else None

    def before(self, key: bytes) -> bytes:
        """The last item below ``key``, or the last of all when none is (the ring
        wraps). The ring must not be empty."""
        at = self._chunk_of(key)
        chunk = self.chunks[at]
        pos = bisect.bisect_left(chunk, key)
        if pos:
            return chunk[pos - 1]
        return self.chunks[at - 1][-1]  # at 0: the last chunk's, wrapping

    def after(self, key: bytes) -> bytes:
        """The first item above ``key``, or the first of all when none is (the ring
        wraps). The ring must not be empty."""
        at = self._chunk_of(key)
        chunk = self.chunks[at]
        pos = bisect.bisect_right(chunk, key)
        if pos < len(chunk):
            return chunk[pos]
        return self.chunks[(at + 1) % len(self.chunks)][0]

    def changed(self, removed: Iterable[bytes], added: Iterable[bytes]) -> Ring:
        """A new ring without the items ``removed`` (each in this one) and with
        ``added`` (each not in it, once); this one is left as it was. Only the chunks
        holding a change are copied (a chunk left too small joins the next)."""
        touched: dict[int, tuple[list[bytes], list[bytes]]] = {}
        for item in removed:
            touched.setdefault(self._chunk_of(item), ([], []))[0].append(item)
        for item in added:
            touched.setdefault(self._chunk_of(item), ([], []))[1].append(item)
        if not touched:
            return self
        if not self.chunks:  # an empty ring: every item is an added one
            return Ring.of(touched[0][1], self.chunk)
        old_chunks, old_firsts, least = self.chunks, self.firsts, self.chunk // 4
        chunks: list[tuple[bytes, ...]] = []
        firsts: list[bytes] = []
        size = self.size
        pending = sorted(touched)
        next_pending = 0
        done = 0  # the chunks before this one are in ``chunks``
        short: list[bytes] = []  # a chunk too small to stand, to join to the next
        while next_pending < len(pending) or short:
            at = done if short else pending[next_pending]
            chunks.extend(old_chunks[done:at])
            firsts.extend(old_firsts[done:at])
            items = [*short, *old_chunks[at]]
            if next_pending < len(pending) and pending[next_pending] == at:
                gone, new = touched[at]
                next_pending += 1
                if len(gone) + len(new) > MERGE:  # many: one sort of the merged items
                    dropped = set(gone)
                    items = [item for item in items if item not in dropped]
                    items.extend(new)
                    items.sort()
                else:
                    for item in gone:
                        del items[bisect.bisect_left(items, item)]
                    for item in new:
                        bisect.insort(items, item)
                size += len(new) - len(gone)
            done = at + 1
            short = items if len(items) < least and done < len(old_chunks) else []
            if not short:
                _append_split(chunks, firsts, items, self.chunk)
        chunks.extend(old_chunks[done:])
        firsts.extend(old_firsts[done:])
        if len(chunks) > 1 and len(chunks[-1]) < least:  # the last, joined to its left
            tail, left = chunks.pop(), chunks.pop()
            del firsts[-2:]
            _append_split(chunks, firsts, [*left, *tail], self.chunk)
        return Ring(tuple(chunks), tuple(firsts), size, self.chunk)


def _append_split(
    chunks: list[tuple[bytes, ...]], firsts: list[bytes], items: list[bytes], chunk: int
) -> None:
    """Append ``items`` as one chunk, or split evenly into chunks of about ``chunk``
    when past twice that."""
    if not items:
        return
    pieces = len(items) // chunk if len(items) > 2 * chunk else 1
    size, longer = divmod(len(items), pieces)
    at = 0
    for piece in range(pieces):
        end = at + size + (piece < longer)
        chunks.append(tuple(items[at:end]))
        firsts.append(items[at])
        at = end

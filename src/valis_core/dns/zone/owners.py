"""Persistent owner tables: a zone version shares with the last every part a change did
not touch.

``OwnerMap`` (owner to value: a zone's records, its child counts, the index's zones by
apex) and ``OwnerSet`` (a zone's empty non-terminals, cuts, DNAME owners) are immutable
sharded dicts: a tuple of plain ``dict`` shards, and a key lives in shard
``hash(key) & mask``. The next version comes from a ``Draft``, which copies a shard the
first time it writes to it and leaves every other shard shared, so a change of k owners
costs O(k) shard copies of about ``SHARD_OWNERS`` entries each, plus the tuple of shard
references (one pointer per ``SHARD_OWNERS`` owners), whatever the size of the table.
No version is ever mutated once made.

A shard that grows past twice ``SHARD_OWNERS`` splits in two (extendible hashing: the
tuple is a directory of ``2**depth`` slots, and a shard of local depth ``d`` fills every
slot whose low ``d`` bits are its own; splitting one doubles the directory when its
depth is the directory's). Growth therefore costs O(1) amortised per owner added, and
never a stall over the whole table; a table that shrinks keeps its shards (a full build
sizes them again).

Why this structure (measured on the development machine, Python 3.11, 10**6 owner
keys): a plain ``dict.get`` is 38 ns hot and 383 ns cold, a HAMT (``immutables.Map``)
72/633 ns and takes 2.9 s to build 10**6 entries even through ``mutate()`` (the cold
boot budget is 2 s for everything); one more ``hash() & mask`` and tuple index here adds
some 40-90 ns a lookup from Python (``hash`` of ``bytes`` is cached in the object) and
nothing measurable from C, and sharding costs about one more dict insert per owner at
build. A one-owner patch then copies one shard instead of the whole table:
``benchmarks/zone_patch.py`` gives 23 us at 10**4 owners, 24 us at 10**5 and 32 us at
10**6 (a dict copy: 58 us, 1.3 ms, 72 ms), and ``benchmarks/answer_micro.py`` stays
within its noise. A base dict with an overlay of recent changes would look up slower
(two probes on a miss, the common case of a flood) and stall on every compaction.

Two versions tell what they do not share without walking what they do: ``differing``
compares only the shards that are not the same object (``ZoneIndex.changed_from``, the
NSEC3 chain's names that came or went).

The compiled fast path (``answer/_fastpath.c``) reads ``shards`` directly: it hashes the
key with ``PyObject_Hash`` (the same hash as here), indexes the tuple and probes the
dict, so a lookup costs it one ``dict`` probe, as before. The answer path's Python
lookups do not go through ``get`` or ``in`` either (a method of a class written in
Python costs a call: ``in`` some 100-300 ns): ``answer._lookup`` probes with
``owner_get`` and ``owner_has`` (one C call each, from the same extension; the same in
Python when it is not built), and ``ServedZone.exists`` and ``ZoneIndex.zone_for`` pick
the shard inline (``shards[hash(key) & mask]``; a one-shard table's dict as it is).
"""

from __future__ import annotations

from collections.abc import Collection, ItemsView, Iterable, Iterator, Mapping, ValuesView
from collections.abc import Set as AbstractSet
from itertools import chain
from typing import Any, Generic, Protocol, TypeVar, overload

_V = TypeVar("_V")
_D = TypeVar("_D")

SHARD_OWNERS = 1024
"""How many keys a shard holds when a table is built (a split keeps it under twice
this): the cost of copying one shard on a change."""

_EMPTY: dict[Any, Any] = {}


def _depth_for(size: int) -> int:
    depth = 0
    while (SHARD_OWNERS << depth) < size:
        depth += 1
    return depth


def _sharded(held: Mapping[bytes, Any]) -> tuple[dict[bytes, Any], ...]:
    depth = _depth_for(len(held))
    if depth == 0:
        return (dict(held.items()),)
    if type(held) is dict:
        return _shards(held, 1 << depth)
    return _sharded_items(held.items(), (1 << depth) - 1)


def _shards_of(held: dict[bytes, Any], count: int) -> tuple[dict[bytes, Any], ...]:
    """``held`` in ``count`` shards, each key at ``hash(key) & (count - 1)``."""
    return _sharded_items(held.items(), count - 1)


def _sharded_items(
    items: Iterable[tuple[bytes, Any]], mask: int
) -> tuple[dict[bytes, Any], ...]:
    shards: list[dict[bytes, Any]] = [{} for _ in range(mask + 1)]
    for key, value in items:
        shards[hash(key) & mask][key] = value
    return tuple(shards)


try:  # the same in C (_rows.c): a large zone's build
    from valis_core.dns.zone._rows import shards as _shards
except ImportError:  # not built
    _shards = _shards_of


class _Sharded:
    """What ``OwnerMap`` and ``OwnerSet`` share: the directory of shards."""

    __slots__ = ("depths", "mask", "shards", "size")

    shards: tuple[dict[bytes, Any], ...]
    """The directory: ``2**depth`` slots, the shard of a key at ``hash(key) & mask``
    (one shard may fill several slots)."""
    mask: int
    depths: tuple[int, ...] | None
    """Each slot's shard's local depth; ``None`` while every shard fills one slot."""
    size: int
    """How many keys it holds (``len``, without a method call: the answer path's
    emptiness checks read it)."""

    def _init(
        self, shards: tuple[dict[bytes, Any], ...], depths: tuple[int, ...] | None, size: int
    ) -> None:
        self.shards = shards
        self.mask = len(shards) - 1
        self.depths = depths
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __contains__(self, key: object) -> bool:
        return key in self.shards[hash(key) & self.mask]

    def __iter__(self) -> Iterator[bytes]:
        return chain.from_iterable(self._distinct())  # C iterates each shard

    def _distinct(self) -> Iterator[dict[bytes, Any]]:
        """Every shard once."""
        depths = self.depths
        if depths is None:
            yield from self.shards
            return
        for slot, shard in enumerate(self.shards):
            if slot < 1 << depths[slot]:  # a shard's first slot
                yield shard

    def differing(self, other: _Sharded) -> set[bytes]:
        """The keys held by one table and not the other, or held by both with values
        that are not the very same object: O(the shards they do not share) when one
        was drafted from the other (however many versions apart, splits and all),
        O(size) for tables made apart."""
        found: set[bytes] = set()
        for mine, theirs, alike in _unshared(self, other):
            if alike:  # two shards of the same slots: compared directly
                found.update(k for k, v in mine.items() if theirs.get(k, _ABSENT) is not v)
                found.update(k for k in theirs if k not in mine)
            else:
                found.update(
                    k for k in mine.keys() | theirs.keys()
                    if _value(self, k) is not _value(other, k)
                )
        return found


_ABSENT = object()


def _value(table: _Sharded, key: bytes) -> object:
    return table.shards[hash(key) & table.mask].get(key, _ABSENT)


def _unshared(
    a: _Sharded, b: _Sharded
) -> Iterator[tuple[dict[bytes, Any], dict[bytes, Any], bool]]:
    """The pairs of shards ``a`` and ``b`` hold for the same slots and do not share
    (``a``'s first), each once, and whether the two cover exactly the same slots. A
    shard both hold (the same object, so the same keys for the same slots) is held
    alike by both."""
    if a is b or a.shards is b.shards:
        return
    swap = len(a.shards) < len(b.shards)
    wide, narrow = (b, a) if swap else (a, b)
    seen: set[tuple[int, int]] = set()
    narrow_shards, narrow_mask = narrow.shards, narrow.mask
    for slot, mine in enumerate(wide.shards):
        theirs = narrow_shards[slot & narrow_mask]
        if mine is theirs or (id(mine), id(theirs)) in seen:
            continue
        seen.add((id(mine), id(theirs)))
        alike = _depth(wide, slot) == _depth(narrow, slot & narrow_mask)
        yield (theirs, mine, alike) if swap else (mine, theirs, alike)


def _depth(table: _Sharded, slot: int) -> int:
    return table.mask.bit_length() if table.depths is None else table.depths[slot]


class OwnerMap(_Sharded, Mapping[bytes, _V], Generic[_V]):
    """An immutable map from owner keys (``bytes``) to values; ``draft`` starts the next
    version."""

    __slots__ = ()

    def __init__(self, items: Mapping[bytes, _V] | None = None) -> None:
        held = items if items is not None else _EMPTY
        self._init(_sharded(held), None, len(held))

    @overload
    def get(self, key: bytes, /) -> _V | None: ...
    @overload
    def get(self, key: bytes, default: _V | _D, /) -> _V | _D: ...
    def get(self, key: bytes, default: object = None) -> object:
        return self.shards[hash(key) & self.mask].get(key, default)

    def __getitem__(self, key: bytes) -> _V:
        value: _V = self.shards[hash(key) & self.mask][key]
        return value

    def items(self) -> ItemsView[bytes, _V]:
        return _Items(self)

    def values(self) -> ValuesView[_V]:
        return _Values(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OwnerMap):
            return len(self) == len(other) and _equal(self, other)
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # a mapping: unhashable, as dict is

    def __repr__(self) -> str:
        return f"OwnerMap({len(self)} owners)"

    def __reduce__(self) -> tuple[type[OwnerMap[_V]], tuple[dict[bytes, _V]]]:
        return OwnerMap, (dict(self.items()),)  # re-sharded: hashes differ by process

    def draft(self) -> Draft:
        return Draft(self)


class _Items(ItemsView[bytes, _V]):
    """``OwnerMap.items``, read shard by shard (AXFR, signing and checks walk them)."""

    __slots__ = ()
    _mapping: OwnerMap[_V]

    def __iter__(self) -> Iterator[tuple[bytes, _V]]:
        return chain.from_iterable(map(dict.items, self._mapping._distinct()))


class _Values(ValuesView[_V]):
    __slots__ = ()
    _mapping: OwnerMap[_V]

    def __iter__(self) -> Iterator[_V]:
        return chain.from_iterable(map(dict.values, self._mapping._distinct()))


class OwnerSet(_Sharded, AbstractSet[bytes]):
    """An immutable set of owner keys (``bytes``); ``draft`` starts the next version.
    Set operations with other sets (``|``, ``-``, ``^``) give a ``frozenset``."""

    __slots__ = ()

    def __init__(self, keys: Iterable[bytes] = ()) -> None:
        held = dict.fromkeys(keys)
        self._init(_sharded(held), None, len(held))

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OwnerSet):
            return len(self) == len(other) and _equal(self, other)
        return AbstractSet.__eq__(self, other)

    __hash__ = AbstractSet._hash  # hashable, as frozenset is

    def __repr__(self) -> str:
        return f"OwnerSet({len(self)} owners)"

    def __reduce__(self) -> tuple[type[OwnerSet], tuple[list[bytes]]]:
        return OwnerSet, (list(self),)  # re-sharded: hashes differ by process

    def draft(self) -> Draft:
        return Draft(self)


NO_OWNERS = OwnerSet()
"""The empty set, shared (most zones have no delegation, DNAME or empty non-terminal:
one object for all of them, as ``frozenset()`` is)."""


def owner_set(keys: Collection[bytes]) -> OwnerSet:
    """An ``OwnerSet`` of ``keys``; ``NO_OWNERS`` when there are none."""
    return OwnerSet(keys) if keys else NO_OWNERS


def _equal(a: _Sharded, b: _Sharded) -> bool:
    """Same keys, equal values (the lengths already found equal)."""
    return all(
        _value(a, key) == _value(b, key)
        for mine, theirs, _ in _unshared(a, b)
        for key in mine.keys() | theirs.keys()
    )


class Draft:
    """The next version of an ``OwnerMap`` or ``OwnerSet`` while it is being made: reads
    see the writes so far; ``finish`` freezes it (the draft is then spent). Shards are
    copied the first time they are written, so the version drafted from is never
    changed. A set's draft holds ``None`` for each key (``add``, ``discard``)."""

    __slots__ = ("_base", "_depths", "_mask", "_owned", "_shards", "_size")

    def __init__(self, base: _Sharded) -> None:
        self._base = base
        self._shards = list(base.shards)
        self._mask = base.mask
        self._depths = None if base.depths is None else list(base.depths)
        self._size = len(base)
        self._owned: set[int] = set()
        """The ids of shards this draft made (held by ``_shards``, so ids stay unique)."""

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        return key in self._shards[hash(key) & self._mask]

    def get(self, key: bytes, default: Any = None) -> Any:
        return self._shards[hash(key) & self._mask].get(key, default)

    def __getitem__(self, key: bytes) -> Any:
        return self._shards[hash(key) & self._mask][key]

    def __setitem__(self, key: bytes, value: Any) -> None:
        slot = hash(key) & self._mask
        shard = self._writable(slot)
        if key not in shard:
            self._size += 1
            shard[key] = value
            if len(shard) > 2 * SHARD_OWNERS:
                self._split(slot)
            return
        shard[key] = value

    def __delitem__(self, key: bytes) -> None:
        slot = hash(key) & self._mask
        if key not in self._shards[slot]:
            raise KeyError(key)
        del self._writable(slot)[key]
        self._size -= 1

    def add(self, key: bytes, /) -> None:
        if key not in self:
            self[key] = None

    def discard(self, key: bytes, /) -> None:
        if key in self:
            del self[key]

    def _depth(self, slot: int) -> int:
        return self._mask.bit_length() if self._depths is None else self._depths[slot]

    def _writable(self, slot: int) -> dict[bytes, Any]:
        shard = self._shards[slot]
        if id(shard) in self._owned:
            return shard
        shard = shard.copy()
        self._owned.add(id(shard))
        step = 1 << self._depth(slot)
        for other in range(slot & (step - 1), len(self._shards), step):
            self._shards[other] = shard
        return shard

    def _split(self, slot: int) -> None:
        depth = self._depth(slot)
        if self._depths is None:
            self._depths = [depth] * len(self._shards)
        if depth == self._mask.bit_length():  # the directory doubles
            self._shards += self._shards
            self._depths += self._depths
            self._mask = len(self._shards) - 1
        bit = 1 << depth
        full = self._shards[slot]
        low = {key: value for key, value in full.items() if not hash(key) & bit}
        high = {key: value for key, value in full.items() if hash(key) & bit}
        self._owned.discard(id(full))
        self._owned.update((id(low), id(high)))
        for other in range(slot & (bit - 1), len(self._shards), bit):
            self._shards[other] = high if other & bit else low
            self._depths[other] = depth + 1

    def _frozen(self, into: _Sharded) -> None:
        depths = None if self._depths is None else tuple(self._depths)
        if depths == self._base.depths:
            depths = self._base.depths  # shared, as the shards not written are
        into._init(tuple(self._shards), depths, self._size)

    def finish_map(self) -> OwnerMap[Any]:
        """The new ``OwnerMap`` (the version drafted from, if nothing was written)."""
        if not self._owned and isinstance(self._base, OwnerMap):
            return self._base
        made: OwnerMap[Any] = OwnerMap.__new__(OwnerMap)
        self._frozen(made)
        return made

    def finish_set(self) -> OwnerSet:
        """The new ``OwnerSet`` (the version drafted from, if nothing was written)."""
        if not self._owned and isinstance(self._base, OwnerSet):
            return self._base
        if not self._size:
            return NO_OWNERS
        made = OwnerSet.__new__(OwnerSet)
        self._frozen(made)
        return made


class Names(Protocol):
    """A set of names as ``tree.appear`` and ``tree.vanish`` update it: a ``set``
    while a zone is built, a ``Draft`` while it is patched."""

    def __contains__(self, key: object, /) -> bool: ...
    def add(self, key: bytes, /) -> None: ...
    def discard(self, key: bytes, /) -> None: ...


class Counts(Protocol):
    """Child counts as ``tree.appear`` and ``tree.vanish`` update them: a ``dict``
    while a zone is built, a ``Draft`` while it is patched."""

    def get(self, key: bytes, default: int, /) -> int: ...
    def __getitem__(self, key: bytes, /) -> int: ...
    def __setitem__(self, key: bytes, value: int, /) -> None: ...
    def __delitem__(self, key: bytes, /) -> None: ...

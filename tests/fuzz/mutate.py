"""A deterministic byte mutator: the same seed and input give the same mutant.

It does what coverage-blind fuzzers do well on wire formats: flip bits, overwrite bytes
with boundary values, cut the input short, insert and delete runs, splice in a piece of
another corpus input, and edit length fields (a big-endian 16-bit count or length, and
the octal size and checksum fields of a tar header) so that framing code is pushed past
its edges rather than rejected at the first check.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

MAX_LENGTH = 1 << 16
"""No mutant grows beyond this; the readers' interesting edges are all far below it."""

_INTERESTING_16 = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x1FF, 0x200, 0x4D0, 0x7FFF, 0x8000, 0xFFFF)
_INTERESTING_8 = (0, 1, 0x3F, 0x40, 0x7F, 0x80, 0xC0, 0xFF)
_TAR_BLOCK = 512
_TAR_SIZE = slice(124, 136)
_TAR_CHECKSUM = slice(148, 156)

Mutation = Callable[[random.Random, bytearray, Sequence[bytes]], None]


def _flip_bit(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    if data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice((*_INTERESTING_8, rng.randrange(256)))


def _truncate(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    if data:
        del data[rng.randrange(len(data)) :]


def _delete(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    if data:
        start = rng.randrange(len(data))
        del data[start : start + rng.choice((1, 2, 4, rng.randrange(1, 64)))]


def _insert(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    at = rng.randrange(len(data) + 1)
    fill = rng.choice((b"\x00", b"\xff", b"\xc0\x0c", bytes([rng.randrange(256)])))
    data[at:at] = fill * rng.randrange(1, 17)


def _duplicate(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    if data:
        start = rng.randrange(len(data))
        piece = data[start : start + rng.randrange(1, 128)]
        at = rng.randrange(len(data) + 1)
        data[at:at] = piece


def _splice(rng: random.Random, data: bytearray, others: Sequence[bytes]) -> None:
    if not others:
        return
    other = rng.choice(others)
    if not other:
        return
    cut = rng.randrange(len(data) + 1)
    start = rng.randrange(len(other))
    data[cut:] = other[start : start + rng.randrange(1, len(other) - start + 1)]


def _length_16(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    """Overwrite a big-endian 16-bit field: DNS counts and lengths, the TCP prefix."""
    if len(data) < 2:
        return
    # Half the time one of the DNS header counts or the TCP length prefix, else anywhere.
    at = rng.choice((0, 4, 6, 8, 10)) if rng.random() < 0.5 else rng.randrange(len(data) - 1)
    at = min(at, len(data) - 2)
    current = data[at] << 8 | data[at + 1]
    value = rng.choice(
        (*_INTERESTING_16, (current + 1) & 0xFFFF, (current - 1) & 0xFFFF, len(data) & 0xFFFF)
    )
    data[at : at + 2] = value.to_bytes(2, "big")


def _tar_field(rng: random.Random, data: bytearray, _: Sequence[bytes]) -> None:
    """Rewrite a tar header's octal size (keeping its checksum right half the time)."""
    blocks = len(data) // _TAR_BLOCK
    if not blocks:
        return
    base = rng.randrange(blocks) * _TAR_BLOCK
    header = data[base : base + _TAR_BLOCK]
    size = rng.choice((0, 1, 511, 512, 513, 1 << 20, 8**11 - 1, rng.randrange(4096)))
    header[_TAR_SIZE] = (b"%011o\0" % size) if rng.random() < 0.8 else b"\x80" + bytes(11)
    if rng.random() < 0.5:
        header[_TAR_CHECKSUM] = b" " * 8
        header[_TAR_CHECKSUM] = b"%06o\0 " % sum(header)
    data[base : base + _TAR_BLOCK] = header


MUTATIONS: tuple[Mutation, ...] = (
    _flip_bit,
    _flip_bit,
    _set_byte,
    _truncate,
    _delete,
    _insert,
    _duplicate,
    _splice,
    _length_16,
    _length_16,
    _tar_field,
)


def mutate(rng: random.Random, data: bytes, others: Sequence[bytes] = ()) -> bytes:
    """``data`` after one to eight stacked mutations chosen by ``rng``."""
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 2, 3, 4, 8))):
        rng.choice(MUTATIONS)(rng, out, others)
    return bytes(out[:MAX_LENGTH])

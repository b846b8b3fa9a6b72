"""Whether a node's signing keys let it serve the zones operator state says are signed.

A zone signed in operator state (``zone_signing``) is answered with the keys its row
names: its CSK, or its KSK and ZSK, and while it rolls the keys its roll's step
publishes, signs with and has the parent's DS name. ``needed_tags`` is that set, over the
step the roll is at and every step after it (a roll moves on by itself once its step's
time has come, so a node must hold what the later steps sign with too). A node lacking
one of them (or holding it with another algorithm) cannot answer the zone at all: the
resident answers it SERVFAIL, refuses it at bring-up and on a reload, and condense
refuses to claim the fence for a state directory that lacks one.

This is the one place that decides it: the resident's signer
(``valis_core.resident.signing``) and condense's proof that a zone is servable
(``valis_core.ops.condense_host``) both ask ``missing_keys``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import attrs

from valis_core.dns.dnssec import rollover
from valis_core.dns.dnssec.signing import ZoneKey


class ZoneSigning(Protocol):
    """How operator state says a zone is signed, as far as this decides: its name, its
    algorithm, its CSK's (or KSK's) tag, its ZSK's tag (``None`` with a CSK) and its
    rollover, if one is under way. ``operator_state.zone_signing.ZoneSigning`` is one;
    the engine takes the values and never reads operator state itself."""

    @property
    def zone(self) -> str: ...
    @property
    def algorithm(self) -> int: ...
    @property
    def key_tag(self) -> int: ...
    @property
    def zsk_tag(self) -> int | None: ...
    @property
    def rollover(self) -> rollover.Rollover | None: ...


def _keying_tags(keying: rollover.Keying) -> set[int]:
    return {*keying.published, *keying.key_signers, *keying.parent_ds, keying.zone_signer}


def needed_tags(row: ZoneSigning) -> tuple[int, ...]:
    """The key tags ``row``'s zone is published, signed and DS-named with, at its roll's
    step and every step after it until the roll is over (sorted)."""
    roll = row.rollover
    needed = _keying_tags(rollover.zone_keying(row.key_tag, row.zsk_tag, roll))
    if roll is not None:
        order = rollover.steps(roll.kind)
        for step in order[order.index(roll.step) + 1 :]:
            later = attrs.evolve(roll, step=step)
            needed |= _keying_tags(rollover.zone_keying(row.key_tag, row.zsk_tag, later))
        if roll.kind == rollover.ZSK:
            done = rollover.zone_keying(row.key_tag, roll.new, None)
        else:
            done = rollover.zone_keying(roll.new, row.zsk_tag, None)
        needed |= _keying_tags(done)
    return tuple(sorted(needed))


@attrs.frozen
class MissingKeys:
    """A signed zone a node cannot serve: the keys it needs (``needed``), those it lacks
    (``missing``: not held, or held with another algorithm than ``algorithm``), and the
    tags it holds for the zone (``held``, any algorithm)."""

    zone: str
    algorithm: int
    needed: tuple[int, ...]
    missing: tuple[int, ...]
    held: tuple[int, ...]
    step: str | None = None

    def describe(self) -> str:
        """One clause naming the zone, what it is signed with and the missing keys."""
        rolling = "" if self.step is None else f" (its rollover at step {self.step})"
        have = "none" if not self.held else "key tag " + ", ".join(map(str, self.held))
        return (
            f"zone {self.zone} is signed in operator state with algorithm {self.algorithm} "
            f"key tag {' and '.join(map(str, self.needed))}{rolling}, and the state "
            f"directory lacks key tag {', '.join(map(str, self.missing))} (it holds {have} "
            "for the zone)"
        )


def missing_keys(row: ZoneSigning, held: Mapping[int, ZoneKey]) -> MissingKeys | None:
    """What ``row``'s zone lacks among ``held`` (its keys by tag), ``None`` when nothing."""
    needed = needed_tags(row)
    missing = tuple(
        tag for tag in needed if tag not in held or held[tag].algorithm != row.algorithm
    )
    if not missing:
        return None
    return MissingKeys(
        zone=row.zone,
        algorithm=row.algorithm,
        needed=needed,
        missing=missing,
        held=tuple(sorted(held)),
        step=None if row.rollover is None else row.rollover.step,
    )


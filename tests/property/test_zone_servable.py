"""Whether a state directory's keys serve a signed zone is decided in one place
(``zone_servable``), for the resident's signer and for condense before it claims the
fence: a zone is servable exactly when every key its signing and its roll need, from
the step the roll is at to its end, is held with the zone's algorithm; a refusal names
the zone and every key lacking, and the resident answers with keys exactly when condense
would let the node claim."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns import dnssec
from valis_core.dns.dnssec import ZoneKey, rollover
from valis_core.dns.dnssec.rollover import Rollover, Timing
from valis_core.dns.dnssec.zone_servable import missing_keys, needed_tags
from valis_core.operator_state.zone_signing import ZoneSigning
from valis_core.resident.signing import zone_keys_for

Z = "example.test."


def _pool() -> dict[int, ZoneKey]:
    """Keys of both algorithms, each with its own tag."""
    pool: dict[int, ZoneKey] = {}
    for algorithm in (13, 13, 13, 13, 15, 15):
        key = ZoneKey(dnssec.generate_key(algorithm))
        while key.tag in pool:  # pragma: no cover - a 16-bit tag drawn twice
            key = ZoneKey(dnssec.generate_key(algorithm))
        pool[key.tag] = key
    return pool


POOL = _pool()
TAGS = sorted(POOL)


@st.composite
def rows(draw: st.DrawFn) -> ZoneSigning:
    """A signed zone: a CSK or a KSK/ZSK split, at rest or at any step of any roll it can
    be rolling by."""
    split = draw(st.booleans())
    tags = draw(st.permutations(TAGS))
    key_tag, zsk_tag, new = tags[0], tags[1] if split else None, tags[2]
    algorithm = draw(st.sampled_from((13, 15)))
    roll = None
    if draw(st.booleans()):
        kind = rollover.kind_for(split=split, zsk=split and draw(st.booleans()))
        old = zsk_tag if kind == rollover.ZSK and zsk_tag is not None else key_tag
        step = draw(st.sampled_from(rollover.steps(kind)))
        roll = Rollover(old, new, step, 1000.0, Timing(), kind)
    return ZoneSigning(Z, algorithm, key_tag, Timing(), roll, zsk_tag=zsk_tag)


helds = st.sets(st.sampled_from(TAGS)).map(lambda tags: {tag: POOL[tag] for tag in tags})


def _answered_with(row: ZoneSigning) -> set[int]:
    keying = rollover.zone_keying(row.key_tag, row.zsk_tag, row.rollover)
    return {*keying.published, *keying.key_signers, *keying.parent_ds, keying.zone_signer}


def _later(row: ZoneSigning) -> list[ZoneSigning]:
    """``row`` at every step its roll moves on to (by time or by the operator), and once
    the roll is over."""
    found = []
    roll = row.rollover
    while roll is not None:
        moved = rollover.advance(roll, roll.since + 10**9)
        if moved == roll:
            moved = rollover.confirm(roll, roll.since + 1)
        if moved is None:
            column = "zsk_tag" if roll.kind == rollover.ZSK else "key_tag"
            tag: dict[str, Any] = {column: roll.new}
            found.append(attrs.evolve(row, rollover=None, **tag))
        else:
            found.append(attrs.evolve(row, rollover=moved))
        roll = moved
    return found


@given(rows(), helds)
def test_a_zone_is_servable_exactly_when_every_needed_key_is_held_with_its_algorithm(
    row: ZoneSigning, held: dict[int, ZoneKey]
) -> None:
    lacking = [tag for tag in needed_tags(row)
               if tag not in held or held[tag].algorithm != row.algorithm]
    shortfall = missing_keys(row, held)
    if not lacking:
        assert shortfall is None
        return
    assert shortfall is not None
    assert list(shortfall.missing) == lacking
    text = shortfall.describe()
    assert f"zone {Z} " in text
    assert f"lacks key tag {', '.join(map(str, lacking))} " in text


@given(rows())
def test_the_keys_needed_cover_the_step_and_every_step_the_roll_moves_on_to(
    row: ZoneSigning,
) -> None:
    needed = set(needed_tags(row))
    for at in (row, *_later(row)):
        assert _answered_with(at) <= needed


@given(rows(), helds)
def test_the_resident_signs_a_zone_exactly_when_condense_would_claim_for_it(
    row: ZoneSigning, held: dict[int, ZoneKey]
) -> None:
    assert (zone_keys_for(row, held) is None) == (missing_keys(row, held) is not None)


@given(rows())
def test_a_node_answering_a_rolls_step_holds_every_key_the_rest_of_the_roll_needs(
    row: ZoneSigning,
) -> None:
    """The resident at boot and condense before its claim ask the same of a rolling zone:
    the keys of the step it is at are all its later steps need, so the roll moving on by
    itself after the claim never finds a key missing."""
    assert set(needed_tags(row)) == _answered_with(row)

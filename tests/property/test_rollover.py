"""A rollover never leaves a resolver without a valid chain: whatever the timings,
whenever the resident looks and the operator confirms, a resolver holding any DS set, any
DNSKEY RRset and any signature it fetched within their TTLs (from a parent or a zone
server lagging by up to its propagation delay) can still chain DS to DNSKEY to the data.
So for each roll: a CSK's, and a split zone's KSK (Double-DS) or ZSK (pre-publish)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.dnssec import rollover
from valis_core.dns.dnssec.rollover import Keying, Rollover, RolloverError, Timing

OLD, NEW = 11, 22
OTHER = 33
"""A split zone's key that is not rolling: its ZSK while the KSK rolls, and the reverse."""
T0 = 1000

timings = st.builds(
    Timing,
    dnskey_ttl=st.integers(0, 40),
    ds_ttl=st.integers(0, 40),
    max_zone_ttl=st.integers(0, 40),
    propagation_delay=st.integers(0, 20),
    parent_propagation_delay=st.integers(0, 20),
)


@attrs.frozen
class History:
    """What the zone served from each moment on, and when the parent's DS set changed:
    ``parent`` holds, per change, the moment it was first published somewhere and the
    moment it was everywhere (confirmed plus the parent's propagation delay)."""

    zone: tuple[tuple[float, Keying], ...]
    parent: tuple[tuple[float, float, tuple[int, ...]], ...]
    timing: Timing
    end: float


def zone_keying(kind: str, roll: Rollover | None, done: bool) -> Keying:
    """What the zone serves, rolling its ``kind`` of key by ``roll`` (``done``: over)."""
    key = NEW if done else OLD
    if kind == rollover.CSK:
        return rollover.zone_keying(key, None, roll)
    if kind == rollover.KSK:
        return rollover.zone_keying(key, OTHER, roll)
    return rollover.zone_keying(OTHER, key, roll)


def drive(data: st.DataObject, timing: Timing, kind: str = rollover.CSK) -> History:
    """Run one roll to its end with events drawn at random: resident ticks at any
    moment, confirmations tried at any step (refused ones change nothing)."""
    roll: Rollover | None = rollover.start(OLD, NEW, timing, T0, kind)
    zone: list[tuple[float, Keying]] = [(0.0, zone_keying(kind, None, done=False))]
    first_ds = zone[0][1].parent_ds
    zone.append((float(T0), zone_keying(kind, roll, done=False)))  # served from the start
    parent: list[tuple[float, float, tuple[int, ...]]] = [(0.0, 0.0, first_ds)]
    now = float(T0)
    for event in range(40):
        if roll is None:
            break
        now += data.draw(st.integers(0, 30), label="pause")
        late = event >= 20  # past twenty drawn events, the operator and the clock move on
        due = rollover.due(roll)
        if late and due is not None:
            now = max(now, due)
        if (late and due is None) or data.draw(st.booleans(), label="operator confirms"):
            try:
                confirmed = rollover.confirm(roll, now)
            except RolloverError:
                assert roll.step not in rollover.OPERATOR_STEPS
                continue
            # The operator had the parent publish some time since the step began.
            published = data.draw(st.integers(int(roll.since), int(now)), label="published")
            parent.append((published, now + timing.parent_propagation_delay,
                           zone_keying(kind, roll, done=False).parent_ds))
            roll = confirmed
        else:
            roll = rollover.advance(roll, now)
        keying = zone_keying(kind, roll, done=roll is None)
        if keying != zone[-1][1]:
            zone.append((now, keying))
    else:
        pytest.fail("the roll did not end within 40 events")
    return History(tuple(zone), tuple(parent), timing, now)


def served_at(history: History, moment: float) -> Keying:
    return [keying for since, keying in history.zone if since <= moment][-1]


def ds_choices(history: History, moment: float) -> list[tuple[int, ...]]:
    """The DS sets a parent server may give at ``moment``."""
    current = [ds for first, _, ds in history.parent if first <= moment][-1:]
    before = [ds for first, everywhere, ds in history.parent[1:]
              if first <= moment < everywhere]
    older = [history.parent[i - 1][2] for i, (first, everywhere, _) in enumerate(history.parent)
             if i and moment < everywhere]
    return current + before + older


@pytest.mark.parametrize("kind", rollover.KINDS)
@given(data=st.data(), timing=timings)
def test_every_cached_view_a_resolver_can_hold_validates(
    kind: str, data: st.DataObject, timing: Timing
) -> None:
    """Checked at every whole second (the history changes only on whole seconds), for
    every combination a resolver's cache can hold then: a DS set fetched within its TTL,
    a DNSKEY RRset and a signature each fetched within theirs from a server up to the
    propagation delay behind."""
    history = drive(data, timing, kind)
    first, last = T0 - 50, int(history.end) + 100
    lag = timing.propagation_delay
    served = {m: served_at(history, m) for m in range(first - 200, last + 1)}
    ds_sets = {m: ds_choices(history, m) for m in range(first - 200, last + 1)}
    for t in range(first, last + 1):
        cached_ds = {ds for m in range(t - timing.ds_ttl, t + 1) for ds in ds_sets[m]}
        cached_keys = {served[m] for m in range(t - timing.dnskey_ttl - lag, t + 1)}
        signers = {served[m].zone_signer for m in range(t - timing.max_zone_ttl - lag, t + 1)}
        for dnskey in cached_keys:
            for signer in signers:
                assert signer in dnskey.published, (t, signer, dnskey, history)
            for ds in cached_ds:
                assert set(ds) & set(dnskey.published) & set(dnskey.key_signers), (
                    t, ds, dnskey, history
                )


@pytest.mark.parametrize("kind", rollover.KINDS)
@given(timing=timings, late=st.integers(0, 10**6))
def test_a_timed_step_is_never_confirmed_and_an_operator_step_never_times_out(
    kind: str, timing: Timing, late: int
) -> None:
    roll: Rollover | None = rollover.start(OLD, NEW, timing, T0, kind)
    seen = []
    while roll is not None:
        seen.append(roll.step)
        if roll.step in rollover.OPERATOR_STEPS:
            assert rollover.advance(roll, T0 + 10**9) == roll
            roll = rollover.confirm(roll, roll.since + late)
        else:
            with pytest.raises(RolloverError, match=r"waits for time|nothing to confirm"):
                rollover.confirm(roll, roll.since)
            due = rollover.due(roll)
            assert due is not None
            if due > roll.since:
                assert rollover.advance(roll, due - 0.5) == roll
            roll = rollover.advance(roll, due + late)
    # A wait of nothing passes straight on; the operator's steps are never skipped.
    assert seen == sorted(seen, key=rollover.ALL_STEPS.index)
    if kind == rollover.ZSK:
        assert seen[0] == rollover.ZSK_PUBLISHED
        assert set(seen) <= set(rollover.ZSK_STEPS)
    else:
        assert {rollover.DS_SUBMIT, rollover.DS_PROPAGATING, rollover.DS_RETIRE} <= set(seen)


def test_each_step_publishes_and_signs_as_the_table_says() -> None:
    roll = rollover.start(OLD, NEW, Timing(), T0)
    rows = []
    for step in rollover.STEPS:
        k = rollover.keying(attrs.evolve(roll, step=step))
        rows.append((step, k.published, k.key_signers, k.zone_signer, k.parent_ds))
    assert rows == [
        ("ds-submit", (OLD,), (OLD,), OLD, (OLD, NEW)),
        ("ds-propagating", (OLD,), (OLD,), OLD, (OLD, NEW)),
        ("published", (OLD, NEW), (OLD, NEW), OLD, (OLD, NEW)),
        ("switched", (OLD, NEW), (OLD, NEW), NEW, (OLD, NEW)),
        ("ds-retire", (NEW,), (NEW,), NEW, (NEW,)),
    ]


def test_a_split_zone_publishes_both_keys_and_each_signs_its_part() -> None:
    """Not rolling, the KSK signs the DNSKEY RRset and is the parent's DS, the ZSK signs
    the rest; a ZSK roll pre-publishes the new ZSK, then signs with it; a KSK roll is
    the Double-DS table with the ZSK signing the zone throughout."""
    ksk, zsk = OTHER, OLD
    assert rollover.zone_keying(ksk, zsk, None) == Keying((ksk, zsk), (ksk,), zsk, (ksk,))
    zsk_roll = rollover.start(OLD, NEW, Timing(), T0, rollover.ZSK)
    rows = []
    for step in rollover.ZSK_STEPS:
        k = rollover.zone_keying(ksk, zsk, attrs.evolve(zsk_roll, step=step))
        rows.append((step, k.published, k.key_signers, k.zone_signer, k.parent_ds))
    assert rows == [
        ("zsk-published", (ksk, OLD, NEW), (ksk,), OLD, (ksk,)),
        ("zsk-switched", (ksk, OLD, NEW), (ksk,), NEW, (ksk,)),
    ]
    ksk_roll = rollover.start(OLD, NEW, Timing(), T0, rollover.KSK)
    for step in rollover.STEPS:
        k = rollover.zone_keying(OLD, OTHER, attrs.evolve(ksk_roll, step=step))
        csk = rollover.keying(attrs.evolve(ksk_roll, step=step))
        assert k == Keying((*csk.published, OTHER), csk.key_signers, OTHER, csk.parent_ds)


def test_a_zsk_roll_ends_on_time_and_is_numbered_after_the_double_ds_steps() -> None:
    timing = Timing(dnskey_ttl=10, max_zone_ttl=20, propagation_delay=1)
    roll = rollover.start(OLD, NEW, timing, T0, rollover.ZSK)
    assert (roll.step, rollover.due(roll)) == (rollover.ZSK_PUBLISHED, T0 + 11)
    switched = rollover.advance(roll, T0 + 12)
    assert switched == attrs.evolve(roll, step=rollover.ZSK_SWITCHED, since=T0 + 12)
    assert rollover.due(switched) == T0 + 33
    assert rollover.advance(switched, T0 + 32) == switched
    assert rollover.advance(switched, T0 + 33) is None
    numbers = [rollover.step_number(step) for step in rollover.ALL_STEPS]
    assert numbers == [1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(RolloverError, match="no ZSK to roll alone"):
        rollover.kind_for(split=False, zsk=True)
    assert [rollover.kind_for(split, zsk) for split, zsk in
            ((False, False), (True, False), (True, True))] == ["csk", "ksk", "zsk"]
    with pytest.raises(RolloverError, match="is not one of zsk-published"):
        rollover.Rollover(OLD, NEW, rollover.PUBLISHED, T0, timing, rollover.ZSK)


def test_a_timing_out_of_range_or_an_unchanged_key_is_refused() -> None:
    with pytest.raises(RolloverError, match="ds-ttl -1 is not between"):
        Timing(ds_ttl=-1)
    with pytest.raises(RolloverError, match="another key tag"):
        rollover.start(OLD, OLD, Timing(), T0)


# --- max-zone-ttl against the zone's TTLs ----------------------------------------------

ZONE = "example.test."
CUT = "child.example.test."
OWNERS = [ZONE, f"www.{ZONE}", CUT, f"ns.{CUT}", f"deep.ns.{CUT}", f"childish.{ZONE}"]


@given(
    records=st.lists(st.tuples(st.sampled_from(OWNERS), st.sampled_from(["A", "NS", "DS",
                                                                         "TXT", "SOA"]),
                               st.integers(0, 200)), max_size=12),
    max_zone_ttl=st.integers(0, 200),
)
def test_a_max_zone_ttl_below_a_signed_records_ttl_is_said_with_the_largest(
    records: list[tuple[str, str, int]], max_zone_ttl: int
) -> None:
    """The warning names the largest TTL of the records the zone signs, and is given
    exactly when it exceeds max-zone-ttl: a delegation's NS and what lies beneath it
    (glue) are the child's, never signed, and never count; its DS does."""
    timing = Timing(max_zone_ttl=max_zone_ttl)
    signed = [ttl for owner, rtype, ttl in records
              if not owner.endswith(f".{CUT}") and not (owner == CUT and rtype != "DS")]
    said = rollover.ttl_shortfall(timing, ZONE, records, [CUT])
    if not signed or max(signed) <= max_zone_ttl:
        assert said is None
    else:
        assert said is not None
        assert f"largest signed TTL, {max(signed)} (" in said
        assert f"give --max-zone-ttl {max(signed)} or more" in said


def test_a_max_zone_ttl_covering_every_signed_ttl_is_not_questioned() -> None:
    records = [(ZONE, "SOA", 3600), (f"www.{ZONE}", "A", 300), (CUT, "NS", 172800),
               (f"ns.{CUT}", "A", 172800), (CUT, "DS", 3600)]
    assert rollover.ttl_shortfall(Timing(max_zone_ttl=3600), ZONE, records, [CUT]) is None
    said = rollover.ttl_shortfall(Timing(max_zone_ttl=60), ZONE, records, [CUT])
    assert said is not None
    assert said.startswith(
        f"max-zone-ttl 60 is below zone {ZONE}'s largest signed TTL, 3600 ({ZONE} SOA)"
    )

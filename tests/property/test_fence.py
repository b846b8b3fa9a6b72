"""Properties of the instance fence: it only moves forward, and only a claim moves it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.hypothesis_profiles import scaled
from valis_core.errors import ValisError
from valis_core.fence import (
    CLAIM_TRANSITIONS,
    SEED_TRANSITIONS,
    TOUCH_TRANSITIONS,
    FencedOut,
    FenceState,
    Order,
    SeedRefused,
    StaleClaim,
    Standing,
    Turn,
    TurnEvent,
    TurnRefused,
    assert_fence_touch,
    claim_instance_fence,
    may_write,
    next_turn,
    seed_instance_fence,
)

holders = st.sampled_from(["node-a", "node-b", "node-c"])
offsets = st.integers(-3, 3)


HOLDERS = ("node-a", "node-b", "node-c")


class FenceMachine(RuleBasedStateMachine):
    """Any sequence of seeds, claims and touches by several holders, checked against a
    plain model of the rules."""

    def __init__(self) -> None:
        super().__init__()
        # A placeholder until the initialize rule seeds the absent fence.
        self.fence = FenceState(generation=0, holder="unseeded")
        self.highest = 0
        #: standings some writer once held; all but the current one are superseded
        self.held: set[FenceState] = set()

    def _moved_to(self, fence: FenceState) -> None:
        self.fence = fence
        self.held.add(fence)

    @initialize(holder=holders)
    def seed_the_absent_fence(self, holder: str) -> None:
        genesis = seed_instance_fence(None, holder)
        assert genesis == FenceState(generation=0, holder=holder)
        self._moved_to(genesis)

    @rule(holder=holders)
    def seed_again(self, holder: str) -> None:
        before = self.fence
        if holder == before.holder:
            assert seed_instance_fence(before, holder) is before
        else:
            with pytest.raises(SeedRefused):
                seed_instance_fence(before, holder)

    @rule(offset=offsets, holder=holders)
    def claim(self, offset: int, holder: str) -> None:
        before = self.fence
        generation = before.generation + offset
        if generation > before.generation:
            assert claim_instance_fence(before, generation, holder) == FenceState(
                generation=generation, holder=holder
            )
            self._moved_to(FenceState(generation=generation, holder=holder))
        elif generation == before.generation and holder == before.holder:
            assert claim_instance_fence(before, generation, holder) == before
        else:
            with pytest.raises(StaleClaim):
                claim_instance_fence(before, generation, holder)

    @rule()
    def reclaim_by_the_holder_is_a_no_op(self) -> None:
        again = claim_instance_fence(self.fence, self.fence.generation, self.fence.holder)
        assert again == self.fence

    @rule(holder=holders)
    def reclaim_by_another_holder_is_stale(self, holder: str) -> None:
        if holder == self.fence.holder:
            return
        with pytest.raises(StaleClaim):
            claim_instance_fence(self.fence, self.fence.generation, holder)

    @rule(offset=offsets, holder=holders)
    def touch(self, offset: int, holder: str) -> None:
        generation = self.fence.generation + offset
        if generation < 0:
            return
        writer = FenceState(generation=generation, holder=holder)
        if offset == 0 and holder == self.fence.holder:
            assert_fence_touch(self.fence, writer)
        else:
            with pytest.raises(FencedOut):
                assert_fence_touch(self.fence, writer)

    @invariant()
    def generations_never_decrease(self) -> None:
        assert self.fence.generation >= self.highest
        self.highest = self.fence.generation

    @invariant()
    def a_superseded_writer_is_always_fenced_out(self) -> None:
        for standing in self.held - {self.fence}:
            with pytest.raises(FencedOut):
                assert_fence_touch(self.fence, standing)

    @invariant()
    def exactly_one_standing_may_write(self) -> None:
        top = self.fence.generation + 2
        writers = []
        for generation in range(max(0, top - 5), top):
            for holder in (*HOLDERS, "unseeded"):
                standing = FenceState(generation=generation, holder=holder)
                try:
                    assert_fence_touch(self.fence, standing)
                except FencedOut:
                    continue
                writers.append(standing)
        assert writers == [self.fence]


FenceMachine.TestCase.settings = settings(max_examples=scaled(0.5), stateful_step_count=30)
TestFenceTransitions = FenceMachine.TestCase


def test_the_tables_cover_every_case() -> None:
    assert set(CLAIM_TRANSITIONS) == {(order, same) for order in Order for same in (True, False)}
    assert set(TOUCH_TRANSITIONS) == {(order, same) for order in Order for same in (True, False)}
    assert set(SEED_TRANSITIONS) == set(Standing)


def test_seeding_lays_the_genesis_epoch_once_for_its_holder_only() -> None:
    first = seed_instance_fence(None, "node-a")
    assert first == FenceState(generation=0, holder="node-a")
    assert seed_instance_fence(first, "node-a") is first
    with pytest.raises(SeedRefused) as caught:
        seed_instance_fence(first, "node-b")
    assert caught.value.current == first
    for part in ("'node-b'", "'node-a'", "generation 0", "restore or evacuate"):
        assert part in str(caught.value)
    advanced = claim_instance_fence(first, 4, "node-b")
    assert seed_instance_fence(advanced, "node-b") is advanced
    with pytest.raises(SeedRefused):
        seed_instance_fence(advanced, "node-a")


def test_two_genesis_holders_never_both_write_at_generation_zero() -> None:
    fence = seed_instance_fence(None, "node@here#aaaa")
    assert_fence_touch(fence, FenceState(generation=0, holder="node@here#aaaa"))
    with pytest.raises(FencedOut, match="another instance"):
        assert_fence_touch(fence, FenceState(generation=0, holder="node@here#bbbb"))


def test_a_stale_claim_says_which_generation_who_holds_it_and_what_to_do() -> None:
    fence = FenceState(generation=5, holder="node-b")
    with pytest.raises(StaleClaim) as caught:
        claim_instance_fence(fence, 3, "node-a")
    message = str(caught.value)
    assert isinstance(caught.value, ValisError)
    for part in ("3", "5", "'node-a'", "'node-b'", "condense"):
        assert part in message
    assert (caught.value.current, caught.value.generation, caught.value.holder) == (
        fence,
        3,
        "node-a",
    )


@pytest.mark.parametrize(
    ("writer", "why"), [(4, "superseded"), (6, "ahead"), (5, "'node-a', another instance")]
)
def test_a_fenced_out_writer_is_told_the_fence_and_the_remedy(writer: int, why: str) -> None:
    fence = FenceState(generation=5, holder="node-b")
    with pytest.raises(FencedOut) as caught:
        assert_fence_touch(fence, FenceState(generation=writer, holder="node-a"))
    message = str(caught.value)
    assert isinstance(caught.value, ValisError)
    for part in (str(writer), "generation 5", "'node-b'", "condense", why):
        assert part in message
    assert caught.value.writer_generation == writer


def test_a_fence_state_refuses_impossible_values() -> None:
    with pytest.raises(ValueError, match="generation"):
        FenceState(generation=-1, holder="node-a")
    with pytest.raises(ValueError, match="holder"):
        FenceState(generation=0, holder="")


# -- the write turn of a handover (TURN_TRANSITIONS) ------------------------------------

turn_events = st.lists(st.sampled_from(list(TurnEvent)), max_size=12)


def _apply_turn(events: list[TurnEvent], turn: Turn = Turn.UNSET) -> list[tuple[TurnEvent, bool]]:
    """Each event, and whether the table took it (a refused one leaves the turn)."""
    taken = []
    for event in events:
        try:
            turn = next_turn(turn, event)
        except TurnRefused:
            taken.append((event, False))
        else:
            taken.append((event, True))
    return taken


@given(turn_events)
def test_a_write_is_taken_only_by_a_process_not_withheld_or_granted_since(
    events: list[TurnEvent],
) -> None:
    withheld = granted = wrote = False
    for event, taken in _apply_turn(events):
        if event is TurnEvent.WRITE:
            assert taken == (not withheld or granted)
            wrote = wrote or taken
        elif event is TurnEvent.WITHHOLD:
            # a process that may have written (or was granted) is never made to wait
            assert taken == (not wrote and not granted)
            withheld = withheld or taken
        else:
            assert taken
            granted = True


@given(st.lists(st.sampled_from(["old writes", "new writes", "old exits", "grant"]),
                max_size=20))
def test_in_a_handover_at_most_one_of_the_two_residents_writes_at_any_time(
    steps: list[str],
) -> None:
    """fulcrum's order (the grant only after the old resident exited) applied to two
    residents: the old one started alone, the new one a successor. Whatever the
    interleaving, no write of the new one is taken while the old one may still write."""
    old, new = Turn.UNSET, next_turn(Turn.UNSET, TurnEvent.WITHHOLD)
    old_alive = True
    for step in steps:
        if step == "old writes" and old_alive:
            old = next_turn(old, TurnEvent.WRITE)
        elif step == "old exits":
            old_alive = False
        elif step == "grant" and not old_alive:  # fulcrum grants only then
            new = next_turn(new, TurnEvent.GRANT)
        elif step == "new writes":
            if may_write(new):
                assert not old_alive
                new = next_turn(new, TurnEvent.WRITE)
            else:
                with pytest.raises(TurnRefused, match="write refused while waiting"):
                    next_turn(new, TurnEvent.WRITE)

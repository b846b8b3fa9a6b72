"""Properties of the instance fence: it only moves forward, and only a claim moves it."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from valis_core.errors import ValisError
from valis_core.fence import (
    CLAIM_TRANSITIONS,
    TOUCH_TRANSITIONS,
    FencedOut,
    FenceState,
    Order,
    StaleClaim,
    assert_fence_touch,
    claim_instance_fence,
    seed_instance_fence,
)

holders = st.sampled_from(["node-a", "node-b", "node-c"])
offsets = st.integers(-3, 3)


class FenceMachine(RuleBasedStateMachine):
    """Any sequence of seed, claim and touch, checked against a plain model of the rules."""

    def __init__(self) -> None:
        super().__init__()
        # A placeholder until the initialize rule seeds the absent fence.
        self.fence = FenceState(generation=0, holder="unseeded")
        self.highest = 0
        #: generations some writer once held; all but the current one are superseded
        self.held: set[int] = set()

    def _moved_to(self, fence: FenceState) -> None:
        self.fence = fence
        self.held.add(fence.generation)

    @initialize(holder=holders)
    def seed_the_absent_fence(self, holder: str) -> None:
        genesis = seed_instance_fence(None, holder)
        assert genesis == FenceState(generation=0, holder=holder)
        self._moved_to(genesis)

    @rule(holder=holders)
    def seed_again(self, holder: str) -> None:
        before = self.fence
        assert seed_instance_fence(before, holder) is before

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

    @rule(offset=offsets)
    def touch(self, offset: int) -> None:
        writer = self.fence.generation + offset
        if offset == 0:
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
        for generation in self.held - {self.fence.generation}:
            with pytest.raises(FencedOut):
                assert_fence_touch(self.fence, generation)


FenceMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=30)
TestFenceTransitions = FenceMachine.TestCase


def test_the_tables_cover_every_case() -> None:
    assert set(CLAIM_TRANSITIONS) == {(order, same) for order in Order for same in (True, False)}
    assert set(TOUCH_TRANSITIONS) == set(Order)


def test_seeding_lays_the_genesis_epoch_once() -> None:
    first = seed_instance_fence(None, "node-a")
    assert first == FenceState(generation=0, holder="node-a")
    assert seed_instance_fence(first, "node-b") is first
    advanced = claim_instance_fence(first, 4, "node-b")
    assert seed_instance_fence(advanced, "node-a") is advanced


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


@pytest.mark.parametrize("writer", [4, 6])
def test_a_fenced_out_writer_is_told_the_fence_and_the_remedy(writer: int) -> None:
    fence = FenceState(generation=5, holder="node-b")
    with pytest.raises(FencedOut) as caught:
        assert_fence_touch(fence, writer)
    message = str(caught.value)
    assert isinstance(caught.value, ValisError)
    for part in (str(writer), "generation 5", "'node-b'", "condense"):
        assert part in message
    assert "superseded" in message if writer < 5 else "ahead" in message


def test_a_fence_state_refuses_impossible_values() -> None:
    with pytest.raises(ValueError, match="generation"):
        FenceState(generation=-1, holder="node-a")
    with pytest.raises(ValueError, match="holder"):
        FenceState(generation=0, holder="")

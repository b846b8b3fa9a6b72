"""Properties of the edge certificate's renewal schedule and of an ACME order's walk."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.edge.acme_order import (
    FINAL,
    TRANSITIONS,
    Event,
    Order,
    OrderOutOfStep,
    Stage,
    advance,
    needs_withdrawal,
)
from valis_core.edge.renewal import (
    FIRST_BACKOFF,
    MAX_BACKOFF,
    Lifetime,
    backoff,
    is_due,
    next_attempt,
    renew_at,
)

DAY = 86400.0
times = st.floats(min_value=1.6e9, max_value=2.2e9, allow_nan=False)
spans = st.floats(min_value=3600.0, max_value=400 * DAY, allow_nan=False)
failures = st.integers(min_value=0, max_value=200)


@st.composite
def lifetimes(draw: st.DrawFn) -> Lifetime:
    start = draw(times)
    return Lifetime(not_before=start, not_after=start + draw(spans))


@given(lifetimes())
def test_a_certificate_is_renewed_when_a_third_of_its_lifetime_is_left(life: Lifetime) -> None:
    at = renew_at(life)
    assert life.not_before < at < life.not_after
    assert (life.not_after - at) == pytest.approx((life.not_after - life.not_before) / 3)


def test_a_ninety_day_certificate_is_renewed_after_sixty_days() -> None:
    life = Lifetime(not_before=0.0, not_after=90 * DAY)
    assert renew_at(life) == pytest.approx(60 * DAY)
    assert not is_due(life, 60 * DAY - 1)
    assert is_due(life, 60 * DAY)


@given(times, failures)
def test_without_a_certificate_the_node_asks_now_or_after_its_backoff(
    now: float, failed: int
) -> None:
    assert next_attempt(None, now, failed) == now + backoff(failed)
    assert next_attempt(None, now, 0) == now
    assert is_due(None, now)


@given(lifetimes(), times)
def test_with_no_failure_the_next_attempt_is_the_renewal_point(life: Lifetime, now: float) -> None:
    assert next_attempt(life, now, 0) == max(renew_at(life), now)


@given(lifetimes(), times, failures)
def test_after_a_failure_the_next_attempt_is_never_sooner_than_the_backoff(
    life: Lifetime, now: float, failed: int
) -> None:
    when = next_attempt(life, now, failed)
    assert when >= now + backoff(failed)
    assert when >= renew_at(life)


@given(failures)
def test_backoff_grows_with_failures_and_is_bounded(failed: int) -> None:
    assert backoff(failed) <= backoff(failed + 1) <= MAX_BACKOFF
    assert backoff(0) == 0.0
    assert backoff(1) == FIRST_BACKOFF


@given(lifetimes(), st.floats(min_value=0.0, max_value=1.0))
def test_a_certificate_past_its_renewal_point_stays_due(life: Lifetime, later: float) -> None:
    at = renew_at(life)
    assert is_due(life, at + later * (life.not_after - at + DAY))


# -- the order -----------------------------------------------------------------------

HAPPY = (Event.ORDERED, Event.PUBLISHED, Event.ANSWERED, Event.VALIDATED, Event.WITHDRAWN,
         Event.ISSUED, Event.STORED)


def test_the_whole_walk_publishes_then_withdraws_and_stores() -> None:
    order = Order()
    for event in HAPPY:
        order = advance(order, event)
    assert order.stage is Stage.STORED
    assert order.done
    assert not needs_withdrawal(order)


def test_a_reused_authorization_needs_no_record() -> None:
    order = Order()
    for event in (Event.ORDERED, Event.VALIDATED, Event.WITHDRAWN, Event.ISSUED, Event.STORED):
        order = advance(order, event)
    assert order.stage is Stage.STORED
    assert not order.challenge_live


@given(st.lists(st.sampled_from(list(Event)), max_size=12))
def test_any_sequence_of_events_is_taken_by_the_table_or_refused(events: list[Event]) -> None:
    order = Order()
    published_ever = False
    for event in events:
        if (order.stage, event) not in TRANSITIONS:
            with pytest.raises(OrderOutOfStep):
                advance(order, event)
            continue
        before = order
        order = advance(order, event)
        assert order.stage is TRANSITIONS[(before.stage, event)]
        published_ever |= event is Event.PUBLISHED
        # The record is live exactly from its publication until its withdrawal.
        assert order.challenge_live == (
            event is Event.PUBLISHED or (before.challenge_live and event is not Event.WITHDRAWN)
        )
        if order.stage is Stage.STORED:
            assert not order.challenge_live
    if order.challenge_live:
        assert published_ever


@given(st.integers(min_value=0, max_value=len(HAPPY) - 1), st.text(max_size=20))
def test_a_failure_at_any_stage_still_withdraws_a_published_record(
    reached: int, reason: str
) -> None:
    order = Order()
    for event in HAPPY[:reached]:
        order = advance(order, event)
    if order.done:
        return
    live = order.challenge_live
    failed = advance(order, Event.FAILED, reason)
    assert failed.stage is Stage.FAILED
    assert failed.reason == reason
    assert needs_withdrawal(failed) == live
    withdrawn = advance(failed, Event.WITHDRAWN)
    assert withdrawn.stage is Stage.FAILED
    assert not needs_withdrawal(withdrawn)


@pytest.mark.parametrize("final", sorted(FINAL, key=str))
def test_a_finished_order_takes_no_further_step_but_a_withdrawal(final: Stage) -> None:
    for event in Event:
        allowed = (final, event) in TRANSITIONS
        assert allowed == (final is Stage.FAILED and event is Event.WITHDRAWN)

"""One ACME order (RFC 8555 §7.4) as the node walks it: a pure state machine.

Everything touching an order's stages lives in ``TRANSITIONS``, one table: an event the
table does not name for the current stage is a programming error (``OrderOutOfStep``),
never a silent skip. The node orders a certificate for its served domain, publishes the
DNS-01 TXT record in its own zone (a fenced write), tells the CA to validate, waits for
the authorization, withdraws the record, finalizes with its CSR, and stores the chain.

The one duty that outlives a failure is the challenge record: ``challenge_live`` says a
published record has not been withdrawn yet, and a failed order still accepts
``WITHDRAWN``, so the shell removes the record however the order ended.
"""

from __future__ import annotations

import enum

import attrs

from valis_core.errors import ValisError


class Stage(enum.Enum):
    NEW = "new"
    ORDERED = "ordered"
    PUBLISHED = "challenge published"
    ANSWERED = "challenge answered"
    VALIDATED = "authorization valid"
    WITHDRAWN = "challenge withdrawn"
    ISSUED = "certificate issued"
    STORED = "certificate stored"
    FAILED = "failed"


class Event(enum.Enum):
    ORDERED = "ordered"
    PUBLISHED = "published"
    ANSWERED = "answered"
    VALIDATED = "validated"
    WITHDRAWN = "withdrawn"
    ISSUED = "issued"
    STORED = "stored"
    FAILED = "failed"


TRANSITIONS: dict[tuple[Stage, Event], Stage] = {
    (Stage.NEW, Event.ORDERED): Stage.ORDERED,
    (Stage.ORDERED, Event.PUBLISHED): Stage.PUBLISHED,
    (Stage.PUBLISHED, Event.ANSWERED): Stage.ANSWERED,
    (Stage.ANSWERED, Event.VALIDATED): Stage.VALIDATED,
    # The CA reused an authorization still valid: nothing to publish.
    (Stage.ORDERED, Event.VALIDATED): Stage.VALIDATED,
    (Stage.VALIDATED, Event.WITHDRAWN): Stage.WITHDRAWN,
    (Stage.WITHDRAWN, Event.ISSUED): Stage.ISSUED,
    (Stage.ISSUED, Event.STORED): Stage.STORED,
    # A failure anywhere before the end; the record is still withdrawn afterwards.
    **{(stage, Event.FAILED): Stage.FAILED for stage in Stage
       if stage not in (Stage.STORED, Stage.FAILED)},
    (Stage.FAILED, Event.WITHDRAWN): Stage.FAILED,
}
"""(stage, event) -> the next stage. Nothing else moves an order."""

FINAL: frozenset[Stage] = frozenset({Stage.STORED, Stage.FAILED})


class OrderOutOfStep(ValisError):
    """An event the order's stage does not accept: the shell walked it wrongly."""


@attrs.frozen
class Order:
    """Where an order stands, whether its challenge record is still published, and
    (when it failed) why."""

    stage: Stage = Stage.NEW
    challenge_live: bool = False
    reason: str = ""

    @property
    def done(self) -> bool:
        return self.stage in FINAL


def advance(order: Order, event: Event, reason: str = "") -> Order:
    """The order after ``event``; ``reason`` is kept when the event is a failure."""
    following = TRANSITIONS.get((order.stage, event))
    if following is None:
        raise OrderOutOfStep(
            f"ACME order: {event.value!r} cannot happen at stage {order.stage.value!r}"
        )
    live = order.challenge_live
    if event is Event.PUBLISHED:
        live = True
    elif event is Event.WITHDRAWN:
        live = False
    return Order(
        stage=following,
        challenge_live=live,
        reason=reason if event is Event.FAILED else order.reason,
    )


def needs_withdrawal(order: Order) -> bool:
    """Whether a challenge record this order published is still to be removed."""
    return order.challenge_live

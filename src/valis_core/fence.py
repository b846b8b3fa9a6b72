"""The single-writer instance fence: its states and every transition it allows.

Two instances sharing one operator-state database see each other only through the
one-row fence. It projects the store generation and only ever moves forward:

- ``seed_instance_fence`` lays the fence at the genesis epoch 0 when there is none,
  leaves it exactly as it is when its own holder asks again (re-running bring-up is
  safe), and refuses any other holder: a second genesis node on one database, or a
  node whose state directory was wiped, never shares generation 0 with the first;
- ``claim_instance_fence`` takes a higher generation (condense: evacuate or restore),
  or re-claims the current generation as a no-op when its holder asks again;
- ``assert_fence_touch`` runs inside every mutating transaction and lets through only
  the fence's own standing: its generation *and* its holder.

A writer's standing is a ``FenceState`` too: the generation it writes at and the holder
it claimed or seeded as. A holder names one condensed state directory (the node, its
location and the directory's instance token, ``valis_core.identity.instance``), so two
state directories never share a standing even when they share a node name.

Every rule about how the fence may change lives in this module, written as the tables
``SEED_TRANSITIONS``, ``CLAIM_TRANSITIONS`` and ``TOUCH_TRANSITIONS``; the SQL side
(``valis_core.operator_state.fence``) applies these functions to the stored row rather
than restating them.

A writer *ahead* of the fence (a generation higher than the stored one) is refused as
well as a superseded one: only a claim advances the fence, so a writer that never
claimed its generation has no standing to write under it.

**A handover** (fulcrum starting the next resident beside the one serving: a reload or
an upgrade) moves nothing in the fence: both residents are one holder at one
generation, the same standing. What keeps them from writing at once is the *write
turn* (``TURN_TRANSITIONS``), one per process: a process that writes without saying
otherwise holds it; a successor starts ``WAITING`` — it checks its standing (a read),
loads, serves and says READY, but commits nothing, heartbeat included — and holds the
turn only when fulcrum grants it, which fulcrum does only after the resident it takes
over from has exited. Every fenced write waits for the turn. So at any moment at most
one of the two writes, and the old one has stopped writing (it is gone) before the new
one starts.
"""

from __future__ import annotations

import enum
import signal

import attrs

from valis_core.errors import ValisError

GENESIS_GENERATION = 0
#: Generations are stored as PostgreSQL bigint.
MAX_GENERATION = 2**63 - 1

#: The exit status of a resident that stops because it is fenced out, passed through by
#: fulcrum as its own: the shipped unit's ``RestartPreventExitStatus=`` names it, so systemd
#: never restarts a node that may not write (a restart would be fenced out again). 77 is
#: sysexits' EX_NOPERM: the fence denies this instance permission to write.
FENCED_OUT_EXIT_STATUS = 77

_REMEDY = "only condense (evacuate/restore) claims the fence; a restart never takes it back"


def _non_negative(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not GENESIS_GENERATION <= value <= MAX_GENERATION:
        raise ValueError(f"fence {attribute.name} must be an integer 0..{MAX_GENERATION}")


def _non_empty(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or not value:
        raise ValueError(f"fence {attribute.name} must be a non-empty string: {value!r}")


@attrs.frozen
class FenceState:
    """The fence row: the generation that may write, and the instance that claimed it."""

    generation: int = attrs.field(validator=_non_negative)
    holder: str = attrs.field(validator=_non_empty)


class StaleClaim(ValisError):
    """A claim that would not move the fence forward (and is not its holder's re-claim)."""

    def __init__(self, current: FenceState, generation: int, holder: str) -> None:
        self.current = current
        self.generation = generation
        self.holder = holder
        if generation == current.generation:
            why = f"generation {generation} is already held by {current.holder!r}"
        else:
            why = (
                f"generation {generation} is below the fence at generation "
                f"{current.generation} held by {current.holder!r}"
            )
        super().__init__(
            f"instance fence: claim by {holder!r} refused: {why}; claim a generation above "
            f"{current.generation} — {_REMEDY}"
        )


class SeedRefused(ValisError):
    """A seed by another holder than the one the fence already names."""

    def __init__(self, current: FenceState, holder: str) -> None:
        self.current = current
        self.holder = holder
        super().__init__(
            f"instance fence: {holder!r} cannot seed the fence: it already stands at "
            f"generation {current.generation} held by {current.holder!r}, another instance "
            "(a second genesis node on this database, or this node's state directory made "
            "anew); two instances must never write at one generation — restore or evacuate "
            "from the holder's backup set instead, or deploy onto another database"
        )


class FencedOut(ValisError):
    """A writer whose standing is not the fence's: it must write nothing and stop."""

    def __init__(self, current: FenceState, writer: FenceState) -> None:
        self.current = current
        self.writer = writer
        if writer.generation < current.generation:
            why = "was superseded"
        elif writer.generation > current.generation:
            why = "is ahead of the fence and never claimed that generation"
        else:
            why = f"is {writer.holder!r}, another instance than the fence's holder"
        super().__init__(
            f"instance fence: writer at generation {writer.generation} is fenced out: the "
            f"fence stands at generation {current.generation} held by {current.holder!r} "
            f"and this writer {why}; it wrote nothing and must stop — {_REMEDY}"
        )

    @property
    def writer_generation(self) -> int:
        return self.writer.generation


class Order(enum.Enum):
    """Where a requested generation stands relative to the fence's."""

    BELOW = "below"
    EQUAL = "equal"
    ABOVE = "above"


def _order(requested: int, current: int) -> Order:
    if requested < current:
        return Order.BELOW
    if requested > current:
        return Order.ABOVE
    return Order.EQUAL


class Outcome(enum.Enum):
    """What a transition does to the fence."""

    ADVANCE = "advance"  # the fence moves to the requested generation and holder
    KEEP = "keep"  # the fence stays as it is and the request succeeds
    STALE = "stale"  # refused with StaleClaim
    FENCED_OUT = "fenced out"  # refused with FencedOut
    REFUSED = "refused"  # refused with SeedRefused


class Standing(enum.Enum):
    """Who holds the fence, seen from the instance asking."""

    ABSENT = "absent"  # no fence yet
    SAME_HOLDER = "same holder"
    OTHER_HOLDER = "other holder"


#: seed_instance_fence: who holds the fence -> outcome
SEED_TRANSITIONS: dict[Standing, Outcome] = {
    Standing.ABSENT: Outcome.ADVANCE,
    Standing.SAME_HOLDER: Outcome.KEEP,
    Standing.OTHER_HOLDER: Outcome.REFUSED,
}


#: claim_instance_fence: (requested vs fence generation, same holder?) -> outcome
CLAIM_TRANSITIONS: dict[tuple[Order, bool], Outcome] = {
    (Order.ABOVE, True): Outcome.ADVANCE,
    (Order.ABOVE, False): Outcome.ADVANCE,
    (Order.EQUAL, True): Outcome.KEEP,
    (Order.EQUAL, False): Outcome.STALE,
    (Order.BELOW, True): Outcome.STALE,
    (Order.BELOW, False): Outcome.STALE,
}

#: assert_fence_touch: (writer vs fence generation, same holder?) -> outcome
TOUCH_TRANSITIONS: dict[tuple[Order, bool], Outcome] = {
    (Order.BELOW, True): Outcome.FENCED_OUT,
    (Order.BELOW, False): Outcome.FENCED_OUT,
    (Order.EQUAL, True): Outcome.KEEP,
    (Order.EQUAL, False): Outcome.FENCED_OUT,
    (Order.ABOVE, True): Outcome.FENCED_OUT,
    (Order.ABOVE, False): Outcome.FENCED_OUT,
}


def _standing(current: FenceState | None, holder: str) -> Standing:
    if current is None:
        return Standing.ABSENT
    return Standing.SAME_HOLDER if current.holder == holder else Standing.OTHER_HOLDER


def seed_instance_fence(current: FenceState | None, holder: str) -> FenceState:
    """The fence after ``holder`` seeds it: genesis epoch 0 when absent, unchanged when
    ``holder`` already holds it; raises ``SeedRefused`` when another holder does."""
    outcome = SEED_TRANSITIONS[_standing(current, holder)]
    if outcome is Outcome.ADVANCE:
        return FenceState(generation=GENESIS_GENERATION, holder=holder)
    assert current is not None
    if outcome is Outcome.KEEP:
        return current
    raise SeedRefused(current, holder)


def claim_instance_fence(current: FenceState, generation: int, holder: str) -> FenceState:
    """The fence after ``holder`` claims ``generation``; raises ``StaleClaim`` if refused."""
    outcome = CLAIM_TRANSITIONS[(_order(generation, current.generation), holder == current.holder)]
    if outcome is Outcome.ADVANCE:
        return FenceState(generation=generation, holder=holder)
    if outcome is Outcome.KEEP:
        return current
    raise StaleClaim(current, generation, holder)


def assert_fence_touch(current: FenceState, writer: FenceState) -> None:
    """Let a writer with the fence's own standing through; raise ``FencedOut`` otherwise."""
    key = (_order(writer.generation, current.generation), writer.holder == current.holder)
    if TOUCH_TRANSITIONS[key] is not Outcome.KEEP:
        raise FencedOut(current, writer)


#: The signal fulcrum sends a successor to grant it the write turn.
TURN_GRANT_SIGNAL = signal.SIGUSR2


class Turn(enum.Enum):
    """A process's turn to write, within the fence's standing."""

    UNSET = "unset"  # nothing said or written yet
    WAITING = "waiting"  # a successor beside the resident it takes over from: writes nothing
    HELD = "held"  # writes (every fenced write still passes assert_fence_touch)


class TurnEvent(enum.Enum):
    WITHHOLD = "withhold"  # at its start: this resident is a successor
    GRANT = "grant"  # fulcrum: the resident taken over from has exited
    WRITE = "write"  # a fenced transaction begins


#: the write turn: (turn, event) -> turn. A pair not listed is refused (``TurnRefused``):
#: a waiting process does not write (its writes wait for the grant), and one that holds
#: the turn (it may have written) is never made to wait. A process that writes without
#: having said it is a successor (a verb, condense, a resident started alone) holds it.
TURN_TRANSITIONS: dict[tuple[Turn, TurnEvent], Turn] = {
    (Turn.UNSET, TurnEvent.WITHHOLD): Turn.WAITING,
    (Turn.UNSET, TurnEvent.GRANT): Turn.HELD,
    (Turn.UNSET, TurnEvent.WRITE): Turn.HELD,
    (Turn.WAITING, TurnEvent.WITHHOLD): Turn.WAITING,
    (Turn.WAITING, TurnEvent.GRANT): Turn.HELD,
    (Turn.HELD, TurnEvent.GRANT): Turn.HELD,
    (Turn.HELD, TurnEvent.WRITE): Turn.HELD,
}


class TurnRefused(ValisError):
    """A write-turn event its state does not allow."""

    def __init__(self, turn: Turn, event: TurnEvent) -> None:
        self.turn, self.event = turn, event
        why = ("a successor writes only once fulcrum grants it the turn (the resident it "
               "takes over from has exited)" if event is TurnEvent.WRITE else
               "a process that may have written cannot become a successor")
        super().__init__(f"write turn: {event.value} refused while {turn.value}: {why}")


def next_turn(turn: Turn, event: TurnEvent) -> Turn:
    """The write turn after ``event``; raises ``TurnRefused`` for a pair the table lacks."""
    try:
        return TURN_TRANSITIONS[(turn, event)]
    except KeyError:
        raise TurnRefused(turn, event) from None


def may_write(turn: Turn) -> bool:
    """Whether a fenced transaction may begin now (``WRITE`` is allowed)."""
    return (turn, TurnEvent.WRITE) in TURN_TRANSITIONS

"""The process's write turn (``operator_state.fence.WriteTurn``): a successor's fenced
writes wait for fulcrum's grant, bounded; a process that wrote never becomes one."""

from __future__ import annotations

import threading

import pytest

from valis_core.fence import Turn, TurnRefused
from valis_core.operator_state.fence import TurnNotGranted, WriteTurn


def test_a_process_not_started_as_a_successor_writes_at_once() -> None:
    turn = WriteTurn()
    turn.begin_write(patience=0)
    assert turn.turn is Turn.HELD


def test_a_successors_write_waits_for_the_grant_and_then_goes_through() -> None:
    turn = WriteTurn()
    turn.withhold()
    began = threading.Event()
    wrote: list[BaseException | None] = []

    def write() -> None:
        began.set()
        try:
            turn.begin_write(patience=30)
        except BaseException as exc:
            wrote.append(exc)
        else:
            wrote.append(None)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert began.wait(10)
    assert wrote == []
    assert not turn.may_write()
    turn.grant()
    writer.join(timeout=10)
    assert wrote == [None]
    assert turn.turn is Turn.HELD


def test_a_successor_never_granted_writes_nothing_and_says_why() -> None:
    turn = WriteTurn()
    turn.withhold()
    with pytest.raises(TurnNotGranted, match=r"was not given the write turn within 0\.05 s"):
        turn.begin_write(patience=0.05)
    assert turn.turn is Turn.WAITING


def test_a_process_that_wrote_cannot_be_made_to_wait() -> None:
    turn = WriteTurn()
    turn.begin_write(patience=0)
    with pytest.raises(TurnRefused, match="withhold refused while held"):
        turn.withhold()

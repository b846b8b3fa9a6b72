"""fulcrum's exit status says how its resident ended."""

from __future__ import annotations

import signal

from hypothesis import given
from hypothesis import strategies as st

from fulcrum.supervise import ResidentExit
from valis_core.fence import FENCED_OUT_EXIT_STATUS

statuses = st.integers(0, 255).filter(lambda status: status != FENCED_OUT_EXIT_STATUS)
signals = st.sampled_from([s for s in signal.Signals if s not in (signal.SIGKILL,)])
stop_signals = st.sampled_from([signal.SIGTERM, signal.SIGINT])


@given(statuses)
def test_an_unasked_exit_passes_its_status_through(status: int) -> None:
    outcome = ResidentExit(status)
    assert outcome.exit_status == status
    assert outcome.describe() == f"resident exited with status {status} without being asked to stop"


def test_a_fenced_out_resident_s_status_is_fulcrums_own_and_said_to_be_fenced_out() -> None:
    outcome = ResidentExit(FENCED_OUT_EXIT_STATUS)
    assert outcome.exit_status == FENCED_OUT_EXIT_STATUS
    assert "fenced out" in outcome.describe()
    assert "not restarted" in outcome.describe()


@given(signals)
def test_an_unasked_death_by_signal_is_128_plus_the_signal(signum: signal.Signals) -> None:
    outcome = ResidentExit(-signum)
    assert outcome.exit_status == 128 + signum
    assert signum.name in outcome.describe()


@given(stop_signals)
def test_a_stop_obeyed_is_success_whether_by_exit_0_or_by_the_signal(
    signum: signal.Signals,
) -> None:
    assert ResidentExit(0, stop_signal=signum).exit_status == 0
    assert ResidentExit(-signum, stop_signal=signum).exit_status == 0


@given(stop_signals, st.integers(1, 255))
def test_a_failure_while_stopping_keeps_its_status(signum: signal.Signals, status: int) -> None:
    assert ResidentExit(status, stop_signal=signum).exit_status == status


@given(stop_signals)
def test_a_resident_killed_at_the_stop_bound_is_a_failure(signum: signal.Signals) -> None:
    outcome = ResidentExit(-signal.SIGKILL, stop_signal=signum, killed=True)
    assert outcome.exit_status == 128 + signal.SIGKILL
    assert "ignored" in outcome.describe()

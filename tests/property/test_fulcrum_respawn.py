"""fulcrum's rule for starting a resident again after it ended unasked (fulcrum.respawn)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from fulcrum.respawn import GiveUp, RespawnPolicy, Restart
from valis_core.fence import FENCED_OUT_EXIT_STATUS

policies = st.builds(
    RespawnPolicy,
    attempts=st.integers(0, 8),
    first_delay=st.floats(0, 1),
    max_delay=st.floats(1, 10),
    stable_after=st.floats(1, 60),
)
failed = st.one_of(st.integers(1, 255).filter(lambda rc: rc != FENCED_OUT_EXIT_STATUS),
                   st.integers(-64, -1))


def _quick(policy: RespawnPolicy, runs: Callable[[st.SearchStrategy[float]], float]) -> float:
    return runs(st.floats(0, policy.stable_after, exclude_max=True))


@given(policies, st.lists(failed, min_size=1, max_size=12), st.data())
def test_quick_failures_in_a_row_are_restarted_at_most_attempts_times_with_growing_delay(
    policy: RespawnPolicy, statuses: list[int], data: st.DataObject,
) -> None:
    failures, delays = 0, []
    for count, status in enumerate(statuses, start=1):
        verdict = policy.after_exit(status, _quick(policy, data.draw), failures)
        if count > policy.attempts:
            assert isinstance(verdict, GiveUp), verdict
            assert verdict.budget_spent, verdict
            return
        assert isinstance(verdict, Restart), verdict
        assert verdict.attempt == verdict.failures == count
        assert 0 <= verdict.delay <= policy.max_delay
        delays.append(verdict.delay)
        failures = verdict.failures
    assert delays == sorted(delays)


@given(policies, failed, st.integers(0, 20), st.floats(0, 1e6))
def test_a_resident_that_ran_long_enough_starts_the_count_again(
    policy: RespawnPolicy, status: int, failures: int, extra: float,
) -> None:
    verdict = policy.after_exit(status, policy.stable_after + extra, failures)
    if policy.attempts == 0:
        assert isinstance(verdict, GiveUp)
    else:
        assert verdict == Restart(delay=min(policy.max_delay, policy.first_delay),
                                  attempt=1, failures=1)


@given(policies, st.sampled_from([0, FENCED_OUT_EXIT_STATUS]), st.floats(0, 1e6),
       st.integers(0, 20))
def test_a_fenced_out_resident_or_one_that_exited_0_is_never_started_again(
    policy: RespawnPolicy, status: int, ran_for: float, failures: int,
) -> None:
    verdict = policy.after_exit(status, ran_for, failures)
    assert isinstance(verdict, GiveUp)
    assert not verdict.budget_spent

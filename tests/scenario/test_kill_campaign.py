"""Crashes lose nothing: each durable-writing verb (condense from genesis among them)
SIGKILLed at random points leaves every file it writes absent, old or whole and new, and
the next run of the verb completes and sweeps whatever temporaries the killed one left.
``benchmarks/kill_campaign.py`` runs the same trials two hundred times per verb."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.kill_trials import VERB_NAMES, campaign, make_verb
from tests.scenario.pg import PgCluster

TRIALS = 3
FEWER = {"condense": 2}
"""A condense trial boots the resident twice; fewer of them keep the tier quick."""
SEED = 20261203


@pytest.mark.parametrize("name", VERB_NAMES)
def test_a_verb_killed_at_random_points_leaves_no_partial_file_and_runs_again(
    name: str, open_base: Path, run_account_dir: Path, pg_cluster: PgCluster, state_dsn: str
) -> None:
    require_root()
    # Under a base the run account traverses: apply refuses a version it cannot reach.
    verb = make_verb(name, open_base / "fixtures", run_account_dir, pg_cluster, state_dsn)
    trials = FEWER.get(name, TRIALS)
    tally = campaign(verb, open_base / "work", trials, seed=SEED, budget=600, measure_runs=1)
    assert tally.trials == trials
    assert tally.problems == ()
    assert tally.reruns == trials

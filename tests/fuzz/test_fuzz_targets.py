"""Every reader of untrusted bytes keeps its invariants over the kept corpus (real seeds
and every crashing input found so far, minimised), over mutants of that corpus, and
over structure-aware inputs. The campaign (``benchmarks/fuzz_campaign.py``) runs the
same targets at 10^6 inputs; this is its short run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import require_compiled
from tests.fuzz import corpus
from tests.fuzz.confine import Escaped, confined
from tests.fuzz.mutate import mutate
from tests.fuzz.runner import minimise, run_one
from tests.fuzz.targets import TARGETS, Target
from tests.hypothesis_profiles import scaled

NAMES = sorted(TARGETS)
# Derandomized: the same mutants on every run, so a failure here is a regression, not
# luck; finding new inputs is the campaign's work.
SHORT = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
GENERATED = settings(SHORT, max_examples=scaled(0.5))
"""Structure-aware inputs, each dearer to make than a mutant: half as many."""


def target_here(name: str) -> Target:
    """The target ``name``; a test of the compiled fast path skips where it is not built
    (and fails under CI=true)."""
    target = TARGETS[name]
    if target.compiled:
        require_compiled()
    return target


def _failures(target: Target, inputs: list[tuple[str, bytes]], scratch: Path) -> list[str]:
    found = []
    for name, data in inputs:
        finding = run_one(target, data, scratch)
        if finding is not None:
            found.append(f"{name}: {finding.detail}")
    return found


@pytest.mark.parametrize("name", NAMES)
def test_every_kept_input_is_handled(name: str, tmp_path: Path) -> None:
    target = target_here(name)
    kept = corpus.load(name)
    assert any(file.startswith("seed-") for file, _ in kept), f"no seeds for {name}"
    assert _failures(target, kept, tmp_path) == []


@pytest.mark.parametrize("name", NAMES)
def test_mutants_of_the_corpus_are_handled(name: str, tmp_path: Path) -> None:
    target = target_here(name)
    pool = [data for _, data in corpus.load(name)]

    @SHORT
    @given(st.randoms(use_true_random=False))
    def check(rng: random.Random) -> None:
        data = mutate(rng, rng.choice(pool), pool)
        finding = run_one(target, data, tmp_path)
        assert finding is None, f"{finding.detail} on {data.hex()}"

    check()


@pytest.mark.parametrize("name", NAMES)
def test_structure_aware_inputs_are_handled(name: str, tmp_path: Path) -> None:
    target = target_here(name)

    @GENERATED
    @given(st.randoms(use_true_random=False))
    def check(rng: random.Random) -> None:
        data = target.generate(rng)
        finding = run_one(target, data, tmp_path)
        assert finding is None, f"{finding.detail} on {data.hex()}"

    check()


def test_a_write_outside_the_scratch_directory_is_caught(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(Escaped), confined(scratch):
        (tmp_path / "outside").write_bytes(b"x")
    assert not (tmp_path / "outside").exists()
    (scratch / "link").symlink_to(tmp_path)
    with pytest.raises(Escaped), confined(scratch):
        (scratch / "link" / "through").write_bytes(b"x")
    with confined(scratch):
        (scratch / "inside").write_bytes(b"x")
        (scratch / "inside").unlink()
        (scratch / "link").unlink()


def test_the_mutator_is_deterministic_for_a_seed() -> None:
    pool = [data for _, data in corpus.load("answer")]
    first = [mutate(random.Random(7), data, pool) for data in pool]
    assert first == [mutate(random.Random(7), data, pool) for data in pool]
    assert first != pool


def test_minimising_keeps_the_failure_and_drops_the_rest() -> None:
    data = b"padding" * 40 + b"\xde\xad" + b"tail" * 30
    smallest = minimise(data, lambda candidate: b"\xde\xad" in candidate)
    assert smallest == b"\xde\xad"

"""The condense planner's ordering, and the executor's stop-at-first-failure, for every
kind of request."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.ops.condense import (
    CondenseError,
    CondenseFailed,
    CondenseRequest,
    Plan,
    RequestKind,
    Step,
    StepKind,
    condense_onto_host,
    execute_plan,
    plan_condense,
)

zone_names = st.lists(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}\.(org|net|example)\.", fullmatch=True),
    unique=True,
    max_size=5,
)


@st.composite
def requests(draw: st.DrawFn) -> CondenseRequest:
    kind = draw(st.sampled_from(RequestKind))
    zones = draw(zone_names)
    edge = draw(st.booleans())
    if kind is RequestKind.GENESIS:
        return CondenseRequest(kind, zones, edge=edge)
    generation = draw(st.integers(min_value=0, max_value=2**40))
    return CondenseRequest(
        kind, zones, backup="/var/backups/valis.tar", backup_generation=generation, edge=edge
    )


def _at(plan: Plan, kind: StepKind) -> list[int]:
    return [i for i, step in enumerate(plan) if step.kind is kind]


def _one(plan: Plan, kind: StepKind) -> int:
    found = _at(plan, kind)
    assert len(found) == 1, (kind, plan)
    return found[0]


@given(requests())
def test_the_order_constraints_hold_for_every_request(request: CondenseRequest) -> None:
    plan = plan_condense(request)
    assessed = _one(plan, StepKind.ASSESS_HOST)
    materialised = _one(plan, StepKind.MATERIALISE_DURABLE_STATE)
    modules = _one(plan, StepKind.CONDENSE_MODULES)
    facts = _one(plan, StepKind.RENDER_SITE_FACTS)
    proofs = _at(plan, StepKind.PROVE_ZONE_SERVABLE)
    edge_proofs = _at(plan, StepKind.PROVE_EDGE_SERVABLE)
    fences = _at(plan, StepKind.SEED_FENCE) + _at(plan, StepKind.CLAIM_FENCE)
    started = _one(plan, StepKind.START_UNIT)
    ready = _one(plan, StepKind.READ_BACK_READY)
    soas = _at(plan, StepKind.READ_BACK_APEX_SOA)

    assert assessed == 0
    assert assessed < materialised < modules < facts
    assert all(facts < proof for proof in proofs)
    assert len(fences) == 1
    fence = fences[0]
    # The fence moves only once the successor is known able to serve: its zones, and
    # the elected edge's certificate.
    assert all(proof < fence for proof in proofs)
    assert len(edge_proofs) == (1 if request.edge else 0)
    assert all(facts < proof < fence for proof in edge_proofs)
    assert materialised < fence < started
    # The unit never starts before its zones are proven or its durable state exists.
    assert all(proof < started for proof in proofs)
    assert materialised < started
    assert started < ready
    assert all(ready < soa for soa in soas)
    assert [plan[i].zone for i in proofs] == list(request.zones)
    assert [plan[i].zone for i in soas] == list(request.zones)
    assert len(plan) == 7 + 2 * len(request.zones) + len(edge_proofs)


@given(requests())
def test_genesis_seeds_at_zero_and_the_others_claim_above_the_backup_head(
    request: CondenseRequest,
) -> None:
    plan = plan_condense(request)
    materialise = plan[_one(plan, StepKind.MATERIALISE_DURABLE_STATE)]
    if request.kind is RequestKind.GENESIS:
        assert _at(plan, StepKind.CLAIM_FENCE) == []
        assert plan[_one(plan, StepKind.SEED_FENCE)].generation == 0
        assert (materialise.backup, materialise.generation) == (None, 0)
    else:
        assert _at(plan, StepKind.SEED_FENCE) == []
        claim = plan[_one(plan, StepKind.CLAIM_FENCE)]
        assert request.backup_generation is not None
        assert claim.generation == request.backup_generation + 1
        assert materialise.backup == request.backup
        assert materialise.generation == request.backup_generation


@pytest.mark.parametrize(
    ("kind", "backup", "generation", "problem"),
    [
        (RequestKind.GENESIS, "/b.tar", 3, "genesis starts from nothing"),
        (RequestKind.EVACUATE, None, None, "--from-backup"),
        (RequestKind.RESTORE, "/b.tar", None, "--from-backup"),
        (RequestKind.RESTORE, "/b.tar", 2**63 - 1, "no higher generation"),
    ],
)
def test_a_request_whose_starting_point_contradicts_its_kind_is_refused(
    kind: RequestKind, backup: str | None, generation: int | None, problem: str
) -> None:
    with pytest.raises(CondenseError, match=problem):
        CondenseRequest(kind, ("example.org.",), backup=backup, backup_generation=generation)


@pytest.mark.parametrize("zones", [("example.org.", "example.org."), ("example.org",), ("A.org.",)])
def test_served_zones_must_be_distinct_lowercase_absolute_names(zones: tuple[str, ...]) -> None:
    with pytest.raises(CondenseError):
        CondenseRequest(RequestKind.GENESIS, zones)


@attrs.define
class RecordingHost:
    """The in-memory adapter of ``CondenseHost``: records each call, fails one on demand."""

    fail_at: int | None = None
    calls: list[tuple[str, Step]] = attrs.field(factory=list)

    def _run(self, method: str, step: Step) -> None:
        if self.fail_at == len(self.calls):
            self.calls.append((method, step))
            raise RuntimeError(f"{method} broke")
        self.calls.append((method, step))

    def assess_host(self, step: Step) -> None:
        self._run("assess_host", step)

    def materialise_durable_state(self, step: Step) -> None:
        self._run("materialise_durable_state", step)

    def condense_modules(self, step: Step) -> None:
        self._run("condense_modules", step)

    def render_site_facts(self, step: Step) -> None:
        self._run("render_site_facts", step)

    def prove_zone_servable(self, step: Step) -> None:
        self._run("prove_zone_servable", step)

    def prove_edge_servable(self, step: Step) -> None:
        self._run("prove_edge_servable", step)

    def seed_fence(self, step: Step) -> None:
        self._run("seed_fence", step)

    def claim_fence(self, step: Step) -> None:
        self._run("claim_fence", step)

    def start_unit(self, step: Step) -> None:
        self._run("start_unit", step)

    def read_back_ready(self, step: Step) -> None:
        self._run("read_back_ready", step)

    def read_back_apex_soa(self, step: Step) -> None:
        self._run("read_back_apex_soa", step)


@given(requests())
def test_a_plan_runs_every_step_in_order_through_the_method_of_its_kind(
    request: CondenseRequest,
) -> None:
    host = RecordingHost()
    report = condense_onto_host(request, host)
    plan = plan_condense(request)
    assert report.completed == plan
    assert host.calls == [(step.kind.value, step) for step in plan]


@given(requests(), st.data())
def test_a_failed_step_stops_the_plan_and_no_later_step_runs(
    request: CondenseRequest, data: st.DataObject
) -> None:
    plan = plan_condense(request)
    failing = data.draw(st.integers(min_value=0, max_value=len(plan) - 1))
    host = RecordingHost(fail_at=failing)
    with pytest.raises(CondenseFailed) as stopped:
        execute_plan(plan, host)
    assert [step for _, step in host.calls] == list(plan[: failing + 1])
    assert stopped.value.step == plan[failing]
    assert stopped.value.completed == plan[:failing]
    assert f"step {failing + 1}/{len(plan)}" in str(stopped.value)
    if failing <= _one(plan, StepKind.START_UNIT):
        assert "the unit was not started" in str(stopped.value)


def test_an_unservable_zone_never_reaches_the_start() -> None:
    request = CondenseRequest(RequestKind.GENESIS, ("example.org.", "broken.example."))
    plan = plan_condense(request)
    broken = next(
        i for i, s in enumerate(plan) if s.kind is StepKind.PROVE_ZONE_SERVABLE and s.zone == (
            "broken.example."
        )
    )
    host = RecordingHost(fail_at=broken)
    with pytest.raises(CondenseFailed, match=r"prove zone servable broken\.example\."):
        execute_plan(plan, host)
    ran = {method for method, _ in host.calls}
    assert "start_unit" not in ran
    assert "seed_fence" not in ran


def test_an_interrupt_is_not_turned_into_a_step_failure() -> None:
    class Interrupted(RecordingHost):
        def condense_modules(self, step: Step) -> None:
            raise KeyboardInterrupt

    host = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        condense_onto_host(CondenseRequest(RequestKind.GENESIS, ()), host)
    assert [method for method, _ in host.calls] == ["assess_host", "materialise_durable_state"]

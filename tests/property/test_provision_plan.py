"""The first boot's plan: every step in one fixed order, and the plan's own effect leaves
nothing to change, which is why a second provision says so."""

from __future__ import annotations

import attrs
from hypothesis import given

from tests.property.provision_facts import (
    REMOTE,
    SERVICE,
    UNIT_DIR,
    host_facts,
    requests,
    unblocked,
)
from tests.provision_example import CONFIG
from valis_core.launcher_config import render_launcher_config
from valis_core.ops.provision import (
    CONTROL_SOCKET_UNIT,
    AccountFacts,
    FileFacts,
    HostFacts,
    Plan,
    ProvisionRequest,
    Status,
    StepName,
    plan_provision,
    render_plan,
    settled,
)


@given(requests, host_facts)
def test_every_step_appears_once_in_the_order_each_needs_the_ones_before(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    plan = plan_provision(request, facts)
    assert [step.name for step in plan.steps] == list(StepName)
    order = [step.name for step in plan.steps]
    # The account owns the state directory and is what the ident map names; the schema
    # is migrated over the access the ident and hba steps made; the unit is linked from
    # the version the delivery step switched to.
    for before, after in [
        (StepName.RUN_ACCOUNT, StepName.STATE_DIRECTORY),
        (StepName.RUN_ACCOUNT, StepName.PEER_IDENT),
        (StepName.POSTGRESQL_CLUSTER, StepName.POSTGRESQL_ROLE),
        (StepName.POSTGRESQL_ROLE, StepName.POSTGRESQL_DATABASE),
        (StepName.PEER_IDENT, StepName.SCHEMA),
        (StepName.PEER_HBA, StepName.SCHEMA),
        (StepName.FHS_LAYOUT, StepName.DELIVERY),
        (StepName.DELIVERY, StepName.UNIT),
    ]:
        assert order.index(before) < order.index(after)


@given(requests, host_facts)
def test_the_plans_own_effect_leaves_nothing_to_change(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request, facts = unblocked(request, facts)
    plan = plan_provision(request, facts)
    assert not plan.blocked
    after = settled(request, facts)
    assert plan_provision(request, after).nothing_to_change
    assert settled(request, after) == after


@given(requests, host_facts)
def test_a_step_already_done_is_still_done_after_the_others_ran(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request, facts = unblocked(request, facts)
    plan = plan_provision(request, facts)
    again = plan_provision(request, settled(request, facts))
    for before, after in zip(plan.steps, again.steps, strict=True):
        if before.status is Status.DONE:
            assert after == before or after.status is Status.DONE


@given(requests, host_facts)
def test_no_local_cluster_blocks_and_names_what_the_dba_must_do(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request = attrs.evolve(request, database_host=None)
    plan = plan_provision(request, attrs.evolve(facts, cluster=None))
    step = _step(plan, StepName.POSTGRESQL_CLUSTER)
    assert step.status is Status.BLOCKED
    assert "CREATE ROLE valis LOGIN;" in step.description
    assert "local  valis_state  valis  peer  map=valis" in step.description
    assert "CREATE ROLE" in render_plan(plan)


@given(requests, host_facts)
def test_another_named_account_must_exist_and_reach_its_home(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    legacy = attrs.evolve(request, account="alice")
    step = _step(plan_provision(legacy, attrs.evolve(facts, account=None)), StepName.RUN_ACCOUNT)
    assert step.status is Status.BLOCKED
    blocked_home = AccountFacts("alice", 1000, 1000, "/home/alice", "/bin/bash",
                                "alice cannot traverse /home/alice (mode 0700)")
    step = _step(plan_provision(legacy, attrs.evolve(facts, account=blocked_home)),
                 StepName.RUN_ACCOUNT)
    assert step.status is Status.BLOCKED
    assert "/home/alice (mode 0700)" in step.description


@given(requests, host_facts)
def test_a_version_not_staged_and_no_delivery_is_blocked_not_guessed(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    plan = plan_provision(attrs.evolve(request, delivery=None),
                          attrs.evolve(facts, version_staged=False, current=None))
    step = _step(plan, StepName.DELIVERY)
    assert step.status is Status.BLOCKED
    assert "--delivery" in step.description


def _step(plan: Plan, name: StepName):  # type: ignore[no-untyped-def]
    return next(step for step in plan.steps if step.name is name)


@given(requests, host_facts)
def test_another_run_account_runs_the_service_and_owns_the_socket_by_drop_ins(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    service, socket = request.units
    if request.account == "valis":
        assert (service.dropin, socket.dropin) == (None, None)
    else:
        assert service.dropin is not None
        assert socket.dropin is not None
        assert "[Service]" in service.dropin
        assert "[Socket]" in socket.dropin
        assert f"User={request.account}\nGroup={request.run_group}\n" in service.dropin
        assert (f"SocketUser={request.account}\nSocketGroup={request.run_group}\n"
                in socket.dropin)
    request, facts = unblocked(request, facts)
    after = settled(request, facts)
    assert after.unit(SERVICE).dropin == service.dropin
    assert after.unit(CONTROL_SOCKET_UNIT).dropin == socket.dropin


@given(requests, host_facts)
def test_the_unit_step_places_the_service_and_its_control_socket_both_linked_and_enabled(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request, facts = unblocked(request, facts)
    service, socket = request.units
    assert (service.name, socket.name) == (SERVICE, CONTROL_SOCKET_UNIT)
    assert (service.source, socket.source) == (UNIT_DIR + SERVICE,
                                               UNIT_DIR + CONTROL_SOCKET_UNIT)
    step = _step(plan_provision(request, facts), StepName.UNIT)
    placed = [placement.placed(facts.unit(placement.name)) for placement in request.units]
    assert (step.status is Status.DONE) == all(placed)
    if step.status is Status.TO_DO:
        assert f"systemctl link {service.source} {socket.source}" in step.description
        assert f"systemctl enable {SERVICE} {CONTROL_SOCKET_UNIT}" in step.description
    after = settled(request, facts)
    for placement in request.units:
        held = after.unit(placement.name)
        assert (held.link, held.enabled) == (placement.source, True)
    # Either unit taken away again (unlinked, disabled or its drop-in gone stale) is
    # something to do: done checks both.
    for placement in request.units:
        for broken in (attrs.evolve(after.unit(placement.name), link=None),
                       attrs.evolve(after.unit(placement.name), enabled=False),
                       attrs.evolve(after.unit(placement.name), dropin="stale\n")):
            others = tuple(held for held in after.units if held.name != placement.name)
            again = attrs.evolve(after, units=(*others, broken))
            assert _step(plan_provision(request, again), StepName.UNIT).status is Status.TO_DO


@given(requests, host_facts)
def test_operator_state_on_a_database_host_needs_no_local_cluster(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request = attrs.evolve(request, database_host=REMOTE)
    plan = plan_provision(request, attrs.evolve(facts, cluster=None))
    for name in (StepName.POSTGRESQL_CLUSTER, StepName.POSTGRESQL_ROLE,
                 StepName.POSTGRESQL_DATABASE, StepName.PEER_IDENT, StepName.PEER_HBA):
        step = _step(plan, name)
        assert step.status is Status.DONE
        assert "the database host db.example port 5432" in step.description
    assert _step(plan, StepName.SCHEMA).status is (
        Status.DONE if facts.remote_schema_current else Status.TO_DO)
    client = _step(plan, StepName.DATABASE_CLIENT)
    assert "/var/lib/valis-dns/operator-state-tls" in client.description


@given(requests, host_facts)
def test_the_bundle_is_placed_until_every_file_is_the_run_accounts_alone(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request, facts = unblocked(attrs.evolve(request, database_host=REMOTE), facts)
    placed = settled(request, facts)
    assert _step(plan_provision(request, placed), StepName.DATABASE_CLIENT).status is \
        Status.DONE
    held = dict(placed.database_client)
    for name in REMOTE.files:
        for spoiled in (attrs.evolve(held[name], mode=0o644),
                        attrs.evolve(held[name], text="old"),
                        attrs.evolve(held[name], uid=0)):
            worse = attrs.evolve(placed, database_client=tuple(
                {**held, name: spoiled}.items()))
            assert _step(plan_provision(request, worse), StepName.DATABASE_CLIENT).status \
                is Status.TO_DO


@given(requests, host_facts)
def test_a_changed_launcher_config_says_a_restart_applies_it_and_where_updates_go(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    """fulcrum reads its config when it starts: an operator who reruns provision with
    another --owner-port is told the running unit needs a restart, and where DNS UPDATE
    goes now; a first write, or a mode fixed alone, changes nothing that runs."""
    opened = attrs.evolve(request, launcher_config=attrs.evolve(CONFIG, owner_port=8053))
    held = FileFacts(render_launcher_config(CONFIG), 0, 0o644)
    for facts_held, changed in ((held, True), (None, False),
                                (FileFacts(opened.launcher_config_text, 0, 0o600), False)):
        step = _step(plan_provision(opened, attrs.evolve(facts, launcher_config=facts_held)),
                     StepName.LAUNCHER_CONFIG)
        assert step.status is Status.TO_DO
        assert ("`systemctl restart fulcrum-valis`" in step.description) is changed
        assert "owner terminus (DNS UPDATE, TCP) on port 8053" in step.description
    closed = _step(plan_provision(request, attrs.evolve(facts, launcher_config=held)),
                   StepName.LAUNCHER_CONFIG)
    assert "owner terminus closed" in closed.description

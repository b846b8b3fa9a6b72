"""The first boot's plan: every step in one fixed order, and the plan's own effect leaves
nothing to change, which is why a second provision says so."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from tests.provision_example import CONFIG, FACTS
from valis_core.launcher_config import render_launcher_config
from valis_core.operator_state.site_facts import render_site_facts
from valis_core.ops.provision import (
    CONTROL_SOCKET_UNIT,
    AccountFacts,
    ClusterFacts,
    FileFacts,
    HostFacts,
    Plan,
    ProvisionRequest,
    RemoteDatabase,
    Status,
    StepName,
    UnitFacts,
    plan_provision,
    render_plan,
    settled,
)

REMOTE = RemoteDatabase("db.example", 5432, {"ca.crt": b"CA", "client.crt": b"CERT",
                                              "client.key": b"KEY"})
VERSION = "0.1.0"
SERVICE = "fulcrum-valis.service"
UNIT_DIR = "/opt/valis/current/lib/systemd/system/"

requests = st.builds(
    ProvisionRequest,
    account=st.sampled_from(["valis", "alice"]),
    run_group=st.sampled_from(["valis", "staff"]),
    version=st.just(VERSION),
    root=st.just("/opt/valis"),
    state_dir=st.just("/var/lib/valis-dns"),
    socket_dir=st.just("/var/run/postgresql"),
    launcher_config_path=st.just("/etc/fulcrum/launcher.toml"),
    launcher_config=st.just(CONFIG),
    site_facts_path=st.just("/etc/valis/site-facts.env"),
    site_facts=st.just(FACTS),
    unit_name=st.just(SERVICE),
    delivery=st.sampled_from([None, "/root/valis-serving-0.1.0.tar.gz"]),
    dist_url=st.sampled_from([None, "file:///srv/wheelhouse/simple/"]),
    database_host=st.sampled_from([None, REMOTE]),
)
modes = st.sampled_from([None, 0o755, 0o700, 0o750])
texts = st.sampled_from(["", "local all all peer\n", "other\n",
                         "local valis_state valis peer map=valis\nlocal all all peer\n",
                         "valis valis valis\n"])
accounts = st.one_of(st.none(), st.builds(
    AccountFacts, name=st.just("valis"), uid=st.sampled_from([0, 999, 1000]),
    gid=st.just(995), home=st.sampled_from(["/nonexistent", "/home/alice"]),
    shell=st.just("/usr/sbin/nologin"),
    home_blocked=st.sampled_from([None, "valis cannot traverse /home (mode 0700)"]),
))
clusters = st.one_of(st.none(), st.builds(
    ClusterFacts, version=st.just("15"), name=st.just("main"), port=st.just(5432),
    running=st.booleans(), role_exists=st.booleans(), database_exists=st.booleans(),
    ident_text=st.one_of(st.none(), texts), hba_text=st.one_of(st.none(), texts),
    schema_current=st.booleans(),
))


def files(good: str, mode: int) -> st.SearchStrategy[FileFacts | None]:
    return st.one_of(st.none(), st.builds(
        FileFacts, text=st.sampled_from([good, "stale\n"]), uid=st.sampled_from([0, 999]),
        mode=st.sampled_from([mode, 0o600, 0o666]),
    ))


def unit_facts(name: str) -> st.SearchStrategy[UnitFacts]:
    return st.builds(
        UnitFacts, name=st.just(name),
        link=st.sampled_from([None, UNIT_DIR + name, "/elsewhere/" + name]),
        enabled=st.booleans(),
        dropin=st.sampled_from([None, "[Service]\nUser=valis\n",
                                "[Socket]\nSocketUser=valis\n"]),
    )


held_units = st.tuples(st.one_of(st.none(), unit_facts(SERVICE)),
                       st.one_of(st.none(), unit_facts(CONTROL_SOCKET_UNIT))).map(
    lambda units: tuple(unit for unit in units if unit is not None))

host_facts = st.builds(
    HostFacts,
    account=accounts,
    root_mode=modes,
    versions_mode=modes,
    version_staged=st.booleans(),
    current=st.sampled_from([None, VERSION, "0.0.9"]),
    state_dir=st.one_of(st.none(), st.builds(FileFacts, text=st.just(""),
                                             uid=st.sampled_from([0, 999]), mode=modes.filter(
                                                 lambda m: m is not None))),
    cluster=clusters,
    launcher_config=files(render_launcher_config(CONFIG), 0o644),
    site_facts=files(render_site_facts(FACTS), 0o640),
    dist_registration=st.sampled_from([None, "file:///srv/wheelhouse/simple/",
                                       "https://old.example.net/simple/"]),
    systemd=st.booleans(),
    units=held_units,
    database_client=st.lists(st.tuples(
        st.sampled_from(sorted(REMOTE.files)),
        st.builds(FileFacts, text=st.sampled_from(["CA", "CERT", "KEY", "old"]),
                  uid=st.sampled_from([0, 999]), mode=st.sampled_from([0o600, 0o644]))),
        max_size=3, unique_by=lambda pair: pair[0]).map(tuple),
    remote_schema_current=st.booleans(),
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


def unblocked(request: ProvisionRequest, facts: HostFacts) -> tuple[ProvisionRequest, HostFacts]:
    """The same host with what would block a step taken away: the run account usable,
    a local cluster, systemd, this version's delivery at hand."""
    account = facts.account
    if account is not None:
        account = attrs.evolve(account, uid=account.uid or 999, home_blocked=None)
    elif not request.creates_account:
        account = AccountFacts(request.account, 1000, 1000, "/home/alice", "/bin/sh")
    facts = attrs.evolve(
        facts, account=account, systemd=True,
        cluster=facts.cluster or ClusterFacts("15", "main", 5432, False),
        current=None if facts.current not in (None, VERSION) else facts.current,
    )
    if request.delivery is None and not facts.version_staged:
        request = attrs.evolve(request, delivery="/root/valis-serving-0.1.0.tar.gz")
    return request, facts


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

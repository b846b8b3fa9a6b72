"""``valis provision``'s operator-state names and its environment: ``--role`` and
``--database`` go into the SQL, the access files and the DSN, checked as PostgreSQL
identifiers first; libpq's variables that carry a password or move a connection
(``PGPASSWORD``, ``PGPASSFILE``, ``PGSERVICE``, ``PGHOST``, ``PGHOSTADDR``) are refused
as a DSN carrying them is; ``--no-unit`` places no unit and says how to start by hand.

The refusals come before provision looks at the host or asks for root, so they run here
unprivileged through the ``valis`` command itself."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.property.provision_facts import host_facts, requests, unblocked
from valis_cli.main import run
from valis_core.command_line import run_reported
from valis_core.operator_state.dsn import (
    LIBPQ_ENVIRONMENT,
    DsnRefused,
    check_environment,
    environment_problem,
)
from valis_core.operator_state.peer_access import PeerAccess, identifier_problem
from valis_core.ops.provision import (
    HostFacts,
    ProvisionRequest,
    Status,
    StepName,
    plan_provision,
    settled,
)

ARGV = ["provision", "--plan", "--node", "origin-1", "--location", "lab", "--served-zone",
        "example.test.", "--interface", "ens7"]
LIBPQ_NAMES = [name for name, _ in LIBPQ_ENVIRONMENT]


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in LIBPQ_NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def provision(*extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = run_reported("valis", run, [*ARGV, *extra])
    return status, capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--role", "--database"])
@pytest.mark.parametrize("name", ["Valis", "valis-state", "1valis", "valis state",
                                  'valis"; drop', "", "v" * 64])
def test_a_name_postgresql_would_not_take_unquoted_is_refused_naming_the_flag(
    clean_environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    flag: str, name: str,
) -> None:
    status, err = provision(flag, name, capsys=capsys)
    assert status == 1
    assert err.startswith(f"valis: provision: {flag} {name!r} is not a plain lower-case "
                          "PostgreSQL identifier"), err


@given(st.from_regex(r"[a-z_][a-z0-9_]{0,62}", fullmatch=True),
       st.from_regex(r"[a-z_][a-z0-9_]{0,62}", fullmatch=True))
def test_the_role_and_database_named_are_the_ones_created_admitted_and_dialled(
    role: str, database: str
) -> None:
    assert identifier_problem(role) is None
    assert identifier_problem(database) is None
    access = PeerAccess("valis", role, database)
    assert access.create_role_sql == f"CREATE ROLE {role} LOGIN;"
    assert access.create_database_sql == f"CREATE DATABASE {database} OWNER {role};"
    assert access.hba_line.split() == ["local", database, role, "peer", "map=valis"]


@pytest.mark.parametrize("variable", LIBPQ_NAMES)
def test_a_libpq_variable_in_the_environment_is_refused_as_a_dsn_carrying_it(
    clean_environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    variable: str,
) -> None:
    clean_environment.setenv(variable, "")  # set at all: libpq reads even an empty one
    status, err = provision(capsys=capsys)
    assert status == 1
    assert err.startswith(f"valis: provision: DSN refused: the environment sets {variable}:")
    assert f"unset {variable};" in err
    with pytest.raises(DsnRefused, match=f"the environment sets {variable}"):
        check_environment({variable: "x", "PGPORT": "5433"}, source="provision")


@given(st.dictionaries(st.sampled_from([*LIBPQ_NAMES, "PGPORT", "PGUSER", "PGDATABASE",
                                        "PGSSLMODE", "HOME", "PATH"]), st.text(max_size=8)))
def test_the_environment_is_refused_exactly_when_it_names_a_refused_variable(
    environ: dict[str, str]
) -> None:
    problem = environment_problem(environ)
    named = [name for name in LIBPQ_NAMES if name in environ]
    assert (problem is None) == (not named)
    for name in named:
        assert problem is not None
        assert name in problem


@given(requests, host_facts)
def test_no_unit_places_nothing_and_says_how_to_start_the_node_by_hand(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request, facts = unblocked(request, facts)
    request = attrs.evolve(request, place_units=False)
    for systemd in (True, False):  # a host without systemd as PID 1 is not blocked
        held = attrs.evolve(facts, systemd=systemd)
        plan = plan_provision(request, held)
        assert not plan.blocked
        step = next(step for step in plan.steps if step.name is StepName.UNIT)
        assert step.status is Status.DONE
        assert "--no-unit" in step.description
        assert (f"--unit-command '/opt/valis/current/bin/fulcrum launch --config "
                f"{request.launcher_config_path}'") in step.description
        after = settled(request, held)
        assert after.units == held.units
        assert plan_provision(request, after).nothing_to_change


@given(requests, host_facts)
def test_without_systemd_the_blocked_unit_step_names_no_unit(
    request: ProvisionRequest, facts: HostFacts
) -> None:
    request, facts = unblocked(request, facts)
    step = next(step for step in plan_provision(request, attrs.evolve(facts, systemd=False)).steps
                if step.name is StepName.UNIT)
    assert step.status is Status.BLOCKED
    assert "give --no-unit and start the node by hand: valis condense --unit-command" \
        in step.description

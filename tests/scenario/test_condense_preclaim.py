"""What condense proves from the state directory alone before it claims the fence, each
as the resident's bring-up will find it, so a successor that would stop at boot is
refused while its predecessor still holds the fence: an elected edge's certificate (its
configuration store and edge files), and a restored owner seed (the signing keys are
proven on the proving ground, tests/scenario/test_condense_evacuate.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tests.scenario.edge_ca import install, make_test_ca
from tests.scenario.resident_harness import site_facts
from valis_core.errors import ValisError
from valis_core.identity.custody import keyfile_path, load_or_create_keyfile
from valis_core.ops.backup import create_backup, verify_backup_set
from valis_core.ops.condense import Step, StepKind
from valis_core.ops.condense_host import LocalCondenseHost
from valis_core.state_layout import edge_certificate_path, edge_key_path
from valis_core.store.head import materialise_genesis

DSN = "postgresql://valis@/valis_state?host=/var/run/postgresql"
DOMAIN = "example.test"
ACME = {"VALIS_SERVED_DOMAIN": DOMAIN,
        "VALIS_ACME_DIRECTORY_URL": "https://ca.example.test/dir"}
ON_DEMAND = {"VALIS_EDGE_CERT": "on-demand"}


def _state(tmp_path: Path, **facts: str) -> tuple[LocalCondenseHost, Path]:
    """A state directory whose configuration store holds the site facts, plus ``facts``,
    and the host condense proves its edge on."""

    def never(*_: object) -> object:
        raise AssertionError("the edge proof reads nothing but the state directory")

    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    host = LocalCondenseHost(
        state_dir=state_dir,
        run_account=(os.getuid(), os.getgid()),
        connect=never,  # type: ignore[arg-type]
        unit=never,  # type: ignore[arg-type]
        holder="node-a@loopback",
        dns_address=("127.0.0.1", 53),
        assess=lambda: None,
        facts=site_facts(DSN, **facts),
    )
    host.render_site_facts(Step(StepKind.RENDER_SITE_FACTS))
    return host, state_dir


def _prove(host: LocalCondenseHost) -> None:
    host.prove_edge_servable(Step(StepKind.PROVE_EDGE_SERVABLE))


@pytest.mark.parametrize("facts", [ACME, ON_DEMAND], ids=["acme", "on-demand"])
def test_an_edge_that_obtains_or_waits_for_its_certificate_needs_none_yet(
    tmp_path: Path, facts: dict[str, str]
) -> None:
    host, _ = _state(tmp_path, **facts)
    _prove(host)


def test_an_edge_with_no_certificate_and_no_way_to_one_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    host, state_dir = _state(tmp_path)
    with pytest.raises(ValisError, match=r"no certificate at .*leaf\.crt"):
        _prove(host)
    install(make_test_ca().issue((DOMAIN,)), state_dir)
    _prove(host)


@pytest.mark.parametrize("facts", [{}, ACME, ON_DEMAND], ids=["plain", "acme", "on-demand"])
def test_a_chain_that_is_not_its_keys_is_refused_however_the_edge_gets_certificates(
    tmp_path: Path, facts: dict[str, str]
) -> None:
    host, state_dir = _state(tmp_path, **facts)
    ca = make_test_ca()
    install(ca.issue((DOMAIN,)), state_dir)
    other = tmp_path / "other"
    other.mkdir()
    install(ca.issue((DOMAIN,)), other)
    edge_key_path(state_dir).write_bytes(edge_key_path(other).read_bytes())
    with pytest.raises(ValisError):
        _prove(host)


@pytest.mark.parametrize("facts", [{}, ACME], ids=["plain", "acme"])
def test_a_chain_without_its_key_is_refused(tmp_path: Path, facts: dict[str, str]) -> None:
    host, state_dir = _state(tmp_path, **facts)
    install(make_test_ca().issue((DOMAIN,)), state_dir)
    edge_key_path(state_dir).unlink()
    with pytest.raises(ValisError, match=r"leaf\.key"):
        _prove(host)
    assert edge_certificate_path(state_dir).exists()


def _launcher_config(path: Path, **fields: object) -> Path:
    from valis_core.launcher_config import launcher_config_from_mapping, render_launcher_config

    table: dict[str, object] = {
        "netns-name": "valis-unit", "unit-ip": "198.51.100.10", "unit-cidr": 24,
        "public-interface": "eth1", "public-gateway": "198.51.100.1", "mode": "dedicated",
        "designated-port": 53, "catchall-object-path": "/opt/valis/lib/catchall.bpf.o",
        "valis-command": ["/opt/valis/bin/valis"],
        **{key.replace("_", "-"): value for key, value in fields.items()},
    }
    path.write_text(render_launcher_config(launcher_config_from_mapping(table)))
    return path


@pytest.mark.parametrize(("fields", "unsupervised", "elected"), [
    ({"edge_port": 443}, False, True),
    ({}, False, False),
    ({"edge_port": 443}, True, False),
], ids=["edge-port", "no-edge-port", "unsupervised"])
def test_valis_condense_proves_the_edge_exactly_when_the_launcher_config_elects_it(
    tmp_path: Path, fields: dict[str, object], unsupervised: bool, elected: bool
) -> None:
    from valis_cli.commands.condense import _request
    from valis_core.ops.condense import plan_condense

    args = argparse.Namespace(
        genesis=True, evacuate=False, module=[], unsupervised=unsupervised,
        launcher_config=str(_launcher_config(tmp_path / "launcher.toml", **fields)),
    )
    plan = plan_condense(_request(args, ("example.test.",)))
    proofs = [step for step in plan if step.kind is StepKind.PROVE_EDGE_SERVABLE]
    assert len(proofs) == (1 if elected else 0)


def test_a_restored_owner_seed_the_resident_would_refuse_stops_condense_before_the_claim(
    tmp_path: Path,
) -> None:
    """A re-run of a restore finds its owner seed opened to other accounts: the
    resident's identity stage would refuse it, so condense refuses it at the durable
    state step, before any fence step."""
    origin = tmp_path / "origin"
    origin.mkdir(mode=0o700)
    materialise_genesis(origin)
    load_or_create_keyfile(origin)
    archive = tmp_path / "origin.backup"
    create_backup(origin, archive)
    step = Step(StepKind.MATERIALISE_DURABLE_STATE, backup=str(archive),
                generation=verify_backup_set(archive).generation)
    host, state_dir = _state(tmp_path)
    host.materialise_durable_state(step)
    keyfile_path(state_dir).chmod(0o644)
    with pytest.raises(ValisError, match="open to other accounts"):
        host.materialise_durable_state(step)

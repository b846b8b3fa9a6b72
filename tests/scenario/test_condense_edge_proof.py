"""Condense proves an elected edge's certificate before it claims the fence, as the
resident's edge stage will find it in the state directory: a successor whose edge would
stop its boot is refused while its predecessor still holds the fence. The step reads
only the state directory (its configuration store and edge files)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tests.scenario.edge_ca import install, make_test_ca
from tests.scenario.resident_harness import site_facts
from valis_core.errors import ValisError
from valis_core.ops.condense import Step, StepKind
from valis_core.ops.condense_host import LocalCondenseHost
from valis_core.state_layout import edge_certificate_path, edge_key_path

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

"""The modules step of condense: the head's pins installed from the registered private
dist; a genesis node's requested modules pinned and recorded in its head."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.scenario.module_dist import HELLO, hello_wheel, pin_of, publish, served_over_http
from valis_core.atomic import write_atomic
from valis_core.ops.condense import Step, StepKind
from valis_core.ops.condense_host import CondenseHostError, LocalCondenseHost
from valis_core.plugin.dist_home import ALLOW_INSECURE, DistHomeError, register_dist
from valis_core.plugin.installed import modules_dir
from valis_core.plugin.simple_index import DistError
from valis_core.store.head import head_path, read_store_head
from valis_core.store.manifest import (
    Manifest,
    ModulePin,
    dumps,
    is_genesis,
    make_default_manifest,
)


def _host(
    state_dir: Path, *, home: Path | None = None, insecure: bool = False,
    said: list[str] | None = None,
) -> LocalCondenseHost:
    def never(*_: object) -> object:
        raise AssertionError("the modules step touches nothing but the state directory")

    return LocalCondenseHost(
        state_dir=state_dir,
        run_account=(0, 0),
        connect=never,  # type: ignore[arg-type]
        unit=never,  # type: ignore[arg-type]
        holder="node@here",
        dns_address=("127.0.0.1", 53),
        assess=lambda: None,
        dist_home=home if home is not None else state_dir / "no-dist-home",
        allow_insecure_dist=insecure,
        say=(said if said is not None else []).append,
    )


def _write_head(state_dir: Path, manifest: Manifest) -> None:
    path = head_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dumps(manifest), mode=0o600)


def test_a_head_without_modules_passes_the_modules_step(tmp_path: Path) -> None:
    _write_head(tmp_path, make_default_manifest())
    _host(tmp_path).condense_modules(Step(StepKind.CONDENSE_MODULES))


def test_a_head_pinning_modules_without_a_registered_dist_stops_condense(
    tmp_path: Path,
) -> None:
    pin = ModulePin(name="valis-geo", version="1.2.0", sha256="ab" * 32)
    _write_head(tmp_path, Manifest(generation=0, modules=(pin,)))
    with pytest.raises(DistHomeError, match="no private dist is registered"):
        _host(tmp_path).condense_modules(Step(StepKind.CONDENSE_MODULES))
    assert not modules_dir(tmp_path).exists()


def test_the_heads_pins_are_installed_from_the_registered_dist(tmp_path: Path) -> None:
    wheel = hello_wheel()
    register_dist(tmp_path / "home", publish(tmp_path / "wh", wheel))
    state = tmp_path / "state"
    _write_head(state, Manifest(generation=4, modules=(pin_of(HELLO, "1.0", wheel),)))
    before = head_path(state).read_bytes()
    _host(state, home=tmp_path / "home").condense_modules(Step(StepKind.CONDENSE_MODULES))
    assert (modules_dir(state) / "valis_hello" / "__init__.py").is_file()
    assert head_path(state).read_bytes() == before


def test_a_genesis_modules_request_pins_the_dists_wheel_in_the_head(tmp_path: Path) -> None:
    wheel = hello_wheel()
    register_dist(tmp_path / "home", publish(tmp_path / "wh", wheel, hello_wheel("2.0")))
    state = tmp_path / "state"
    _write_head(state, make_default_manifest())
    step = Step(StepKind.CONDENSE_MODULES, modules=("valis-hello==1.0",))
    _host(state, home=tmp_path / "home").condense_modules(step)
    head = read_store_head(state)
    assert head == Manifest(generation=0, modules=(pin_of(HELLO, "1.0", wheel),))
    assert is_genesis(head)
    assert (modules_dir(state) / "valis_hello-1.0.dist-info").is_dir()


def test_a_genesis_module_the_dist_lacks_leaves_the_head_and_directory_as_they_were(
    tmp_path: Path,
) -> None:
    register_dist(tmp_path / "home", publish(tmp_path / "wh", hello_wheel()))
    state = tmp_path / "state"
    _write_head(state, make_default_manifest())
    before = head_path(state).read_bytes()
    step = Step(StepKind.CONDENSE_MODULES, modules=("valis-hello==1.0", "valis-geo==3"))
    with pytest.raises(DistError, match="offers no wheel of valis-geo"):
        _host(state, home=tmp_path / "home").condense_modules(step)
    assert head_path(state).read_bytes() == before
    assert sorted(os.listdir(state)) == ["store"]


def test_no_head_at_all_stops_the_modules_step(tmp_path: Path) -> None:
    with pytest.raises(CondenseHostError, match="never materialised"):
        _host(tmp_path).condense_modules(Step(StepKind.CONDENSE_MODULES))


def test_a_genesis_pins_from_a_plain_http_dist_only_when_allowed_and_says_each_pin(
    tmp_path: Path,
) -> None:
    """Over plain http the genesis pin would trust whatever the path served: refused
    (head and directory as they were) unless the operator allows it, and then every pin
    made is told with its sha256 to compare with the wheel published."""
    wheel = hello_wheel()
    with served_over_http(tmp_path / "wh") as url:
        publish(tmp_path / "wh", wheel)
        register_dist(tmp_path / "home", url, allow_insecure=True)
        state = tmp_path / "state"
        _write_head(state, make_default_manifest())
        before = head_path(state).read_bytes()
        step = Step(StepKind.CONDENSE_MODULES, modules=("valis-hello==1.0",))
        with pytest.raises(DistError, match=rf"plain http.*{ALLOW_INSECURE}"):
            _host(state, home=tmp_path / "home").condense_modules(step)
        assert head_path(state).read_bytes() == before
        assert sorted(os.listdir(state)) == ["store"]
        said: list[str] = []
        _host(state, home=tmp_path / "home", insecure=True, said=said).condense_modules(step)
    pin = pin_of(HELLO, "1.0", wheel)
    assert read_store_head(state) == Manifest(generation=0, modules=(pin,))
    assert said == [
        f"valis: pinned valis-hello==1.0 to sha256 {pin.sha256}, as {url} serves it; "
        "compare it with the wheel you published"
    ]


def test_a_genesis_from_a_file_dist_says_each_pin_it_makes(tmp_path: Path) -> None:
    wheel = hello_wheel()
    url = publish(tmp_path / "wh", wheel)
    register_dist(tmp_path / "home", url)
    state = tmp_path / "state"
    _write_head(state, make_default_manifest())
    said: list[str] = []
    step = Step(StepKind.CONDENSE_MODULES, modules=("valis-hello==1.0",))
    _host(state, home=tmp_path / "home", said=said).condense_modules(step)
    assert [pin_of(HELLO, "1.0", wheel).sha256 in line for line in said] == [True]

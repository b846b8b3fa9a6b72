"""The modules step of condense fails closed on a head that pins modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from valis_core.atomic import write_atomic
from valis_core.ops.condense import Step, StepKind
from valis_core.ops.condense_host import CondenseHostError, LocalCondenseHost
from valis_core.store.head import head_path
from valis_core.store.manifest import Manifest, ModulePin, dumps, make_default_manifest


def _host(state_dir: Path) -> LocalCondenseHost:
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
    )


def _write_head(state_dir: Path, manifest: Manifest) -> None:
    path = head_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dumps(manifest), mode=0o600)


def test_a_head_without_modules_passes_the_modules_step(tmp_path: Path) -> None:
    _write_head(tmp_path, make_default_manifest())
    _host(tmp_path).condense_modules(Step(StepKind.CONDENSE_MODULES))


def test_a_head_pinning_modules_stops_condense_naming_them(tmp_path: Path) -> None:
    pin = ModulePin(name="valis-geo", version="1.2.0", sha256="ab" * 32)
    _write_head(tmp_path, Manifest(generation=0, modules=(pin,)))
    with pytest.raises(CondenseHostError, match=r"pins modules \(valis-geo==1\.2\.0\)"):
        _host(tmp_path).condense_modules(Step(StepKind.CONDENSE_MODULES))


def test_no_head_at_all_stops_the_modules_step(tmp_path: Path) -> None:
    with pytest.raises(CondenseHostError, match="never materialised"):
        _host(tmp_path).condense_modules(Step(StepKind.CONDENSE_MODULES))

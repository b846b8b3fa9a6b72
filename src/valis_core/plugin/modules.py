"""Installed modules: long-lived lifecycle objects the resident runs and drains first.

A module is a Python distribution exposing an entry point in the group
``valis.modules``. The entry point names a factory called with a ``ModuleContext``; it
returns a lifecycle object with ``async run(*, task_status)`` (started under the
resident's nursery after DNS is served: it reports started when it is up, then runs
until cancelled) and ``async drain()`` (called on shutdown before the edge, the DNS
loops and the fabric stop; the module finishes what it holds, within the resident's
drain bound, after which it is cancelled).

The store head says which modules a node runs: exactly the distributions it pins,
installed by condense into the state directory's ``modules`` directory. Nothing else in
the interpreter's environment is loaded, so a node with no pins runs none. Installed
modules that are not the pinned ones (by name, version and wheel hash, as recorded at
install), a module that cannot be loaded, or one whose object lacks ``run``/``drain``,
stop the boot: a node must not come up missing a module its manifest says it runs.
``start_modules`` is the bring-up stage that loads and starts them, last.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs
import trio

from valis_core.boot import Boot, need
from valis_core.boot import boot_log as log
from valis_core.errors import ValisError
from valis_core.plugin.installed import INSTALLED_RECORD, installed_record, modules_dir
from valis_core.store.manifest import ModulePin

GROUP = "valis.modules"


class ModuleError(ValisError):
    """An installed module that cannot be loaded as a lifecycle object."""


@attrs.frozen
class ModuleContext:
    """What a module is told about the node it runs in."""

    state_dir: Path
    node: str
    generation: int


@runtime_checkable
class Lifecycle(Protocol):
    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...

    async def drain(self) -> None: ...


@attrs.frozen
class LoadedModule:
    name: str
    lifecycle: Lifecycle


def check_installed(directory: Path, pins: Sequence[ModulePin]) -> None:
    """Refuse unless ``directory`` holds exactly the modules ``pins`` names, as recorded
    at install (the resident's check at boot, and condense's before it claims)."""
    record = directory / INSTALLED_RECORD
    try:
        found = record.read_bytes()
    except OSError as exc:
        raise ModuleError(
            f"the store head pins modules but {record} cannot be read ({exc.strerror}); "
            "condense the node again to install them from its private dist"
        ) from exc
    if found != installed_record(pins):
        raise ModuleError(
            f"the modules installed in {directory} are not the ones the store head pins; "
            "condense the node again to install them from its private dist"
        )


def load_modules(
    context: ModuleContext, pins: Sequence[ModulePin]
) -> tuple[LoadedModule, ...]:
    """Instantiate every pinned module's entry points, in entry-point name order."""
    if not pins:
        return ()
    directory = modules_dir(context.state_dir)
    check_installed(directory, pins)
    if str(directory) not in sys.path:
        sys.path.append(str(directory))
    importlib.invalidate_caches()
    points = [
        point
        for dist in importlib.metadata.distributions(path=[str(directory)])
        for point in dist.entry_points
        if point.group == GROUP
    ]
    loaded = []
    for point in sorted(points, key=lambda ep: ep.name):
        try:
            factory: Callable[[ModuleContext], object] = point.load()
            lifecycle = factory(context)
        except Exception as exc:
            raise ModuleError(
                f"module {point.name} ({point.value}) cannot be loaded: {exc}; reinstall it "
                "from the node's private dist or remove it from the manifest"
            ) from exc
        if not isinstance(lifecycle, Lifecycle):
            raise ModuleError(
                f"module {point.name} ({point.value}) gave {type(lifecycle).__name__}, which "
                "has no async run(task_status=...) and drain()"
            )
        loaded.append(LoadedModule(point.name, lifecycle))
    return tuple(loaded)


async def start_modules(boot: Boot) -> Boot:
    manifest = need(boot.manifest)
    context = ModuleContext(
        state_dir=need(boot.state_dir), node=need(boot.config).node_name,
        generation=manifest.generation,
    )
    for module in load_modules(context, manifest.modules):
        await boot.services.start(
            f"module {module.name}", module.lifecycle.run, drain=module.lifecycle.drain
        )
        log.info("module %s running", module.name)
    return boot

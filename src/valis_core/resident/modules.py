"""Installed modules: long-lived lifecycle objects the resident runs and drains first.

A module is a Python distribution exposing an entry point in the group
``valis.modules``. The entry point names a factory called with a ``ModuleContext``; it
returns a lifecycle object with ``async run(*, task_status)`` (started under the
resident's nursery after DNS is served: it reports started when it is up, then runs
until cancelled) and ``async drain()`` (called on shutdown before the edge, the DNS
loops and the fabric stop; the module finishes what it holds, within the resident's
drain bound, after which it is cancelled). A node with no modules installed runs none.

A module that cannot be loaded, or whose object lacks ``run``/``drain``, stops the boot:
a node must not come up missing a module its manifest says it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs
import trio

from valis_core.errors import ValisError

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


def load_modules(context: ModuleContext) -> tuple[LoadedModule, ...]:
    """Instantiate every installed module, in entry-point name order."""
    loaded = []
    for point in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
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

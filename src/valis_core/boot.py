"""The resident's bring-up as its stages see it: the small interface between the stage
table and the rooms whose stages it runs.

``Boot`` is the frozen context a stage reads and returns with its own part added;
``Stage`` is one entry of the table; ``Services`` is where a stage starts its long-lived
tasks (each stoppable on its own) and pushes how to undo itself; ``BringUpError`` is the
one line ``<stage>: <cause>`` a failing stage ends the process with.

Neutral ground, so that nothing goes in a circle: the resident's stage table
(``valis_core.resident.bring_up``) imports each stage's body from the room of the
concept it brings up (``edge.stages``, ``owner.terminus``, ``resident.secondaries``, …),
those rooms import this module, and this module imports neither the table nor the run
loop (``valis_core.resident.run``). The parts' types are named here for the type checker
only, so a module that defines one of them keeps its stage in a sibling module
(``resident.fence_stage`` beside ``resident.fence_watch``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from valis_core.errors import ValisError
from valis_core.fence import FENCED_OUT_EXIT_STATUS, FencedOut

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from valis_core.config_store import ConfigStore
    from valis_core.dns.serve import ServeStats
    from valis_core.dns.serve.limited_udp import LimitedUdpWorkers
    from valis_core.dns.serve.transfer_serve import Transfers
    from valis_core.dns.transfer.notify_send import ChangeWatch
    from valis_core.edge.certificate import CertificateSlot
    from valis_core.edge.stats import EdgeStats
    from valis_core.launch import LaunchRecord
    from valis_core.operator_state.zone_source import PgZoneSource
    from valis_core.reachability import DnsReachability
    from valis_core.resident.descriptors import AdoptedSockets
    from valis_core.resident.fence_watch import FenceWatch
    from valis_core.resident.reload import ZoneFollower
    from valis_core.resident.signing import SigningFollower
    from valis_core.resident.views import NodeViews
    from valis_core.sd_notify import Notifier
    from valis_core.store.manifest import Manifest

#: What bring-up says is logged as the resident's, whichever room a stage lives in.
boot_log = logging.getLogger("valis.resident")

#: Seconds any one long-lived task gets to stop once cancelled.
STOP_BOUND = 5.0
#: Seconds a module gets to drain before it is cancelled.
DRAIN_BOUND = 10.0

Service = Callable[..., Awaitable[Any]]


class BringUpError(ValisError):
    """A stage that failed (at boot or while serving): ``<stage>: <cause>``."""

    def __init__(self, stage: str, cause: str) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(f"{stage}: {cause}")


class FencedOutStop(BringUpError):
    """The instance was fenced out, at boot or while serving: it stops for good, with a
    status its unit does not restart (``FENCED_OUT_EXIT_STATUS``)."""

    exit_status = FENCED_OUT_EXIT_STATUS

    def __init__(self, stage: str, fenced: FencedOut) -> None:
        self.fenced = fenced
        super().__init__(stage, describe(stage, fenced))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _first_failure(exc: BaseException) -> BaseException:
    """The failure to report from a (possibly grouped) exception: a fenced-out verdict
    first (it decides how the process ends), then a stage failure, then any operator
    error, then anything but a cancellation."""
    leaves = list(_leaves(exc))
    for kind in (FencedOutStop, FencedOut, BringUpError, ValisError, Exception):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0] if leaves else exc


def describe(stage: str, exc: BaseException) -> str:
    """One line for ``exc`` under ``stage``, without repeating the stage's name."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        text = f"{exc.strerror}{where}"
    else:
        text = " ".join(str(exc).split())
    if not isinstance(exc, ValisError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    prefix = stage + ": "
    return text[len(prefix) :] if text.startswith(prefix) else text


def as_stage_failure(stage: str, exc: BaseException) -> BringUpError:
    """``exc`` (possibly grouped) as the one failure ``stage`` reports."""
    failure = _first_failure(exc)
    if isinstance(failure, BringUpError):
        return failure
    if isinstance(failure, FencedOut):
        return FencedOutStop(stage, failure)
    return BringUpError(stage, describe(stage, failure))


def fence_final(service: Service) -> Service:
    """``service``, with a ``FencedOut`` it raises reported as the heartbeat reports it:
    the owner terminus and the zone source (on reconnecting) see the same verdict."""

    async def run(task_status: trio.TaskStatus[Any]) -> None:
        try:
            await service(task_status=task_status)
        except FencedOut as exc:
            raise FencedOutStop("fence", exc) from exc

    return run


@attrs.define
class Services:
    """Long-lived tasks in the resident's nursery, each stoppable on its own, with their
    stops pushed on the exit stack (so they run in reverse start order)."""

    nursery: trio.Nursery
    stack: contextlib.AsyncExitStack

    async def start(
        self,
        name: str,
        service: Service,
        *,
        drain: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        scope = trio.CancelScope()
        finished = trio.Event()

        async def runner(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    try:
                        await service(task_status=task_status)
                    except Exception as exc:
                        raise as_stage_failure(name, exc) from exc
                if not scope.cancel_called:
                    raise BringUpError(name, "stopped on its own; it should run until stopped")
            finally:
                finished.set()

        async def stop() -> None:
            with trio.CancelScope(shield=True):
                if drain is not None:
                    with trio.move_on_after(DRAIN_BOUND) as drained:
                        await drain()
                    if drained.cancelled_caught:
                        boot_log.warning("%s did not drain within %.0fs; cancelling it", name,
                                         DRAIN_BOUND)
                scope.cancel()
                with trio.move_on_after(STOP_BOUND) as waited:
                    await finished.wait()
                if waited.cancelled_caught:
                    boot_log.warning("%s did not stop within %.0fs", name, STOP_BOUND)

        value = await self.nursery.start(runner)
        self.stack.push_async_callback(stop)
        return value


_T = TypeVar("_T")


def need(value: _T | None) -> _T:
    """A part of the boot an earlier stage brought up (the table's order guarantees it)."""
    assert value is not None, "a stage ran before the stage that brings up what it needs"
    return value


@attrs.frozen
class Boot:
    """What bring-up has brought up so far. Frozen: each stage returns a new one with its
    part added (``attrs.evolve``), so a stage reads only what the stages before it made."""

    argv: tuple[str, ...]
    environ: Mapping[str, str]
    notifier: Notifier
    services: Services
    record: LaunchRecord | None = None
    adopted: AdoptedSockets | None = None
    reachability: DnsReachability | None = None
    state_dir: Path | None = None
    config: ConfigStore | None = None
    manifest: Manifest | None = None
    identity: Ed25519PrivateKey | None = None
    owner_key: str = ""
    watch: FenceWatch | None = None
    source: PgZoneSource | None = None
    follower: ZoneFollower | None = None
    holder: ChangeWatch | None = None
    signing: SigningFollower | None = None
    stats: ServeStats | None = None
    views: NodeViews | None = None
    transfers: Transfers | None = None
    edge_listener: trio.socket.SocketType | None = None
    certificates: CertificateSlot | None = None
    edge_stats: EdgeStats | None = None
    udp: LimitedUdpWorkers | None = None


Step = Callable[[Boot], Awaitable[Boot]]


def _always(boot: Boot) -> bool:
    return True


@attrs.frozen
class Stage:
    """One named stage: what it brings up and what stops the boot there (the doc's
    words), the step that does it, what its undo stops at teardown, and whether it
    applies to this launch."""

    name: str
    does: str
    fails_when: str
    step: Step
    stops: str | None = None
    applies: Callable[[Boot], bool] = _always

"""The resident's fail-closed bring-up, its serving life, and its teardown.

``run_resident(argv)`` is ``valis --resident``. After reading the launch argv it refuses
to run as root, then brings the node up stage by stage:

1. ``adopt``: ask each inherited descriptor what it is and take it over (binding nothing);
2. ``codec``: the serving stack imports and answers a synthetic query, or the boot stops
   with "serving codec not available";
3. ``config store``: the state directory, and the site facts copied once from the
   environment on the first boot (the store counts afterwards);
4. ``store head``: the store's manifest, written from genesis (generation 0) on the first
   boot; the instance's generation is the manifest's;
5. ``identity``: the owner key, minted on the first boot only;
6. ``operator state``: connect as the run account, seed the fence at genesis, refuse a
   fenced-out generation, commit the first fenced heartbeat; the heartbeat then runs;
7. ``zone index``: every served zone indexed eagerly from the pg-zone-source, which then
   follows changes and swaps the served index (after an outage it re-checks the fence
   before reading anything, and a superseded instance stops as at the heartbeat);
8. ``fabric``: the capability-gated internal endpoint; its anonymous public view must
   answer every served apex SOA before the next stage starts;
9. ``serve DNS``: the UDP and TCP loops over the adopted pair;
10. ``owner terminus``: DNS UPDATE on the adopted owner descriptor, when one was handed
    down (``valis_core.owner.terminus``);
11. ``modules``: installed lifecycle modules;

then ``READY=1``. ``STATUS=`` lines report each stage to the supervisor.

Every stage registers how to undo itself on one ``AsyncExitStack`` and every long-lived
task runs in the resident's nursery under a cancel scope of its own, so unwinding the
stack stops things in reverse bring-up order: modules drain first, then the edge, the
owner terminus, the DNS loops, the fabric, the zone source, the fence connection, and
the adopted listener descriptors last. The same unwinding runs whether the boot failed
at some stage, a long-lived task failed later (a fenced-out heartbeat or owner update
among them), or SIGINT/SIGTERM arrived (``STOPPING=1`` first). Each step of it is
bounded in time. A failure ends the process with one line ``valis: <stage>: <cause>``
and a non-zero status; a signal with status 0.

Nothing of the serving stack is imported before the ``codec`` stage has checked it, so
a build without it fails closed with the codec's own message rather than a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs
import trio

from valis_core.errors import ValisError
from valis_core.fence import FencedOut
from valis_core.identity.custody import keyfile_path, load_or_create_keyfile, public_key_hex
from valis_core.identity.instance import holder_name, instance_token
from valis_core.launch import LaunchRecord, parse_launch_argv
from valis_core.resident.adopt import adopted_dns_reachability
from valis_core.resident.config_store import ConfigStore, open_config_store
from valis_core.resident.descriptors import AdoptedSockets, adopt_descriptors
from valis_core.resident.fence_watch import FenceWatch
from valis_core.resident.modules import ModuleContext, load_modules
from valis_core.resident.sd_notify import Notifier
from valis_core.resident.state_dir import check_state_dir, resolve_state_dir
from valis_core.store.head import materialise_genesis

if TYPE_CHECKING:
    from valis_core.dns.serve import ServeStats
    from valis_core.dns.snapshot import IndexHolder
    from valis_core.resident.fabric import FabricAddress

log = logging.getLogger("valis.resident")

#: Seconds any one long-lived task gets to stop once cancelled.
STOP_BOUND = 5.0
#: Seconds a module gets to drain before it is cancelled.
DRAIN_BOUND = 10.0
LOG_FORMAT = "valis resident: %(message)s"

_Service = Callable[..., Awaitable[Any]]


class BringUpError(ValisError):
    """A stage that failed (at boot or while serving): ``<stage>: <cause>``."""

    def __init__(self, stage: str, cause: str) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(f"{stage}: {cause}")


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _first_failure(exc: BaseException) -> BaseException:
    """The failure to report from a (possibly grouped) exception: a stage failure first,
    then any operator error, then anything but a cancellation."""
    leaves = list(_leaves(exc))
    for kind in (BringUpError, ValisError, Exception):
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


def _as_stage_failure(stage: str, exc: BaseException) -> BringUpError:
    failure = _first_failure(exc)
    if isinstance(failure, BringUpError):
        return failure
    return BringUpError(stage, describe(stage, failure))


@contextlib.contextmanager
def _stage(name: str, notifier: Notifier) -> Iterator[None]:
    notifier.status(f"bring-up: {name}")
    log.debug("stage %s", name)
    try:
        yield
    except BringUpError:
        raise
    except Exception as exc:
        raise _as_stage_failure(name, exc) from exc


@attrs.define
class _Services:
    """Long-lived tasks in the resident's nursery, each stoppable on its own, with their
    stops pushed on the exit stack (so they run in reverse start order)."""

    nursery: trio.Nursery
    stack: contextlib.AsyncExitStack

    async def start(
        self,
        name: str,
        service: _Service,
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
                        raise _as_stage_failure(name, exc) from exc
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
                        log.warning("%s did not drain within %.0fs; cancelling it", name,
                                    DRAIN_BOUND)
                scope.cancel()
                with trio.move_on_after(STOP_BOUND) as waited:
                    await finished.wait()
                if waited.cancelled_caught:
                    log.warning("%s did not stop within %.0fs", name, STOP_BOUND)

        value = await self.nursery.start(runner)
        self.stack.push_async_callback(stop)
        return value


@attrs.define
class _StopRequest:
    """The first SIGINT/SIGTERM, and the bring-up it cancels if it comes early."""

    event: trio.Event = attrs.field(factory=trio.Event)
    signal_name: str | None = None
    bring_up: trio.CancelScope | None = None

    async def watch(self, signals: Any) -> None:
        async for signum in signals:
            if self.signal_name is None:
                self.signal_name = signal.Signals(signum).name
                self.event.set()
                if self.bring_up is not None:
                    self.bring_up.cancel()
            else:
                log.info("already stopping; %s ignored", signal.Signals(signum).name)


@attrs.define
class _Node:
    """What bring-up produced that the serving life needs."""

    zones: tuple[str, ...] = ()
    ready_text: str = ""
    set_ready: Callable[[], None] | None = None


def configure_logging(level: str = "info") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_valis_resident", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._valis_resident = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level.upper())


def run_resident(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """``valis --resident``: bring up, serve until signalled, tear down; the exit status.

    Raises ``ValisError`` (one line ``<stage>: <cause>``) when any stage fails.
    """
    env = dict(os.environ if environ is None else environ)
    record = parse_launch_argv(argv)
    if os.geteuid() == 0:
        raise BringUpError(
            "privilege",
            "the resident refuses to run as root (euid 0); the launcher drops to the run "
            "account (setpriv) before it execs valis",
        )
    configure_logging()
    notifier = Notifier.from_environ(env)
    try:
        trio.run(_resident, record, list(argv), env, notifier)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        failure = exc if isinstance(exc, BringUpError) else _as_stage_failure("resident", exc)
        notifier.notify(STOPPING="1", STATUS=f"failed: {failure}")
        raise failure from None
    return 0


async def _resident(
    record: LaunchRecord, argv: list[str], environ: dict[str, str], notifier: Notifier
) -> None:
    stop = _StopRequest()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop.watch, signals)
            try:
                async with contextlib.AsyncExitStack() as stack:
                    services = _Services(nursery, stack)
                    node = _Node()
                    with trio.CancelScope() as bring_up:
                        stop.bring_up = bring_up
                        await _bring_up(
                            record=record,
                            argv=argv,
                            environ=environ,
                            notifier=notifier,
                            services=services,
                            node=node,
                        )
                        stop.bring_up = None
                    if stop.signal_name is None:
                        assert node.set_ready is not None
                        node.set_ready()
                        notifier.ready(node.ready_text)
                        log.info("ready: %s", node.ready_text)
                        await stop.event.wait()
                    notifier.stopping(f"stopping on {stop.signal_name}")
                    log.info(
                        "stopping on %s: modules drain, then the edge, the owner terminus, DNS, "
                        "the fabric and the listener descriptors close",
                        stop.signal_name,
                    )
                log.info("stopped")
            finally:
                nursery.cancel_scope.cancel()


async def _bring_up(
    *,
    record: LaunchRecord,
    argv: list[str],
    environ: dict[str, str],
    notifier: Notifier,
    services: _Services,
    node: _Node,
) -> None:
    stack = services.stack

    with _stage("adopt", notifier):
        adopted = adopt_descriptors(record)
        stack.callback(_close_listeners, adopted)
        pair = adopted.adoption
        log.info(
            "adopting DNS descriptor pair udp=%s tcp=%s", pair.dns_udp.address,
            pair.dns_tcp.address,
        )
        reachability = adopted_dns_reachability(record, pair)
        if reachability is not None and reachability.problem is not None:
            # Never a refusal (the contract allows the port); said wherever it can be read.
            log.warning("adopt: %s", reachability.problem)
        if pair.owner is not None:
            log.info("adopting owner descriptor %s", pair.owner.address)
        if adopted.edge is not None and pair.edge is not None:
            # Held open and never accepted, its connections would hang; closed, they are
            # refused at once.
            adopted.edge.close()
            log.warning(
                "edge descriptor %s closed: this version has no TLS edge, so connections "
                "to edge-port are refused; remove edge-port from the launcher config",
                pair.edge.address,
            )

    with _stage("codec", notifier):
        # Imported here, not at the top: this is the check that the stack exists.
        from valis_core.dns.selftest import run_selftest

        log.info("codec: %s", run_selftest())

    with _stage("config store", notifier):
        state_dir = resolve_state_dir(argv, environ)
        check_state_dir(state_dir)
        config = open_config_store(state_dir, environ)
        configure_logging(config.log_level)
        _report_config(config)

    with _stage("store head", notifier):
        manifest, written = materialise_genesis(state_dir)
        generation = manifest.generation
        log.info(
            "store head: %s generation %d",
            "genesis manifest written at" if written else "store at", generation,
        )

    with _stage("identity", notifier):
        existed = keyfile_path(state_dir).exists()
        identity = load_or_create_keyfile(state_dir)
        owner_key = public_key_hex(identity)
        log.info("identity: owner public key %s (%s)", owner_key,
                 "loaded" if existed else "minted at genesis")

    with _stage("operator state", notifier):
        watch = FenceWatch(
            config.dsn,
            node=config.node_name,
            holder=holder_name(
                f"{config.node_name}@{config.location}", instance_token(state_dir, generation)
            ),
            generation=generation,
        )
        stack.callback(watch.close)
        fence = await trio.to_thread.run_sync(watch.open)
        log.info(
            "operator state: fence at generation %d held by %s; this instance writes at "
            "generation %d", fence.generation, fence.holder, generation,
        )
        await services.start("fence", watch.run)

    with _stage("zone index", notifier):
        from valis_core.dns.serve import ServeStats
        from valis_core.dns.snapshot import IndexHolder
        from valis_core.operator_state.zone_source import PgZoneSource

        source = PgZoneSource.from_dsn(config.dsn, config.served_zones, standing=watch.standing)
        stack.callback(source.close)
        holder = IndexHolder(await source.load())
        log.info(
            "zone index: %d zone(s), %d records in %.3fs", len(holder.current.zones),
            holder.current.record_count, source.stats.last_load_seconds,
        )

        async def follow(task_status: trio.TaskStatus[None]) -> None:
            await source.run(holder, task_status=task_status)

        await services.start("zone source", _fence_final(follow))
        node.zones = source.zones

    with _stage("fabric", notifier):
        from valis_core.resident.fabric import Fabric
        from valis_core.resident.views import NodeViews

        stats = ServeStats()
        views = NodeViews(
            node=config.node_name,
            location=config.location,
            owner_public_key=owner_key,
            store_generation=generation,
            zones=source.zones,
            holder=holder,
            serve_stats=stats,
            zone_stats=source.stats,
            fence_generation=lambda: watch.fence_generation,
            heartbeats=lambda: watch.beats,
            dns_udp=pair.dns_udp.address,
            dns_tcp=pair.dns_tcp.address,
            dns_reachability=reachability,
        )
        fabric = Fabric(state_dir, views)
        address: FabricAddress = await services.start("fabric", fabric.serve)
        log.info("fabric: listening on %s (token in %s)", address.url, state_dir)
        serials = await _check_public_view(address, fabric.token, source.zones)
        log.info("fabric: the public view answered every served apex SOA (%s)", serials)

    with _stage("serve DNS", notifier):
        await services.start("serve DNS", _dns_service(adopted, holder, stats))
        log.info("serving DNS on udp=%s tcp=%s", pair.dns_udp.address, pair.dns_tcp.address)

    if adopted.owner is not None:
        with _stage("owner terminus", notifier):
            from valis_core.owner.key import derive_owner_tsig
            from valis_core.owner.terminus import OwnerTerminus

            terminus = OwnerTerminus(
                adopted.owner,
                key=derive_owner_tsig(identity),
                dsn=config.dsn,
                standing=watch.standing,
                zones=source.zones,
                holder=holder,
            )
            stack.callback(terminus.close)
            await services.start("owner terminus", _fence_final(terminus.serve))
            views.owner_updates = lambda: (terminus.applied, terminus.refused)
            assert pair.owner is not None
            log.info("owner terminus: accepting TSIG-signed DNS UPDATE on %s (key %s)",
                     pair.owner.address, terminus.key_name)

    with _stage("modules", notifier):
        context = ModuleContext(state_dir=state_dir, node=config.node_name, generation=generation)
        for module in load_modules(context, manifest.modules):
            await services.start(
                f"module {module.name}", module.lifecycle.run, drain=module.lifecycle.drain
            )
            log.info("module %s running", module.name)

    def set_ready() -> None:
        views.ready = True

    node.set_ready = set_ready
    node.ready_text = (
        f"serving {', '.join(source.zones)} on udp={pair.dns_udp.address} "
        f"tcp={pair.dns_tcp.address} at generation {generation}"
    )
    if reachability is not None and reachability.problem is not None:
        node.ready_text += f"; unreachable from outside: {reachability.problem}"


def _report_config(config: ConfigStore) -> None:
    if config.first_boot:
        log.info("config store: first boot; site facts copied into %s", config.path)
    for key in config.ignored:
        log.info(
            "config store: %s in the environment differs from the store; the store counts "
            "(edit %s to change it)", key, config.path,
        )


def _close_listeners(adopted: AdoptedSockets) -> None:
    adopted.close()
    log.info("listener descriptors closed")


def _dns_service(adopted: AdoptedSockets, holder: IndexHolder, stats: ServeStats) -> _Service:
    from valis_core.dns.serve import serve_tcp, serve_udp

    async def serve(task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(serve_udp, adopted.dns_udp, holder, stats=stats))
            nursery.start_soon(partial(serve_tcp, adopted.dns_tcp, holder, stats=stats))
            task_status.started()

    return serve


def _fence_final(service: _Service) -> _Service:
    """``service``, with a ``FencedOut`` it raises reported as the heartbeat reports it:
    the owner terminus and the zone source (on reconnecting) see the same verdict."""

    async def run(task_status: trio.TaskStatus[Any]) -> None:
        try:
            await service(task_status=task_status)
        except FencedOut as exc:
            raise BringUpError("fence", describe("fence", exc)) from exc

    return run


async def _check_public_view(
    address: FabricAddress, token: str, zones: Sequence[str]
) -> str:
    """Ask the fabric's public view for every served apex SOA; raise unless each is
    answered authoritatively. Returns "zone serial N, ..." for the log."""
    from valis_core.resident.fabric import fabric_get

    shown = []
    for zone in zones:
        status, body = await fabric_get(address, token, f"/view/soa?zone={quote(zone)}")
        try:
            document = json.loads(body)
        except ValueError:
            document = {}
        if status != 200 or not isinstance(document, dict) or not document.get("answered"):
            raise BringUpError(
                "fabric",
                f"the public view did not answer the apex SOA of {zone} (HTTP {status}, "
                f"rcode {document.get('rcode') if isinstance(document, dict) else None})",
            )
        shown.append(f"{zone} serial {document.get('serial')}")
    return ", ".join(shown)

"""The resident's fail-closed bring-up, its serving life, and its teardown.

``run_resident(argv)`` is ``valis --resident``. Bring-up is data: ``STAGES`` is the
ordered table of named stages, each an async step over the frozen ``Boot`` context that
returns it with its own part added (and pushes how to undo itself on the resident's exit
stack), run by one loop. The ``STATUS=bring-up: <stage>`` lines, the teardown log line
and the stage table in docs/resident.md are all made from that one table
(``stage_table`` renders the doc's; a test holds the two equal), so adding a stage (the
edge, say) is one entry. Then ``READY=1``.

Every long-lived task runs in the resident's nursery under a cancel scope of its own, so
unwinding the exit stack stops things in reverse bring-up order. The same unwinding runs
whether the boot failed at some stage, a long-lived task failed later (a fenced-out
heartbeat or owner update among them), or SIGINT/SIGTERM arrived (``STOPPING=1``
first). Each step of it is bounded in time. A failure ends the process with one line
``valis: <stage>: <cause>`` and status 1; a signal with status 0. A fenced-out instance
(refused at the fence at boot, or superseded while serving) ends with
``FENCED_OUT_EXIT_STATUS`` instead, which the unit never restarts, after leaving its
verdict in the state directory for ``valis status`` (``resident.fence_verdict``).

Nothing of the serving stack is imported before the ``codec`` stage has checked it, so
a build without it fails closed with the codec's own message rather than a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import attrs
import trio

from valis_core.errors import ValisError
from valis_core.fence import FENCED_OUT_EXIT_STATUS, FencedOut
from valis_core.identity.custody import keyfile_path, load_or_create_keyfile, public_key_hex
from valis_core.identity.instance import holder_name, instance_token
from valis_core.launch import LaunchRecord, parse_launch_argv
from valis_core.resident.adopt import adopted_dns_reachability, format_address
from valis_core.resident.config_store import HOW_TO_CHANGE, ConfigStore, open_config_store
from valis_core.resident.descriptors import AdoptedSockets, adopt_descriptors
from valis_core.resident.fence_verdict import clear_verdict, record_verdict
from valis_core.resident.fence_watch import FenceWatch
from valis_core.resident.log_format import configure_logging, log_format_argument
from valis_core.resident.modules import ModuleContext, load_modules
from valis_core.resident.reload import Reloader, ZoneFollower
from valis_core.resident.sd_notify import Notifier
from valis_core.resident.state_dir import StateDirError, check_state_dir, resolve_state_dir
from valis_core.store.head import materialise_genesis

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from valis_core.dns.serve import ServeStats
    from valis_core.dns.serve.limited_udp import LimitedUdp
    from valis_core.dns.serve.transfer_serve import Transfers
    from valis_core.dns.transfer.notify_send import ChangeWatch
    from valis_core.edge.certificate import CertificateSlot
    from valis_core.edge.stats import EdgeStats
    from valis_core.operator_state.zone_source import PgZoneSource
    from valis_core.reachability import DnsReachability
    from valis_core.resident.fabric import FabricAddress
    from valis_core.resident.signing import SigningFollower
    from valis_core.resident.views import NodeViews
    from valis_core.store.manifest import Manifest

log = logging.getLogger("valis.resident")

#: Seconds any one long-lived task gets to stop once cancelled.
STOP_BOUND = 5.0
#: Seconds a module gets to drain before it is cancelled.
DRAIN_BOUND = 10.0

_Service = Callable[..., Awaitable[Any]]


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


def _as_stage_failure(stage: str, exc: BaseException) -> BringUpError:
    failure = _first_failure(exc)
    if isinstance(failure, BringUpError):
        return failure
    if isinstance(failure, FencedOut):
        return FencedOutStop(stage, failure)
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


def run_resident(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """``valis --resident``: bring up, serve until signalled, tear down; the exit status.

    Raises ``ValisError`` (one line ``<stage>: <cause>``) when any stage fails.
    """
    env = dict(os.environ if environ is None else environ)
    notifier = Notifier.from_environ(env)
    try:
        trio.run(_resident, tuple(argv), env, notifier)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        failure = exc if isinstance(exc, BringUpError) else _as_stage_failure("resident", exc)
        if isinstance(failure, FencedOutStop):
            _leave_verdict(argv, env, failure.fenced)
        notifier.notify(STOPPING="1", STATUS=f"failed: {failure}")
        raise failure from None
    return 0


def _leave_verdict(argv: Sequence[str], environ: Mapping[str, str], fenced: FencedOut) -> None:
    """Leave the fenced-out verdict for ``valis status``; a state directory that cannot
    take it is logged, never a reason to end otherwise."""
    try:
        record_verdict(resolve_state_dir(argv, environ), fenced)
    except (OSError, StateDirError) as exc:
        log.warning("fence: could not leave the fenced-out verdict for valis status: %s", exc)


async def _resident(argv: tuple[str, ...], environ: dict[str, str], notifier: Notifier) -> None:
    stop = _StopRequest()
    with (
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        trio.open_signal_receiver(signal.SIGHUP) as hangups,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop.watch, signals)
            try:
                async with contextlib.AsyncExitStack() as stack:
                    boot = Boot(argv, environ, notifier, _Services(nursery, stack))
                    with trio.CancelScope() as bring_up:
                        stop.bring_up = bring_up
                        boot = await bring_up_stages(boot)
                        stop.bring_up = None
                    if stop.signal_name is None:
                        need(boot.views).ready = True
                        text = ready_text(boot)
                        notifier.ready(text)
                        log.info("ready: %s", text)
                        nursery.start_soon(reloader(boot).watch, hangups)
                        await stop.event.wait()
                    notifier.stopping(f"stopping on {stop.signal_name}")
                    log.info("stopping on %s: %s", stop.signal_name, teardown_order())
                log.info("stopped")
            finally:
                nursery.cancel_scope.cancel()


# -- the stages ------------------------------------------------------------------------


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
    services: _Services
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
    udp: LimitedUdp | None = None


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


async def bring_up_stages(boot: Boot, stages: Sequence[Stage] | None = None) -> Boot:
    """Run every stage that applies, in order, each under its name."""
    for stage in STAGES if stages is None else stages:
        if not stage.applies(boot):
            continue
        with _stage(stage.name, boot.notifier):
            boot = await stage.step(boot)
    return boot


async def _launch_argv(boot: Boot) -> Boot:
    return attrs.evolve(boot, record=parse_launch_argv(boot.argv))


async def _privilege(boot: Boot) -> Boot:
    if os.geteuid() == 0:
        raise BringUpError(
            "privilege",
            "the resident refuses to run as root (euid 0); the launcher drops to the run "
            "account (setpriv) before it execs valis",
        )
    # Until the store is read, the environment's format (the first-boot seed's) stands.
    _log_as(boot, "info", boot.environ.get("VALIS_LOG_FORMAT", "text"))
    return boot


async def _adopt(boot: Boot) -> Boot:
    record = need(boot.record)
    adopted = adopt_descriptors(record)
    boot.services.stack.callback(_close_listeners, adopted)
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
        log.info("adopting owner descriptor %s (the owner terminus: DNS UPDATE goes there)",
                 pair.owner.address)
    else:
        log.info("owner terminus closed (no owner-port in the launcher config): DNS UPDATE "
                 "on the DNS port is answered NOTIMP")
    if pair.edge is not None:
        log.info("adopting edge descriptor %s (served by the edge stage)", pair.edge.address)
    return attrs.evolve(
        boot, adopted=adopted, reachability=reachability, edge_listener=adopted.edge
    )


async def _codec(boot: Boot) -> Boot:
    # Imported here, not at the top: this is the check that the stack exists.
    from valis_core.dns.serve.selftest import run_selftest

    log.info("codec: %s", run_selftest())
    return boot


async def _config_store(boot: Boot) -> Boot:
    state_dir = resolve_state_dir(boot.argv, boot.environ)
    check_state_dir(state_dir)
    config = open_config_store(state_dir, boot.environ)
    _log_as(boot, config.log_level, config.log_format)
    _report_config(config)
    return attrs.evolve(boot, state_dir=state_dir, config=config)


async def _store_head(boot: Boot) -> Boot:
    manifest, written = materialise_genesis(need(boot.state_dir))
    log.info(
        "store head: %s generation %d",
        "genesis manifest written at" if written else "store at", manifest.generation,
    )
    return attrs.evolve(boot, manifest=manifest)


async def _identity(boot: Boot) -> Boot:
    state_dir = need(boot.state_dir)
    existed = keyfile_path(state_dir).exists()
    identity = load_or_create_keyfile(state_dir)
    owner_key = public_key_hex(identity)
    log.info("identity: owner public key %s (%s)", owner_key,
             "loaded" if existed else "minted at genesis")
    return attrs.evolve(boot, identity=identity, owner_key=owner_key)


async def _operator_state(boot: Boot) -> Boot:
    config, state_dir = need(boot.config), need(boot.state_dir)
    generation = need(boot.manifest).generation
    watch = FenceWatch(
        config.dsn,
        node=config.node_name,
        holder=holder_name(
            f"{config.node_name}@{config.location}", instance_token(state_dir, generation)
        ),
        generation=generation,
    )
    boot.services.stack.callback(watch.close)
    fence = await trio.to_thread.run_sync(watch.open)
    clear_verdict(state_dir)
    log.info(
        "operator state: fence at generation %d held by %s; this instance writes at "
        "generation %d", fence.generation, fence.holder, generation,
    )
    await boot.services.start("fence", watch.run)
    return attrs.evolve(boot, watch=watch)


async def _zone_index(boot: Boot) -> Boot:
    from valis_core.dns.serve import ServeStats
    from valis_core.dns.transfer.notify_send import ChangeWatch
    from valis_core.operator_state.zone_source import PgZoneSource

    config, watch = need(boot.config), need(boot.watch)
    source = PgZoneSource.from_dsn(config.dsn, config.served_zones, standing=watch.standing)
    boot.services.stack.callback(source.close)
    holder = ChangeWatch(await source.load())
    log.info(
        "zone index: %d zone(s), %d records in %.3fs", len(holder.current.zones),
        holder.current.record_count, source.stats.last_load_seconds,
    )

    follower = ZoneFollower(source, holder)
    boot.services.stack.callback(follower.close)
    await boot.services.start("zone source", _fence_final(follower.run))

    from valis_core.resident.signing import SigningFollower

    signing = SigningFollower(
        config.dsn, need(boot.state_dir), source.zones, standing=lambda: watch.standing
    )
    boot.services.stack.callback(signing.close)
    await signing.load(holder)
    await boot.services.start("signing", partial(signing.follow, holder))
    return attrs.evolve(
        boot, source=source, follower=follower, holder=holder, signing=signing,
        stats=ServeStats(),
    )


async def _fabric(boot: Boot) -> Boot:
    from valis_core.dns import wire
    from valis_core.resident.fabric import Fabric
    from valis_core.resident.views import NodeViews

    config, source, watch = need(boot.config), need(boot.source), need(boot.watch)
    pair = need(boot.adopted).adoption
    views = NodeViews(
        node=config.node_name,
        location=config.location,
        owner_public_key=boot.owner_key,
        store_generation=need(boot.manifest).generation,
        zones=source.zones,
        holder=need(boot.holder),
        serve_stats=need(boot.stats),
        zone_stats=source.stats,
        fence_generation=lambda: watch.fence_generation,
        heartbeats=lambda: watch.beats,
        failed_heartbeats=lambda: watch.failed_beats,
        dns_udp=pair.dns_udp.address,
        dns_tcp=pair.dns_tcp.address,
        dns_reachability=boot.reachability,
        fence_holder=lambda: None if watch.fence is None else watch.fence.holder,
        database=lambda: (watch.connected, watch.connected_since),
        modules=tuple(f"{pin.name}=={pin.version}" for pin in need(boot.manifest).modules),
    )
    state_dir = need(boot.state_dir)
    fabric = Fabric(state_dir, views)
    address: FabricAddress = await boot.services.start("fabric", fabric.serve)
    log.info("fabric: listening on %s (token in %s)", address.url, state_dir)
    signer = need(boot.holder).signer
    lacking = () if signer is None else tuple(wire.to_text(apex) for apex in signer.lacking)
    serials = await _check_public_view(address, fabric.token, source.zones, lacking)
    log.info("fabric: the public view answered every served apex SOA (%s)", serials)
    return attrs.evolve(boot, views=views)


async def _secondaries(boot: Boot) -> Boot:
    from valis_core.dns.serve.transfer_serve import Transfers
    from valis_core.dns.transfer.notify_send import NotifySender
    from valis_core.resident.journal import JournalLimits, JournalReader
    from valis_core.resident.secondaries import SecondaryReader

    watch, holder, views = need(boot.watch), need(boot.holder), need(boot.views)
    config = need(boot.config)
    reader = SecondaryReader.from_dsn(config.dsn, watch.standing)
    boot.services.stack.callback(reader.close)
    journal = JournalReader.from_dsn(
        config.dsn, JournalLimits.from_facts(config.facts), watch.standing
    )
    boot.services.stack.callback(journal.close)
    listed = await reader.listed_fenced()
    transfers = Transfers(reader.listed, reader.known, journal=journal.difference)
    await boot.services.start("secondaries", reader.follow)
    await boot.services.start("journal pruning", journal.prune_forever)
    source = need(boot.adopted).adoption.dns_udp.host
    sender = NotifySender(source, reader.listed_fenced)
    await boot.services.start("notify", sender.run)
    holder.changed = sender.changed
    views.transfer_stats = transfers.stats
    views.notify_stats = sender.stats
    views.secondaries = lambda: transfers.progress.report(
        reader.known(), holder.versions, time.time()
    )
    log.info("secondaries: %d listed; zone transfers to them, NOTIFY from %s",
             len(listed), source)
    return attrs.evolve(boot, transfers=transfers)


async def _serve_dns(boot: Boot) -> Boot:
    from valis_core.dns.serve.limited_udp import LimitedUdp
    from valis_core.dns.serve.rrl import describe
    from valis_core.operator_state.site_facts import rrl_settings

    adopted = need(boot.adopted)
    settings = rrl_settings(need(boot.config).facts)
    udp = LimitedUdp(adopted.dns_udp, need(boot.holder), settings, stats=need(boot.stats),
                     transfers=need(boot.transfers))
    await boot.services.start(
        "serve DNS", _dns_service(adopted, udp, need(boot.stats), need(boot.transfers))
    )
    need(boot.views).rate_limits = lambda: udp.settings
    log.info("%s", describe(settings))
    pair = adopted.adoption
    log.info("serving DNS on udp=%s tcp=%s", pair.dns_udp.address, pair.dns_tcp.address)
    return attrs.evolve(boot, udp=udp)


async def _owner_terminus(boot: Boot) -> Boot:
    from valis_core.owner.key import derive_owner_tsig
    from valis_core.owner.terminus import OwnerTerminus

    adopted, views = need(boot.adopted), need(boot.views)
    terminus = OwnerTerminus(
        need(adopted.owner),
        key=derive_owner_tsig(need(boot.identity)),
        dsn=need(boot.config).dsn,
        standing=need(boot.watch).standing,
        holder=need(boot.holder),
    )
    boot.services.stack.callback(terminus.close)
    await boot.services.start("owner terminus", _fence_final(terminus.serve))
    views.owner_updates = lambda: (terminus.applied, terminus.refused)
    log.info("owner terminus: accepting TSIG-signed DNS UPDATE on %s (key %s)",
             need(adopted.adoption.owner).address, terminus.key_name)
    return boot


async def _modules(boot: Boot) -> Boot:
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


async def _push(boot: Boot) -> Boot:
    from valis_core.resident.push import mint_listener, push_listener

    record, pair = need(boot.record), need(boot.adopted).adoption
    ports = pair.to_push
    family = socket.AF_INET6 if ":" in pair.dns_tcp.host else socket.AF_INET
    listener = mint_listener(family)
    boot.services.stack.callback(_close_pushed, listener)
    host, port = listener.getsockname()[:2]
    shown = ",".join(str(item) for item in sorted(ports))
    await push_listener(need(record.control_socket), ports, listener)
    log.info(
        "push: fulcrum steers port(s) %s to %s; the edge stage serves it", shown,
        format_address(host, port),
    )
    return attrs.evolve(boot, edge_listener=trio.socket.from_stdlib_socket(listener))


async def _acme(boot: Boot) -> Boot:
    from valis_core.edge.certificate import CertificateSlot
    from valis_core.edge.certificate_keeper import CertificateKeeper

    config, watch, state_dir = need(boot.config), need(boot.watch), need(boot.state_dir)
    slot = boot.certificates if boot.certificates is not None else CertificateSlot()
    keeper = CertificateKeeper(
        state_dir=state_dir,
        domain=need(config.served_domain),
        directory_url=need(config.acme_directory_url),
        dsn=config.dsn,
        standing=lambda: watch.standing,
        served_zones=need(boot.source).zones,
        holder=need(boot.holder),
        slot=slot,
    )
    if await keeper.ensure(wait=not config.edge_on_demand) is None:
        # On demand: the keeper's first attempt is at once; the edge comes up when it lands.
        log.info("acme: no certificate yet; asking %s for one for %s while DNS serves",
                 keeper.directory_url, keeper.domain)
    await boot.services.start("acme", _fence_final(keeper.run))
    need(boot.views).acme = keeper.status
    return attrs.evolve(boot, certificates=slot)


async def _edge(boot: Boot) -> Boot:
    from valis_core.edge.boot_certificate import boot_certificate
    from valis_core.edge.certificate import CertificateSlot
    from valis_core.edge.certificate_files import follow_certificate_files
    from valis_core.edge.server import serve_edge
    from valis_core.edge.stats import EdgeStats
    from valis_core.state_layout import edge_certificate_path

    state_dir, config = need(boot.state_dir), need(boot.config)
    slot = boot.certificates
    if slot is None:
        # No ACME: the state directory decides, as condense decided before its claim.
        slot = CertificateSlot(
            boot_certificate(state_dir, acme=False, on_demand=config.edge_on_demand)
        )
    certificate = slot.current()
    # With ACME, the acme stage ended with a certificate, or with none only on demand.
    stats = EdgeStats()
    await boot.services.start("edge certificate", partial(follow_certificate_files,
                                                           state_dir, slot))
    await boot.services.start(
        "edge", partial(serve_edge, need(boot.edge_listener), slot, need(boot.holder),
                        stats=stats),
    )
    views = need(boot.views)
    views.edge_stats = stats

    def not_after() -> float | None:
        current = slot.current()
        return None if current is None else current.not_after.timestamp()

    views.edge_not_after = not_after
    if certificate is None:
        log.info("edge: no certificate yet (VALIS_EDGE_CERT=on-demand); DNS over HTTPS "
                 "starts when one arrives in %s", edge_certificate_path(state_dir).parent)
    else:
        log.info("edge: serving DNS over HTTPS (HTTP/2, HTTP/1.1) with the certificate "
                 "valid until %s", certificate.not_after.isoformat())
    return attrs.evolve(boot, certificates=slot, edge_stats=stats)


def _has_owner_descriptor(boot: Boot) -> bool:
    return need(boot.adopted).owner is not None


def _has_ports_to_push(boot: Boot) -> bool:
    return bool(need(boot.adopted).adoption.to_push)


def _edge_elected(boot: Boot) -> bool:
    return boot.edge_listener is not None


def _acme_elected(boot: Boot) -> bool:
    return _edge_elected(boot) and need(boot.config).obtains_certificate


STAGES: tuple[Stage, ...] = (
    Stage(
        "launch argv",
        "argv read into a launch record",
        "a known flag is malformed",
        _launch_argv,
    ),
    Stage(
        "privilege",
        "—",
        "the effective uid is 0 (the resident refuses root)",
        _privilege,
    ),
    Stage(
        "adopt",
        "each descriptor is asked what it is (`fstat`, `SO_DOMAIN`, `SO_TYPE`, "
        "`SO_ACCEPTCONN`, `getsockname`); logs `adopting DNS descriptor pair udp=… tcp=…`",
        "a descriptor is not what its flag says; a port in `--ports` has no descriptor "
        "bound to it and there is no `--control-socket` to push to (a privileged one: "
        "\"never binds a privileged port itself\"); no complete UDP+TCP pair",
        _adopt,
        stops="the listener descriptors close",
    ),
    Stage(
        "codec",
        "the serving stack is imported and answers a synthetic query",
        "\"serving codec not available\"",
        _codec,
    ),
    Stage(
        "config store",
        "first boot: the site facts are copied into `config/site-facts.env` (0600); later "
        "boots read it and ignore the environment, logging any value that differs",
        "the state directory is unusable; a partial set on first boot; a damaged store",
        _config_store,
    ),
    Stage(
        "store head",
        "`store/manifest.json`; written from genesis (generation 0) when absent",
        "an unreadable manifest",
        _store_head,
    ),
    Stage(
        "identity",
        "the owner key `owner.key`, minted on the first boot only",
        "a loose or damaged keyfile",
        _identity,
    ),
    Stage(
        "operator state",
        "connects as the run account over the DSN; checks the schema; seeds the fence at "
        "genesis; compares its standing (generation and holder) with the fence's; commits "
        "the first fenced heartbeat",
        "the database is unreachable or unmigrated (`valis db migrate` first); the store "
        "generation is not the fence's, or another instance holds it (**fenced out**: a "
        "restart never takes the fence back)",
        _operator_state,
        stops="the fence connection",
    ),
    Stage(
        "zone index",
        "every served zone indexed from the database, then followed live (LISTEN/NOTIFY)",
        "a served zone is missing or cannot be served",
        _zone_index,
        stops="the zone source",
    ),
    Stage(
        "fabric",
        "the internal endpoint starts; its public view must answer every served apex SOA",
        "the view does not answer",
        _fabric,
        stops="the fabric",
    ),
    Stage(
        "secondaries",
        "the zones' listed secondaries are read (and the fence with them); zone "
        "transfers are offered to them (IXFR from the zones' change journal, which is "
        "pruned while the fence is held) and NOTIFY sent to them on every change",
        "the operator-state database cannot be reached",
        _secondaries,
        stops="NOTIFY and the secondaries' reader",
    ),
    Stage(
        "serve DNS",
        "UDP and TCP loops on the adopted pair",
        "—",
        _serve_dns,
        stops="DNS",
    ),
    Stage(
        "owner terminus",
        "only when `--owner-fd` was handed down: DNS UPDATE on it (see below); logs "
        "`owner terminus: accepting TSIG-signed DNS UPDATE on …`",
        "the operator-state database cannot be reached",
        _owner_terminus,
        stops="the owner terminus",
        applies=_has_owner_descriptor,
    ),
    Stage(
        "push",
        "only when a served port has no inherited descriptor (the edge's, steered by "
        "fulcrum): a listening TCP socket on an ephemeral loopback port (never a "
        "privileged one) is pushed to fulcrum's control socket — ports declared, the "
        "descriptor sent (SCM_RIGHTS), one bounded reply read; the `edge` stage serves "
        "what the steer delivers; logs `push: fulcrum steers port(s) …`",
        "fulcrum refuses the push (its reason is the cause) or does not answer within 10 s; "
        "the control socket cannot be reached",
        _push,
        stops="the pushed edge socket",
        applies=_has_ports_to_push,
    ),
    Stage(
        "acme",
        "only when the edge is elected and `VALIS_SERVED_DOMAIN` and "
        "`VALIS_ACME_DIRECTORY_URL` are set: the certificate in `edge/leaf.crt` is served "
        "while it is valid; without one a certificate is obtained over ACME, the DNS-01 "
        "record written into the served zone as a fenced update and withdrawn after "
        "validation (docs/edge.md); renewed in the background when a third of its "
        "lifetime is left",
        "there is no valid certificate and the CA refuses or fails the order (unless "
        "`VALIS_EDGE_CERT=on-demand`); the node is fenced out; the served domain is in no "
        "served zone",
        _acme,
        stops="certificate renewal",
        applies=_acme_elected,
    ),
    Stage(
        "edge",
        "only when the edge is elected (`--edge-tcp-fd` adopted, or the push done): DNS "
        "over HTTPS (docs/edge.md) on that listener with the certificate in "
        "`edge/leaf.crt` and `edge/leaf.key`, followed for renewals; with "
        "`VALIS_EDGE_CERT=on-demand` and no certificate yet, the listener waits for one; "
        "logs `edge: serving DNS over HTTPS …`",
        "there is no certificate (unless on demand); the certificate and key do not load "
        "as a pair",
        _edge,
        stops="the edge",
        applies=_edge_elected,
    ),
    Stage(
        "modules",
        "the modules the store head pins, installed by condense in `<state-dir>/modules`: "
        "their `valis.modules` entry points are started (nothing else in the environment "
        "is loaded)",
        "the installed modules are not the pinned ones (condense again); a module cannot "
        "be loaded",
        _modules,
        stops="modules drain",
    ),
)
"""The bring-up, in order. docs/resident.md's stage table is ``stage_table()``."""


def stage_table(stages: Sequence[Stage] = STAGES) -> str:
    """The Markdown table of ``stages`` docs/resident.md carries."""
    rows = ["| stage | what happens | fails when |", "|---|---|---|"]
    rows += [f"| `{stage.name}` | {stage.does} | {stage.fails_when} |" for stage in stages]
    return "\n".join(rows) + "\n"


def teardown_order(stages: Sequence[Stage] = STAGES) -> str:
    """What stopping does, in the order it does it (the reverse of bring-up)."""
    steps = [stage.stops for stage in reversed(stages) if stage.stops is not None]
    return ", then ".join(steps)


def ready_text(boot: Boot) -> str:
    pair = need(boot.adopted).adoption
    text = (
        f"serving {', '.join(need(boot.source).zones)} on udp={pair.dns_udp.address} "
        f"tcp={pair.dns_tcp.address} at generation {need(boot.manifest).generation}"
    )
    reachability = boot.reachability
    if reachability is not None and reachability.problem is not None:
        text += f"; unreachable from outside: {reachability.problem}"
    return text


def _log_as(boot: Boot, level: str, fmt: str) -> None:
    """Log at ``level`` in ``fmt``, unless ``--log-format`` on the argv chose the format."""
    configure_logging(level, log_format_argument(boot.argv) or fmt, boot.environ)


def _report_config(config: ConfigStore) -> None:
    if config.first_boot:
        log.info("config store: first boot; site facts copied into %s", config.path)
    for key in config.ignored:
        log.info(
            "config store: %s in the environment differs from the store %s; the store "
            "counts (%s)", key, config.path, HOW_TO_CHANGE,
        )


def reloader(boot: Boot) -> Reloader:
    """What SIGHUP reloads in the node ``boot`` brought up (see ``reload``); a SIGHUP
    that arrives during bring-up waits in the receiver until this is watching."""
    from valis_core.operator_state.zone_source import PgZoneSource

    return Reloader(
        state_dir=need(boot.state_dir),
        config=need(boot.config),
        follower=need(boot.follower),
        views=need(boot.views),
        standing=need(boot.watch).standing,
        configure_logging=partial(_log_as, boot),
        make_source=PgZoneSource.from_dsn,
        rate_limits=need(boot.udp).replace,
        signing=boot.signing,
    )


def _close_pushed(listener: socket.socket) -> None:
    listener.close()
    log.info("pushed edge socket closed; nothing is steered to this resident any more")


def _close_listeners(adopted: AdoptedSockets) -> None:
    adopted.close()
    log.info("listener descriptors closed")


def _dns_service(
    adopted: AdoptedSockets, udp: LimitedUdp, stats: ServeStats, transfers: Transfers
) -> _Service:
    from valis_core.dns.serve import serve_tcp

    async def serve(task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(udp.run)
            nursery.start_soon(partial(
                serve_tcp, adopted.dns_tcp, udp.holder, stats=stats, transfers=transfers
            ))
            task_status.started()

    return serve


def _fence_final(service: _Service) -> _Service:
    """``service``, with a ``FencedOut`` it raises reported as the heartbeat reports it:
    the owner terminus and the zone source (on reconnecting) see the same verdict."""

    async def run(task_status: trio.TaskStatus[Any]) -> None:
        try:
            await service(task_status=task_status)
        except FencedOut as exc:
            raise FencedOutStop("fence", exc) from exc

    return run


async def _check_public_view(
    address: FabricAddress, token: str, zones: Sequence[str], lacking: Sequence[str] = ()
) -> str:
    """Ask the fabric's public view for every served apex SOA; raise unless each is
    answered authoritatively. ``lacking`` names the signed zones whose key this node
    lacks (answered SERVFAIL), so the refusal says why and what restores them. Returns
    "zone serial N, ..." for the log."""
    from valis_core.resident.fabric import fabric_get

    shown = []
    for zone in zones:
        status, body = await fabric_get(address, token, f"/view/soa?zone={quote(zone)}")
        try:
            document = json.loads(body)
        except ValueError:
            document = {}
        if status != 200 or not isinstance(document, dict) or not document.get("answered"):
            why = (
                ": the zone is signed in operator state with a key this node's state "
                "directory does not hold (the dnssec line above names it); condense the node "
                "from the backup set of the node that signed it, which carries its keys"
                if zone.lower() in lacking else ""
            )
            raise BringUpError(
                "fabric",
                f"the public view did not answer the apex SOA of {zone} (HTTP {status}, "
                f"rcode {document.get('rcode') if isinstance(document, dict) else None}){why}",
            )
        shown.append(f"{zone} serial {document.get('serial')}")
    return ", ".join(shown)

"""The resident's run: bring-up, its serving life, and its teardown.

``run_resident(argv)`` is ``valis --resident``. It runs the stage table
(``resident.bring_up.STAGES``) in order, each stage under its name (``STATUS=bring-up:
<stage>``), then says ``READY=1`` and serves until signalled; SIGHUP reloads
(``resident.reload``). Started with ``--successor`` (fulcrum's handover: beside the
resident it takes over from), it withholds its write turn at once and writes nothing
until fulcrum grants it with SIGUSR2, once the other has exited
(``valis_core.fence``, ``TURN_TRANSITIONS``).

Every long-lived task runs in the resident's nursery under a cancel scope of its own, so
unwinding the exit stack stops things in reverse bring-up order. The same unwinding runs
whether the boot failed at some stage, a long-lived task failed later (a fenced-out
heartbeat or owner update among them), or SIGINT/SIGTERM arrived (``STOPPING=1``
first). Each step of it is bounded in time. A failure ends the process with one line
``valis: <stage>: <cause>`` and status 1; a signal with status 0. A fenced-out instance
(refused at the fence at boot, or superseded while serving) ends with
``FENCED_OUT_EXIT_STATUS`` instead, which the unit never restarts, after leaving its
verdict in the state directory for ``valis status`` (``valis_core.fence_verdict``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import attrs
import trio

from valis_core.boot import (
    Boot,
    BringUpError,
    FencedOutStop,
    Services,
    Stage,
    as_stage_failure,
    need,
)
from valis_core.boot import boot_log as log
from valis_core.fence import TURN_GRANT_SIGNAL, FencedOut
from valis_core.fence_verdict import record_verdict
from valis_core.launch import LaunchArgError, parse_launch_argv
from valis_core.operator_state.fence import WRITE_TURN
from valis_core.resident.bring_up import STAGES, teardown_order
from valis_core.resident.process import log_as
from valis_core.resident.reload import Reloader
from valis_core.resident.state_dir import StateDirError, resolve_state_dir
from valis_core.sd_notify import Notifier


@contextlib.contextmanager
def _stage(name: str, notifier: Notifier) -> Iterator[None]:
    notifier.status(f"bring-up: {name}")
    log.debug("stage %s", name)
    try:
        yield
    except BringUpError:
        raise
    except Exception as exc:
        raise as_stage_failure(name, exc) from exc


async def bring_up_stages(boot: Boot, stages: Sequence[Stage] | None = None) -> Boot:
    """Run every stage that applies, in order, each under its name."""
    for stage in STAGES if stages is None else stages:
        if not stage.applies(boot):
            continue
        with _stage(stage.name, boot.notifier):
            boot = await stage.step(boot)
    return boot


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
    _ask_short_slices()  # before any thread: they inherit them
    try:
        trio.run(_resident, tuple(argv), env, notifier)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        failure = exc if isinstance(exc, BringUpError) else as_stage_failure("resident", exc)
        if isinstance(failure, FencedOutStop):
            _leave_verdict(argv, env, failure.fenced)
        notifier.notify(STOPPING="1", STATUS=f"failed: {failure}")
        raise failure from None
    return 0


def _ask_short_slices() -> None:
    """The serving threads' time slices (``fastpath.SERVING_SLICE_NS``), asked for on this
    thread before it starts another. Imported here, not with the run loop, which loads
    nothing of the answering stack: a build without it fails at the codec stage, which
    says so, and asks for nothing here."""
    try:
        from valis_core.dns.answer import fastpath
    except ImportError:
        return
    fastpath.time_slice(fastpath.SERVING_SLICE_NS)


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
        trio.open_signal_receiver(TURN_GRANT_SIGNAL) as grants,
    ):
        if _is_successor(argv):
            WRITE_TURN.withhold()
            log.info("a successor: writing nothing until fulcrum grants the write turn")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop.watch, signals)
            nursery.start_soon(_take_turn, grants)
            try:
                async with contextlib.AsyncExitStack() as stack:
                    boot = Boot(argv, environ, notifier, Services(nursery, stack))
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


async def _take_turn(grants: Any) -> None:
    """Hold the write turn when fulcrum grants it (the resident taken over from is gone)."""
    async for _signum in grants:
        if not WRITE_TURN.may_write():
            WRITE_TURN.grant()
            log.info("write turn granted by fulcrum: this resident writes from now on")


def _is_successor(argv: Sequence[str]) -> bool:
    """Whether the launch argv says ``--successor`` (a malformed argv is not one: the
    ``launch argv`` stage refuses it)."""
    try:
        return parse_launch_argv(argv).successor
    except LaunchArgError:
        return False


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


def reloader(boot: Boot) -> Reloader:
    """What SIGHUP reloads in the node ``boot`` brought up (see ``reload``); a SIGHUP
    that arrives during bring-up waits in the receiver until this is watching."""
    from valis_core.heap import RESIDENT_HEAP
    from valis_core.operator_state.zone_source import PgZoneSource

    return Reloader(
        state_dir=need(boot.state_dir),
        config=need(boot.config),
        follower=need(boot.follower),
        views=need(boot.views),
        standing=need(boot.watch).standing,
        configure_logging=partial(log_as, boot),
        make_source=partial(PgZoneSource.from_dsn, heap=RESIDENT_HEAP),
        rate_limits=need(boot.udp).replace,
        signing=boot.signing,
    )

"""Run the resident as fulcrum's child and stay with it; start it again when it crashes.

SIGTERM and SIGINT sent to fulcrum are forwarded to the resident (the first one starts
the stop bound; later ones are forwarded too). SIGHUP (the unit's ``ExecReload=``) is
passed through to the resident as a reload, never a stop; one that arrives before the
resident runs is dropped (there is nothing yet to reload). A resident still running when
the bound runs out is killed.

A resident that ends without being asked to is started again on the same descriptors
when a ``RespawnPolicy`` is given (``fulcrum.respawn``: bounded restarts in a row with
backoff; never after a fenced-out exit or an exit with status 0). ``on_respawn`` hears of
each restart before its delay (fulcrum logs it and tells systemd in ``STATUS=``). When no
restart follows, the last ending is reported with its status, which becomes fulcrum's
own: a fenced-out resident's ``FENCED_OUT_EXIT_STATUS`` reaches systemd unchanged, so the
unit's ``RestartPreventExitStatus=`` keeps it stopped. Either way fulcrum's caller gets a
``ResidentExit`` and tears the unit down. A stop asked for while a restart waits out its
delay starts nothing more and is a stop carried out.

A stop signal that arrives while the unit is still being prepared is caught by a
``StopLatch`` rather than killing fulcrum half way; the resident is then never started
and the preparation is undone.
"""
from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import FrameType, TracebackType

import attrs
import trio

from fulcrum.errors import LauncherError
from fulcrum.notify_relay import NotifyRelay
from fulcrum.respawn import GiveUp, RespawnPolicy, Restart
from valis_core.clock import trio_now
from valis_core.fence import FENCED_OUT_EXIT_STATUS, TURN_GRANT_SIGNAL

log = logging.getLogger(__name__)

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNAL = signal.SIGHUP
#: How long fulcrum waits for the resident to die after SIGKILL before giving up on it.
REAP_TIMEOUT = 10.0


@attrs.frozen
class ResidentExit:
    """How the resident ended."""

    #: ``subprocess`` convention: the exit status, or minus the signal that killed it
    returncode: int
    #: the stop signal fulcrum forwarded, if a stop was asked for
    stop_signal: int | None = None
    #: fulcrum had to SIGKILL it when the stop bound ran out
    killed: bool = False
    #: the stop came while a restart waited out its delay: nothing was running
    between_runs: bool = False
    #: how many times fulcrum had started it again before this ending
    restarts: int = 0
    #: why fulcrum did not start it again after all its restarts in a row
    gave_up: str | None = None

    @property
    def exit_status(self) -> int:
        """fulcrum's own exit status: 0 for a stop carried out, else the resident's.

        A resident that dies of the very signal it was asked to stop with has stopped
        as asked (systemd counts SIGTERM the same way); a signal death is ``128 + n``.
        """
        rc = self.returncode
        if self.killed:
            return 128 + signal.SIGKILL
        if self.between_runs:
            return 0
        if self.stop_signal is not None and rc in (0, -self.stop_signal):
            return 0
        return rc if rc >= 0 else 128 - rc

    def describe(self) -> str:
        rc = self.returncode
        how = f"exited with status {rc}" if rc >= 0 else f"was killed by {_signame(-rc)}"
        if self.between_runs:
            return (f"{_signame(self.stop_signal)} came while the resident was to be "
                    f"started again (its last run {how}): none started")
        if self.gave_up is not None:
            return f"resident {how} without being asked to stop; not started again: {self.gave_up}"
        if self.killed:
            return f"resident ignored {_signame(self.stop_signal)} past the stop bound and {how}"
        if self.stop_signal is not None:
            return f"resident stopped on {_signame(self.stop_signal)}: it {how}"
        if rc == FENCED_OUT_EXIT_STATUS:
            return (f"resident {how}: it was fenced out (another instance holds the fence), "
                    "so fulcrum exits with the same status and the unit is not restarted")
        return f"resident {how} without being asked to stop"


class StopLatch:
    """Holds the first SIGTERM/SIGINT that arrives while it is installed."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[signal.Signals, object] = {}

    def _catch(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None and signum != RELOAD_SIGNAL:
            self.received = signum

    def __enter__(self) -> StopLatch:
        for signum in (*STOP_SIGNALS, RELOAD_SIGNAL):
            self._previous[signum] = signal.signal(signum, self._catch)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


@attrs.frozen
class Handover:
    """What fulcrum needs to start a successor beside the serving resident."""

    #: the successor's argv (the resident's, with ``--successor``)
    argv: Sequence[str]
    #: routes each resident's sd_notify datagrams (the successor's READY=1 is awaited)
    relay: NotifyRelay
    #: serves handover requests, given the function that carries one out
    serve: Callable[[Callable[[], Awaitable[str]]], Awaitable[None]]
    #: how long the successor gets to say READY=1
    ready_timeout: float = 90.0


class HandoverFailed(LauncherError):
    """The successor did not come up (the serving resident keeps serving), or the unit
    could not hand over at all; the message says why."""


def run_resident(
    argv: Sequence[str],
    pass_fds: Sequence[int],
    *,
    stop_timeout: float,
    latch: StopLatch,
    on_spawn: Callable[[int], None] = lambda _pid: None,
    beside: Callable[[], Awaitable[None]] | None = None,
    respawn: RespawnPolicy | None = None,
    on_respawn: Callable[[ResidentExit, Restart], None] = lambda _ended, _restart: None,
    handover: Handover | None = None,
) -> ResidentExit | None:
    """Start ``argv`` handing down ``pass_fds`` and supervise it to the end.

    Returns ``None`` when a stop was asked for before the resident could start.
    ``on_spawn`` gets each resident's pid once it runs; ``beside`` runs for as long as a
    resident does or is to be started again (the control socket's server) and is
    cancelled at the end. With ``respawn``, a resident that ends unasked is started
    again as the policy says, ``on_respawn`` told first; without it, never. With
    ``handover``, its ``serve`` takes requests to hand the serving resident over to a
    successor (``Residents.hand_over``).
    """
    residents = Residents(list(argv), tuple(pass_fds), stop_timeout, on_spawn, handover)
    return trio.run(residents.supervise, latch, beside, respawn, on_respawn)


@attrs.define
class _Stop:
    signal: int | None = None
    killed: bool = False
    asked: trio.Event = attrs.Factory(trio.Event)


class Residents:
    """The serving resident (none while a restart waits out its delay) and, during a
    handover, its successor.

    A handover (``hand_over``): the successor is started on the same descriptors with
    ``--successor``, beside the serving resident, which keeps answering; fulcrum waits
    for the successor's ``READY=1`` (it came up: fenced, its zones loaded, its public
    view checked, serving). If it does not say so in time, or exits, it is stopped and
    the serving resident goes on as if nothing happened: the handover failed, and why.
    Otherwise the serving resident is told to stop (SIGTERM: it stops reading, drains
    and exits, its ``STOPPING=1`` kept from systemd), and only once it has exited is the
    successor granted the write turn (``TURN_GRANT_SIGNAL``) and made the serving one.
    """

    def __init__(self, argv: list[str], pass_fds: tuple[int, ...], stop_timeout: float,
                 on_spawn: Callable[[int], None], handover: Handover | None) -> None:
        self.argv, self.pass_fds, self.stop_timeout = argv, pass_fds, stop_timeout
        self.on_spawn, self.handover = on_spawn, handover
        self.serving: trio.Process | None = None
        self.successor: trio.Process | None = None
        #: set while the serving resident is being stopped for a handover; set when the
        #: successor serves in its place
        self.handing_over: trio.Event | None = None
        self.stop = _Stop()
        self._one_at_a_time = trio.Lock()

    def live(self) -> list[trio.Process]:
        return [process for process in (self.serving, self.successor)
                if process is not None and process.returncode is None]

    async def _spawn(self, argv: list[str] | Sequence[str]) -> trio.Process:
        process = await trio.lowlevel.open_process(
            list(argv), pass_fds=self.pass_fds, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        if self.stop.signal is not None:  # asked for while it was being started
            process.send_signal(self.stop.signal)
        return process

    async def supervise(
        self,
        latch: StopLatch,
        beside: Callable[[], Awaitable[None]] | None,
        respawn: RespawnPolicy | None,
        on_respawn: Callable[[ResidentExit, Restart], None],
    ) -> ResidentExit | None:
        with trio.open_signal_receiver(*STOP_SIGNALS, RELOAD_SIGNAL) as signals:
            if latch.received is not None:
                return None
            ended: ResidentExit | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._relay_signals, signals, nursery.cancel_scope)
                if beside is not None:
                    nursery.start_soon(beside)
                if self.handover is not None:
                    nursery.start_soon(self.handover.relay.run)
                    nursery.start_soon(self.handover.serve, self.hand_over)
                ended = await self._keep_running(respawn, on_respawn)
                nursery.cancel_scope.cancel()
            if ended is None or self.live():
                # not reaped even after SIGKILL; teardown evicts it
                return ResidentExit(-signal.SIGKILL, self.stop.signal, killed=True)
            return ended

    async def _keep_running(
        self,
        respawn: RespawnPolicy | None,
        on_respawn: Callable[[ResidentExit, Restart], None],
    ) -> ResidentExit:
        """Run the resident, follow it through handovers, and start it again after each
        unasked ending the policy restarts."""
        failures = restarts = 0
        stop = self.stop
        while True:
            process = self.serving = await self._spawn(self.argv)
            self._serve_from(process)
            started = trio_now()
            while True:
                await process.wait()
                handing_over = self.handing_over
                if handing_over is None:
                    break
                await handing_over.wait()  # the successor serves in its place now
                assert self.serving is not None
                process, started, failures = self.serving, trio_now(), 0
            self.serving = None
            assert process.returncode is not None
            ended = ResidentExit(process.returncode, stop.signal, stop.killed, restarts=restarts)
            if stop.signal is not None or respawn is None:
                return ended
            verdict = respawn.after_exit(ended.returncode, trio_now() - started,
                                         failures)
            if isinstance(verdict, GiveUp):
                return attrs.evolve(ended,
                                    gave_up=verdict.reason if verdict.budget_spent else None)
            on_respawn(ended, verdict)
            failures, restarts = verdict.failures, restarts + 1
            with trio.move_on_after(verdict.delay):
                await stop.asked.wait()
            if stop.signal is not None:
                return attrs.evolve(ended, stop_signal=stop.signal, between_runs=True)

    def _serve_from(self, process: trio.Process) -> None:
        if self.handover is not None:
            self.handover.relay.serve_from(process.pid)
        self.on_spawn(process.pid)

    async def hand_over(self) -> str:
        """Hand the serving resident over to a successor; what happened, or
        ``HandoverFailed`` saying why it did not (the serving one still serves)."""
        assert self.handover is not None
        async with self._one_at_a_time:
            old = self.serving
            if self.stop.signal is not None:
                raise HandoverFailed("the unit is stopping; nothing to hand over")
            if old is None or old.returncode is not None:
                raise HandoverFailed("no resident is serving (one is being restarted after "
                                     "a crash); try again once the unit is ready")
            new = self.successor = await self._spawn(self.handover.argv)
            heard = self.handover.relay.watch(new.pid)
            log.info("handover: successor running as pid %d beside pid %d", new.pid, old.pid)
            if not await _came_up(new, heard.ready, self.handover.ready_timeout):
                how = (f"it {_how(new.returncode)}" if new.returncode is not None
                       else "it did not say READY=1")
                status = heard.fields.get("STATUS", "")
                await self._stop(new)
                self.successor = None
                self.handover.relay.forget(new.pid)
                said = f" (its last status: {status})" if status else ""
                raise HandoverFailed(
                    f"the new resident (pid {new.pid}) did not come up within "
                    f"{self.handover.ready_timeout:g} s: {how}{said}; pid {old.pid} goes on "
                    "serving, unchanged")
            self.handing_over = trio.Event()
            self.handover.relay.forget(old.pid)
            log.info("handover: pid %d is ready; pid %d stops reading, drains and exits",
                     new.pid, old.pid)
            await self._stop(old)
            self.serving, self.successor = new, None
            handing_over, self.handing_over = self.handing_over, None
            self._serve_from(new)
            if new.returncode is None and old.returncode is not None:
                new.send_signal(TURN_GRANT_SIGNAL)
            handing_over.set()
            return (f"handed over: pid {new.pid} serves and writes; pid {old.pid} "
                    f"{_how(old.returncode)} after draining")

    async def _stop(self, process: trio.Process) -> None:
        """SIGTERM ``process``, and SIGKILL it past the stop bound."""
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        with trio.move_on_after(self.stop_timeout):
            await process.wait()
            return
        process.kill()
        with trio.move_on_after(REAP_TIMEOUT):
            await process.wait()

    async def _relay_signals(self, signals: AsyncIterator[int], give_up: trio.CancelScope) -> None:
        stop = self.stop
        async with trio.open_nursery() as nursery:
            async for signum in signals:
                if signum == RELOAD_SIGNAL:
                    if self.serving is not None and self.serving.returncode is None:
                        self.serving.send_signal(signum)
                    continue
                for process in self.live():
                    process.send_signal(signum)
                if stop.signal is None:
                    stop.signal = signum
                    stop.asked.set()
                    nursery.start_soon(self._kill_after, give_up)

    async def _kill_after(self, give_up: trio.CancelScope) -> None:
        """Kill whatever resident still runs ``stop_timeout`` after the stop was asked for
        (supervision ends, cancelling this, as soon as none runs)."""
        await trio.sleep(self.stop_timeout)
        left = self.live()
        if not left:
            return
        self.stop.killed = True
        for process in left:
            process.kill()
        with trio.move_on_after(REAP_TIMEOUT):
            for process in left:
                await process.wait()
            return
        give_up.cancel()


async def _came_up(process: trio.Process, ready: trio.Event, timeout: float) -> bool:
    """Whether ``process`` said READY=1 within ``timeout`` s and still runs."""
    with trio.move_on_after(timeout):
        async with trio.open_nursery() as race:

            async def first(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                race.cancel_scope.cancel()

            race.start_soon(first, ready.wait)
            race.start_soon(first, process.wait)
    return ready.is_set() and process.returncode is None


def _how(returncode: int | None) -> str:
    if returncode is None:
        return "still runs"
    return f"exited with status {returncode}" if returncode >= 0 else \
        f"was killed by {_signame(-returncode)}"


def _signame(signum: int | None) -> str:
    if signum is None:
        return "no signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"

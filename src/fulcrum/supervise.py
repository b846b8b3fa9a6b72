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

import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from types import FrameType, TracebackType

import attrs
import trio

from fulcrum.respawn import GiveUp, RespawnPolicy, Restart
from valis_core.fence import FENCED_OUT_EXIT_STATUS

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
) -> ResidentExit | None:
    """Start ``argv`` handing down ``pass_fds`` and supervise it to the end.

    Returns ``None`` when a stop was asked for before the resident could start.
    ``on_spawn`` gets each resident's pid once it runs; ``beside`` runs for as long as a
    resident does or is to be started again (the control socket's server) and is
    cancelled at the end. With ``respawn``, a resident that ends unasked is started
    again as the policy says, ``on_respawn`` told first; without it, never.
    """
    supervise = partial(_supervise, beside=beside, respawn=respawn, on_respawn=on_respawn)
    return trio.run(supervise, list(argv), tuple(pass_fds), stop_timeout, latch, on_spawn)


@attrs.define
class _Stop:
    signal: int | None = None
    killed: bool = False
    asked: trio.Event = attrs.Factory(trio.Event)


@attrs.define
class _Current:
    """The resident running now, if any (none while a restart waits out its delay)."""

    process: trio.Process | None = None


async def _supervise(
    argv: list[str],
    pass_fds: tuple[int, ...],
    stop_timeout: float,
    latch: StopLatch,
    on_spawn: Callable[[int], None],
    *,
    beside: Callable[[], Awaitable[None]] | None = None,
    respawn: RespawnPolicy | None = None,
    on_respawn: Callable[[ResidentExit, Restart], None],
) -> ResidentExit | None:
    with trio.open_signal_receiver(*STOP_SIGNALS, RELOAD_SIGNAL) as signals:
        if latch.received is not None:
            return None
        stop = _Stop()
        current = _Current()
        ended: ResidentExit | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_relay, signals, current, stop, stop_timeout, nursery.cancel_scope)
            if beside is not None:
                nursery.start_soon(beside)
            ended = await _keep_running(argv, pass_fds, on_spawn, current=current, stop=stop,
                                        respawn=respawn, on_respawn=on_respawn)
            nursery.cancel_scope.cancel()
        process = current.process
        if ended is None or (process is not None and process.returncode is None):
            # not reaped even after SIGKILL; teardown evicts it
            return ResidentExit(-signal.SIGKILL, stop.signal, killed=True)
        return ended


async def _keep_running(
    argv: list[str],
    pass_fds: tuple[int, ...],
    on_spawn: Callable[[int], None],
    *,
    current: _Current,
    stop: _Stop,
    respawn: RespawnPolicy | None,
    on_respawn: Callable[[ResidentExit, Restart], None],
) -> ResidentExit:
    """Run the resident, and again after each unasked ending the policy restarts."""
    failures = restarts = 0
    while True:
        process = await trio.lowlevel.open_process(
            argv, pass_fds=pass_fds, stdin=subprocess.DEVNULL, start_new_session=True
        )
        current.process = process
        if stop.signal is not None:  # asked for while it was being started
            process.send_signal(stop.signal)
        on_spawn(process.pid)
        started = trio.current_time()
        await process.wait()
        current.process = None
        assert process.returncode is not None
        ended = ResidentExit(process.returncode, stop.signal, stop.killed, restarts=restarts)
        if stop.signal is not None or respawn is None:
            return ended
        verdict = respawn.after_exit(ended.returncode, trio.current_time() - started, failures)
        if isinstance(verdict, GiveUp):
            return attrs.evolve(ended, gave_up=verdict.reason if verdict.budget_spent else None)
        on_respawn(ended, verdict)
        failures, restarts = verdict.failures, restarts + 1
        with trio.move_on_after(verdict.delay):
            await stop.asked.wait()
        if stop.signal is not None:
            return attrs.evolve(ended, stop_signal=stop.signal, between_runs=True)


async def _relay(
    signals: AsyncIterator[int],
    current: _Current,
    stop: _Stop,
    stop_timeout: float,
    give_up: trio.CancelScope,
) -> None:
    async with trio.open_nursery() as nursery:
        async for signum in signals:
            process = current.process
            if process is not None and process.returncode is None:
                process.send_signal(signum)
            if signum == RELOAD_SIGNAL:
                continue
            if stop.signal is None:
                stop.signal = signum
                stop.asked.set()
                nursery.start_soon(_kill_after, current, stop, stop_timeout, give_up)


async def _kill_after(
    current: _Current, stop: _Stop, stop_timeout: float, give_up: trio.CancelScope
) -> None:
    """Kill whatever resident still runs ``stop_timeout`` after the stop was asked for
    (supervision ends, cancelling this, as soon as none runs)."""
    await trio.sleep(stop_timeout)
    process = current.process
    if process is None or process.returncode is not None:
        return
    stop.killed = True
    process.kill()
    with trio.move_on_after(REAP_TIMEOUT):
        await process.wait()
        return
    give_up.cancel()


def _signame(signum: int | None) -> str:
    if signum is None:
        return "no signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"

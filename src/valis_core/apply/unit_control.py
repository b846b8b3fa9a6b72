"""Serving-unit control: restart the unit and read back whether it came up.

``apply_delivery`` drives a unit only through ``UnitController``, so the same staging and
roll-back code runs under systemd (``SystemdUnitController``) and on hosts or tests
without systemd as PID 1 (``ProcessUnitController``, which supervises the command
itself and is its own ``NOTIFY_SOCKET`` listener).

"Came up" means what systemd means by it for a ``Type=notify`` unit: the process said
``READY=1`` over the sd_notify datagram protocol. A process that is merely alive has not
come up.

A ``ProcessUnitController`` given a ``record_dir`` is the one supervisor of its command
(``valis_core.apply.unit_record``): it takes the command's supervisor lock when made,
records every unit it starts, and its first start stops a unit a lost supervisor of the
same command recorded and left running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

from valis_core.apply.unit_record import (
    UnitRecord,
    ensure_record_dir,
    read_record,
    record_of,
    stop_recorded,
    unit_key,
    write_record,
)
from valis_core.clock import Clock, monotonic
from valis_core.errors import ValisError
from valis_core.life_lock import HeldLock, LockHeld, hold

NOTIFY_DATAGRAM_MAX = 4096
_POLL_INTERVAL = 0.1


class UnitControlError(ValisError):
    """The unit controller could not do what was asked of it."""


class UnitController(Protocol):
    """Restarts one serving unit and reports whether it is up."""

    def restart(self) -> None:
        """Stop the unit if it runs, then start it (from whatever ``current`` points at)."""

    def wait_up(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the unit to come up; whether it did."""

    def is_up(self) -> bool:
        """Whether the unit is up now."""

    def stop(self) -> None:
        """Stop the unit."""


def parse_notify(datagram: bytes) -> dict[str, str]:
    """The ``KEY=VALUE`` assignments of one sd_notify datagram (malformed lines skipped)."""
    fields: dict[str, str] = {}
    for line in datagram.decode("utf-8", errors="replace").split("\n"):
        key, sep, value = line.partition("=")
        if sep and key:
            fields[key] = value
    return fields


class SystemdUnitController:
    """A unit run by systemd, driven through ``systemctl``.

    ``systemctl restart`` of a ``Type=notify`` unit returns once the unit said READY or
    failed; ``wait_up`` then reads ``ActiveState`` until it is settled.
    """

    def __init__(
        self, unit: str, *, systemctl: str = "systemctl", ticks: Clock = monotonic
    ) -> None:
        self.unit = unit
        self.systemctl = systemctl
        self._ticks = ticks

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.systemctl, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as exc:
            raise UnitControlError(
                f"unit {self.unit}: cannot run {self.systemctl}: {exc.strerror or exc}; "
                "use --supervise on a host without systemd"
            ) from exc

    def restart(self) -> None:
        # Apply switched ``current``: the unit file systemd loaded may be another
        # version's, and a version that failed before may have spent the unit's start
        # limit (systemd then refuses every start, the switch back's included). An apply
        # is the operator asking for this start, as daemon-reload and reset-failed would.
        self._run("daemon-reload")
        self._run("reset-failed", self.unit)
        # A failed start is not an error here: wait_up reads the state it left behind.
        self._run("restart", self.unit)

    def _property(self, name: str) -> str:
        done = self._run("show", f"--property={name}", "--value", self.unit)
        return done.stdout.strip()

    def active_state(self) -> str:
        return self._property("ActiveState")

    def wait_up(self, timeout: float) -> bool:
        deadline = self._ticks() + timeout
        while True:
            state = self.active_state()
            if state == "active":
                return True
            if state in ("failed", "inactive") or self._ticks() >= deadline:
                return False
            # Exited before READY and waiting to be restarted (Restart=on-failure): it did
            # not come up, as for ProcessUnitController; systemd's retries are not awaited.
            if state == "activating" and self._property("SubState") == "auto-restart":
                return False
            time.sleep(_POLL_INTERVAL)

    def is_up(self) -> bool:
        return self._run("is-active", "--quiet", self.unit).returncode == 0

    def stop(self) -> None:
        self._run("stop", self.unit)

    def hand_over(self) -> None:
        """``systemctl reload``: the unit hands over to a new resident (fulcrum's
        handover); ``UnitControlError`` with fulcrum's reason when it did not."""
        self._run("daemon-reload")
        done = self._run("reload", self.unit)
        if done.returncode == 0:
            return
        journal = self._journal()
        said = [line for line in journal.splitlines() if "handover failed" in line]
        why = said[-1] if said else " ".join(done.stderr.split()) or "no reason given"
        raise UnitControlError(
            f"systemctl reload {self.unit} failed: {why} (journalctl -u {self.unit})")

    def _journal(self) -> str:
        try:
            done = subprocess.run(
                ["journalctl", "--no-pager", "-o", "cat", "-n", "200", "-u", self.unit],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
            )
        except OSError:
            return ""
        return done.stdout


class ProcessUnitController:
    """A unit supervised directly: this object starts the command and listens for READY.

    The command gets ``NOTIFY_SOCKET`` naming a datagram socket in a private (0700)
    directory this controller owns, so any process of the unit may notify, as under
    ``NotifyAccess=all``. Stopping sends SIGTERM, waits ``stop_timeout``, then SIGKILL.
    Use as a context manager, or call ``close()``, to stop the unit and remove the socket.

    With ``record_dir`` the controller is the command's one supervisor: another live
    supervisor of it is refused here, naming its pid; the unit each ``restart`` starts is
    recorded there, and the first ``restart`` stops a unit a lost supervisor recorded.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stop_timeout: float = 10.0,
        record_dir: Path | None = None,
        ticks: Clock = monotonic,
    ) -> None:
        if not command:
            raise UnitControlError("unit command is empty; name the program to supervise")
        self.command = tuple(command)
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.stop_timeout = stop_timeout
        self._ticks = ticks
        self._lock: HeldLock | None = None
        self.record_path: Path | None = None
        self._recorded: UnitRecord | None = None
        """A unit an earlier supervisor recorded; the first start stops it."""
        if record_dir is not None:
            self._lock = self._take_supervision(record_dir)
        try:
            self._dir = tempfile.mkdtemp(prefix="valis-notify-")
        except BaseException:
            self._release()
            raise
        self.notify_path = os.path.join(self._dir, "notify")
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(self.notify_path)
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = False
        self.status: str | None = None
        """The last ``STATUS=`` the unit sent."""

    def __enter__(self) -> ProcessUnitController:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _take_supervision(self, record_dir: Path) -> HeldLock:
        ensure_record_dir(record_dir)
        key = unit_key(self.command)
        lock_path = record_dir / f"{key}.lock"
        try:
            lock = hold(lock_path)
        except LockHeld as held:
            who = f"pid {held.holder}" if held.holder else "another process"
            raise UnitControlError(
                f"unit {' '.join(self.command)} is already supervised by {who} (it holds "
                f"{lock_path}); one supervisor per unit: stop that one first (SIGTERM or "
                "SIGHUP stops it and its unit)"
            ) from None
        except OSError as exc:
            raise UnitControlError(
                f"cannot take the supervisor lock {lock_path}: {exc.strerror or exc}"
            ) from None
        self.record_path = record_dir / f"{key}.json"
        try:
            self._recorded = read_record(self.record_path)
        except BaseException:
            lock.release()
            raise
        return lock

    def _stop_recorded(self) -> None:
        recorded = self._recorded
        if recorded is None:
            return
        stop_recorded(recorded, self.stop_timeout)
        self._recorded = None
        self._forget()

    def _forget(self) -> None:
        """Remove this supervisor's record (only when it names no earlier unit)."""
        if self.record_path is not None and self._recorded is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.record_path)

    def restart(self) -> None:
        self.stop()
        self._stop_recorded()
        self._drain()
        self._ready = False
        self.status = None
        try:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                env={**self.env, "NOTIFY_SOCKET": self.notify_path},
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            self._process = None
            raise UnitControlError(
                f"unit {self.command[0]}: cannot start: {exc.strerror or exc}"
            ) from exc
        if self.record_path is not None:
            record = record_of(self._process.pid, self.command)
            if record is not None:
                write_record(self.record_path, record)

    def wait_up(self, timeout: float) -> bool:
        deadline = self._ticks() + timeout
        while not self._ready:
            process = self._process
            if process is None:
                return False
            remaining = deadline - self._ticks()
            if remaining <= 0:
                return False
            self._socket.settimeout(min(remaining, _POLL_INTERVAL))
            try:
                self._take(self._socket.recv(NOTIFY_DATAGRAM_MAX))
            except TimeoutError:
                if process.poll() is not None:
                    self._drain()  # it may have said READY=1 just before exiting
                    return False
        return self.is_up()

    def is_up(self) -> bool:
        process = self._process
        return self._ready and process is not None and process.poll() is None

    def wait_exit(self, timeout: float | None = None) -> int | None:
        """Wait for the unit to exit by itself; its exit status (None if none runs)."""
        process = self._process
        if process is None:
            return None
        return process.wait(timeout)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the unit's process group."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signum)

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        self._ready = False
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # Whatever the unit left in its process group goes with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        self._forget()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self._socket.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _take(self, datagram: bytes) -> None:
        fields = parse_notify(datagram)
        if "STATUS" in fields:
            self.status = fields["STATUS"]
        if fields.get("READY") == "1":
            self._ready = True

    def _drain(self) -> None:
        self._socket.setblocking(False)
        try:
            while True:
                self._take(self._socket.recv(NOTIFY_DATAGRAM_MAX))
        except BlockingIOError:
            pass
        finally:
            self._socket.setblocking(True)

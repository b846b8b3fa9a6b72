"""``valis stop``: stop the node's unit and its control socket unit together, so it stays
down.

``systemctl stop fulcrum-valis.service`` alone leaves ``fulcrum-valis-control.socket``
listening (systemctl warns that the service "can still be activated"): a connection to
it, which only the run account can make, would start the service again by socket
activation. ``valis stop`` stops both in one systemctl transaction, then checks that
neither is still active. ``--disable`` also disables both (``systemctl disable --now``),
so a reboot does not start the node either: what the evacuation runbook does on the old
host. Start the node again with ``systemctl start fulcrum-valis.service``: its
``Sockets=`` brings the socket up first (``systemctl enable`` both again after
``--disable``). Run as root on the node. On a host without systemd as PID 1 the node runs
under ``valis condense --unit-command`` or ``valis apply --supervise``: stop that
supervisor (SIGTERM), which stops the unit.
"""

from __future__ import annotations

import argparse
import os
import subprocess

import attrs

from valis_core.errors import ValisError

DEFAULT_UNIT = "fulcrum-valis.service"
_COMMAND_TIMEOUT = 300.0


class StopRefused(ValisError):
    """The node's units could not be stopped as asked; the message says what to do."""


@attrs.frozen
class StopPlan:
    """What ``valis stop`` runs: the one systemctl command that stops (and with
    ``disable``, disables) the socket and the service, and the check after it."""

    service: str
    socket: str
    disable: bool = False

    @property
    def units(self) -> tuple[str, str]:
        """The socket first: nothing can activate the service while it stops."""
        return (self.socket, self.service)

    @property
    def command(self) -> tuple[str, ...]:
        verb = ("disable", "--now") if self.disable else ("stop",)
        return ("systemctl", *verb, *self.units)

    @property
    def check(self) -> tuple[str, ...]:
        """``systemctl is-active``: one line per unit, ``inactive`` (or ``failed``) once
        it is stopped."""
        return ("systemctl", "is-active", *self.units)

    def still_active(self, states: str) -> tuple[str, ...]:
        """The units ``check``'s output says are still up (active, or on their way)."""
        said = states.split()
        return tuple(unit for unit, state in zip(self.units, said, strict=False)
                     if state in ("active", "activating", "deactivating", "reloading",
                                  "refreshing"))

    @property
    def done_text(self) -> str:
        how = "stopped and disabled" if self.disable else "stopped"
        again = (f"systemctl enable {' '.join(self.units)}, then " if self.disable else "")
        return (f"valis stop: {how} {self.service} and its control socket {self.socket} "
                f"(nothing can start it again); to start the node: {again}systemctl start "
                f"{self.service} (the socket comes up first)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stop",
        help="stop the node's unit and its control socket, so nothing starts it again",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--unit", default=DEFAULT_UNIT, help="default: %(default)s")
    parser.add_argument("--socket-unit", metavar="UNIT",
                        help="the service's control socket unit (default: "
                        "fulcrum-valis-control.socket, as the delivery ships it)")
    parser.add_argument("--disable", action="store_true",
                        help="also disable both, so a reboot does not start the node")
    parser.set_defaults(handler=_stop)


def _run(argv: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL, timeout=_COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StopRefused(f"valis stop: cannot run {' '.join(argv)}: {exc}") from None


def _stop(args: argparse.Namespace) -> int:
    from valis_core.ops.provision import CONTROL_SOCKET_UNIT

    if not os.path.isdir("/run/systemd/system"):
        raise StopRefused(
            "valis stop: systemd is not running as PID 1 here; a node started by valis "
            "condense --unit-command or valis apply --supervise stops when that supervisor "
            "is sent SIGTERM (it stops the unit with it)"
        )
    plan = StopPlan(args.unit, args.socket_unit or CONTROL_SOCKET_UNIT, args.disable)
    done = _run(plan.command)
    if done.returncode != 0:
        detail = " ".join((done.stderr.strip() or done.stdout.strip()).split())
        raise StopRefused(f"valis stop: {' '.join(plan.command)} failed: "
                          f"{detail or f'exit {done.returncode}'}; run it as root")
    left = plan.still_active(_run(plan.check).stdout)
    if left:
        raise StopRefused(f"valis stop: {', '.join(left)} still active after "
                          f"{' '.join(plan.command)}; systemctl status {' '.join(left)} "
                          "says why")
    print(plan.done_text, flush=True)
    return 0

"""``valis apply``: stage a delivery, switch to it, bring it up, roll back if it fails.

Under systemd a delivery that changes nothing fulcrum runs by (its program, its steer,
its units: ``valis_core.apply.change``) is handed over to: ``systemctl reload`` starts
the new version's resident beside the serving one, which drains once the new one is
READY; one that does not come up leaves the old version serving (``current`` switched
back) and apply fails, saying why. Any other delivery, or ``--restart``, restarts the
unit. apply says which kind of change it was.

``--unit NAME`` drives a systemd unit. ``--supervise CMD`` is for hosts without systemd as
PID 1: this process starts CMD itself, reads its READY over a NOTIFY_SOCKET it owns, and
then stays in the foreground supervising it (SIGTERM and SIGINT are forwarded; SIGHUP,
the terminal gone, stops it as SIGTERM does) until the unit exits, returning its exit
status. A signal before the unit came up stops the unit. It is CMD's one supervisor:
another ``apply --supervise`` or ``condense --unit-command`` still supervising CMD is
refused, naming its pid, and a unit that a lost supervisor of CMD recorded and left
running is stopped cleanly before this one's starts (``valis_core.apply.unit_record``).
Run as root, it lets the run account (``--run-account``) reach that NOTIFY_SOCKET: the
resident says READY=1 itself, behind a launcher that dropped privilege to it.

Before ``current`` is switched, the staged version must be reachable by the run account
(``--run-account``, default valis when it exists): every directory on the way to each
delivered executable traversable by it, as ``valis assess`` judges the binary's path.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from valis_core.node_defaults import DEFAULT_RUN_ACCOUNT

if TYPE_CHECKING:
    from valis_core.apply.delivery import Reachable

DEFAULT_ROOT = "/opt/valis"
DEFAULT_UNIT = "fulcrum-valis.service"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "apply",
        help="stage a delivery tarball, switch to it and restart the unit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--delivery", required=True, type=Path, metavar="TARBALL")
    parser.add_argument("--root", default=DEFAULT_ROOT, type=Path, help="default: %(default)s")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--unit", metavar="NAME", help=f"systemd unit (default: {DEFAULT_UNIT})")
    how.add_argument(
        "--supervise", metavar="CMD", help="supervise CMD directly (one shell-quoted string)"
    )
    parser.add_argument(
        "--run-account",
        help=f"the account the resident runs as, which must reach the staged version "
        f"(with --supervise as root, it may also notify) (default: {DEFAULT_RUN_ACCOUNT}, "
        "when it exists)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="restart the unit even when the delivery could be handed over to (a new "
        "resident beside the serving one, systemctl reload): fulcrum's own code then "
        "takes effect too",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for READY (default: the delivery's up timeout, a minute)",
    )
    parser.set_defaults(handler=_apply)


def _run_account(name: str | None) -> tuple[int, int] | None:
    """The (uid, gid) the supervised unit's resident notifies as, when this is root."""
    from valis_core.apply.delivery import DeliveryError

    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam(name or DEFAULT_RUN_ACCOUNT)
    except KeyError:
        if name is None:
            return None
        raise DeliveryError(f"apply: there is no account {name!r} (--run-account)") from None
    return account.pw_uid, account.pw_gid


def reachable_by(name: str | None) -> Reachable | None:
    """The o+x chain check for the run account ``name`` (the default account when it
    exists, else no check), asked of this host."""
    from valis_core.apply.delivery import DeliveryError
    from valis_core.ops.host_readiness import traversal_problem
    from valis_core.ops.local_probe import LocalHostProbe

    probe = LocalHostProbe()
    account = probe.account(name or DEFAULT_RUN_ACCOUNT)
    if account is None:
        if name is None:
            return None
        raise DeliveryError(f"apply: there is no account {name!r} (--run-account)")

    def reachable(path: Path) -> str | None:
        return traversal_problem(probe, str(path), account)

    return reachable


#: What stops a supervising apply, and its unit with it: SIGHUP is the terminal gone.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Interrupted(Exception):
    """A stop signal before the unit came up: unwind, stopping whatever started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _apply(args: argparse.Namespace) -> int:
    from valis_core.apply.delivery import DEFAULT_UP_TIMEOUT, apply_delivery
    from valis_core.apply.unit_control import ProcessUnitController, SystemdUnitController
    from valis_core.apply.unit_record import record_dir
    from valis_core.ops.condense_host import let_unit_notify

    timeout = DEFAULT_UP_TIMEOUT if args.timeout is None else args.timeout
    reachable = reachable_by(args.run_account)
    if args.supervise is None:
        controller = SystemdUnitController(args.unit or DEFAULT_UNIT)
        applied = apply_delivery(
            args.delivery, args.root, controller, timeout=timeout, reachable=reachable,
            hand_over=controller.hand_over, restart=args.restart,
        )
        if applied.change is not None:
            print(f"valis: {applied.version}: {applied.change.why}")
        print(f"valis: {applied.version} is serving (previous: {applied.previous or 'none'})")
        return 0
    previous: dict[int, Any] = {}
    try:
        with ProcessUnitController(
            shlex.split(args.supervise), record_dir=record_dir()
        ) as unit:
            account = _run_account(args.run_account)
            if account is not None:
                let_unit_notify(unit, account)
            forwarding = False

            def on_signal(signum: int, _frame: FrameType | None) -> None:
                if not forwarding:
                    raise _Interrupted(signum)
                # SIGHUP would be the unit's reload (fulcrum passes it on): a stop is asked.
                unit.signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

            previous.update({sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS})
            try:
                applied = apply_delivery(
                    args.delivery, args.root, unit, timeout=timeout, reachable=reachable
                )
                forwarding = True
                print(
                    f"valis: {applied.version} is serving "
                    f"(previous: {applied.previous or 'none'})",
                    flush=True,
                )
                status = unit.wait_exit()
            except _Interrupted as interrupted:
                return 128 + interrupted.signum
            finally:
                forwarding = True  # the unit is stopped on the way out; a signal repeats it
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status is None:
        return 1
    return 128 - status if status < 0 else status

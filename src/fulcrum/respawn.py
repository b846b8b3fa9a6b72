"""When fulcrum starts the resident again after it ended unasked: the pure rule.

fulcrum outlives the resident. A resident that ends without being asked to — it crashed,
was killed, or failed its bring-up — is started again by fulcrum on the very descriptors
it held (the netns, its firewall, the bound sockets and the steer stay as they are;
queries arriving meanwhile wait in the sockets' receive queues). Restarts are bounded:
``attempts`` in a row at most, waiting ``first_delay`` before the first and doubling up
to ``max_delay``; a resident that ran ``stable_after`` seconds or more before it ended
counts as having come up, so the count starts again. Once the budget is spent fulcrum
gives up: it tears the unit down and exits with the resident's status, and systemd's
``Restart=``/``StartLimitBurst=`` take over as for any failed start.

Two endings are never restarted: an exit with ``FENCED_OUT_EXIT_STATUS`` (another
instance holds the fence: every restart would be refused the same way, and the unit's
``RestartPreventExitStatus=`` keeps it down) and an unasked exit with status 0 (the
resident says it is done; fulcrum ends with it, as before).

Values in, a verdict out: no clock, no process.
"""

from __future__ import annotations

import attrs

from valis_core.fence import FENCED_OUT_EXIT_STATUS


@attrs.frozen
class Restart:
    """Start the resident again after ``delay`` seconds; ``attempt`` counts from 1."""

    delay: float
    attempt: int
    #: failures in a row, this one included: what the next verdict is given
    failures: int


@attrs.frozen
class GiveUp:
    """Do not start it again; ``reason`` says why, for fulcrum's log."""

    reason: str
    #: the restarts in a row were spent (rather than an ending never restarted)
    budget_spent: bool = False


@attrs.frozen
class RespawnPolicy:
    """How often, and how soon, fulcrum starts a resident that ended unasked again."""

    attempts: int = 5
    first_delay: float = 0.1
    max_delay: float = 2.0
    stable_after: float = 30.0

    def __attrs_post_init__(self) -> None:
        if self.attempts < 0 or self.first_delay < 0 or self.max_delay < self.first_delay:
            raise ValueError(f"inconsistent respawn policy {self!r}")

    def after_exit(self, returncode: int, ran_for: float, failures: int) -> Restart | GiveUp:
        """The verdict on a resident that ended unasked with ``returncode`` (subprocess
        convention: minus the signal) after running ``ran_for`` seconds, ``failures``
        being the unasked endings in a row before it (0 after one that came up)."""
        if returncode == FENCED_OUT_EXIT_STATUS:
            return GiveUp("it was fenced out; a restart would be refused the same way")
        if returncode == 0:
            return GiveUp("it exited with status 0 on its own")
        failures = 1 if ran_for >= self.stable_after else failures + 1
        if failures > self.attempts:
            return GiveUp(
                f"it ended {failures} times in a row within {self.stable_after:g} s of "
                f"its start; fulcrum restarts it at most {self.attempts} times in a row",
                budget_spent=True,
            )
        delay = min(self.max_delay, self.first_delay * 2 ** (failures - 1))
        return Restart(delay=delay, attempt=failures, failures=failures)

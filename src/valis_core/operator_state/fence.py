"""The instance write-fence in the database: the pure transitions of ``valis_core.fence``
applied to the single ``instance_fence`` row under row locks.

Each function reads the row with a row lock, asks the pure function what the fence
becomes (or whether the writer may proceed), and writes the answer; the rules live only
in ``valis_core.fence``.

Why row locks under READ COMMITTED, and why ``FOR SHARE``:

- A claim reads the row ``FOR UPDATE`` and updates it in its own transaction.
- Every mutating transaction of a node starts (``fenced_transaction``) by reading the row
  ``FOR SHARE`` and checking its generation, and holds that lock until it commits.
- ``FOR SHARE`` conflicts with ``FOR UPDATE`` *and* with the ``FOR NO KEY UPDATE`` lock a
  plain ``UPDATE`` of the row takes. So a claim cannot commit while any writer that passed
  the check is still open: the claim waits for those writers to finish, and their writes
  land *before* the fence moves. ``FOR KEY SHARE`` would not do: it does not conflict
  with ``FOR NO KEY UPDATE``, so any non-key update of the row would slip past it.
- A writer that asks while a claim holds the row waits for the claim to end; under READ
  COMMITTED PostgreSQL then re-reads the newest committed version of the locked row, so
  the writer sees the new generation and is fenced out. Once a claim of generation g has
  committed, every later check reads g, so no transaction touched at a lower generation
  can commit afterwards.

SERIALIZABLE would also stop the lost update, but only by aborting one side with a
serialization failure that every caller must retry; the row lock gives the same guarantee
by waiting, with the fence's own error (``FencedOut``) as the only refusal.

The process's write turn (``WRITE_TURN``, the handover's rule in ``valis_core.fence``) is
kept here too: ``fenced_transaction`` begins only once this process holds it. A resident
started as a successor withholds it at its start, and its fenced writes (an owner
update, a heartbeat is skipped instead) wait, at most ``TURN_PATIENCE`` seconds, for
fulcrum's grant; one still waiting then fails with ``TurnNotGranted`` and writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from valis_core import fence as rules
from valis_core.fence import FencedOut, FenceState, SeedRefused, StaleClaim, Turn, TurnEvent
from valis_core.operator_state.connection import OperatorStateError

__all__ = [
    "WRITE_TURN",
    "FenceState",
    "FencedOut",
    "SeedRefused",
    "StaleClaim",
    "TurnNotGranted",
    "UnseededFence",
    "assert_fence_touch",
    "claim_instance_fence",
    "fenced_transaction",
    "read_instance_fence",
    "seed_instance_fence",
]

_SEED_ATTEMPTS = 3
#: How long a fenced write of a successor waits for fulcrum's grant of the write turn.
TURN_PATIENCE = 120.0


class TurnNotGranted(OperatorStateError):
    """A successor's fenced write waited for the write turn and was not given it."""

    def __init__(self, waited: float) -> None:
        super().__init__(
            f"instance fence: this resident is a successor and was not given the write "
            f"turn within {waited:g} s (the resident it takes over from still runs); "
            "nothing was written: the handover did not finish, see fulcrum's log"
        )


class WriteTurn:
    """This process's write turn: the pure table (``valis_core.fence.TURN_TRANSITIONS``)
    applied under a lock, with a wait for the grant. One per process (``WRITE_TURN``)."""

    def __init__(self) -> None:
        self._turn = Turn.UNSET
        self._changed = threading.Condition()

    @property
    def turn(self) -> Turn:
        return self._turn

    def may_write(self) -> bool:
        return rules.may_write(self._turn)

    def withhold(self) -> None:
        """This process is a successor: it writes nothing until ``grant``."""
        with self._changed:
            self._turn = rules.next_turn(self._turn, TurnEvent.WITHHOLD)

    def grant(self) -> None:
        with self._changed:
            self._turn = rules.next_turn(self._turn, TurnEvent.GRANT)
            self._changed.notify_all()

    def begin_write(self, patience: float = TURN_PATIENCE) -> None:
        """Wait (at most ``patience`` s) until this process may write, and mark it written."""
        with self._changed:
            if not self._changed.wait_for(self.may_write, timeout=patience):
                raise TurnNotGranted(patience)
            self._turn = rules.next_turn(self._turn, TurnEvent.WRITE)


WRITE_TURN = WriteTurn()


class UnseededFence(OperatorStateError):
    """The fence row does not exist yet, so no generation may write or claim."""

    def __init__(self, action: str) -> None:
        super().__init__(
            f"instance fence: cannot {action}: the fence was never seeded in this database; "
            "a node seeds it at genesis (seed_instance_fence) before anything writes"
        )


_LOCKING_READS = {
    "UPDATE": "SELECT generation, holder FROM instance_fence WHERE id = 1 FOR UPDATE",
    "SHARE": "SELECT generation, holder FROM instance_fence WHERE id = 1 FOR SHARE",
}


def _row(cur: psycopg.Cursor[Any], lock: str) -> FenceState | None:
    cur.execute(_LOCKING_READS[lock])
    row = cur.fetchone()
    return None if row is None else FenceState(generation=row[0], holder=row[1])


def read_instance_fence(conn: psycopg.Connection[Any]) -> FenceState | None:
    """The fence as last committed, without locking it (for status and start-up checks)."""
    row = conn.execute("SELECT generation, holder FROM instance_fence WHERE id = 1").fetchone()
    return None if row is None else FenceState(generation=row[0], holder=row[1])


def seed_instance_fence(conn: psycopg.Connection[Any], holder: str) -> FenceState:
    """Lay the fence at the genesis epoch if absent; ``holder``'s own fence is left as it
    is, and one another holder holds raises ``SeedRefused`` (nothing is written).

    Two seeders racing on an empty table both see no row (there is nothing to lock), so
    the insert is ``ON CONFLICT DO NOTHING`` and the loser re-reads the winner's row.
    """
    for _ in range(_SEED_ATTEMPTS):
        with conn.transaction(), conn.cursor() as cur:
            current = _row(cur, "UPDATE")
            seeded = rules.seed_instance_fence(current, holder)
            if current is not None:
                if seeded != current:  # pragma: no cover - the rules keep a seeded fence
                    _write(cur, seeded)
                return seeded
            cur.execute(
                "INSERT INTO instance_fence (id, generation, holder) VALUES (1, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (seeded.generation, seeded.holder),
            )
            if cur.rowcount == 1:
                return seeded
    raise OperatorStateError(  # pragma: no cover - needs a row deleted between attempts
        "instance fence: could not seed; the fence row keeps vanishing (is something "
        "deleting it?)"
    )


def claim_instance_fence(
    conn: psycopg.Connection[Any], generation: int, holder: str
) -> FenceState:
    """Claim ``generation`` for ``holder`` and commit; raises ``StaleClaim`` if refused.

    Waits for every transaction that holds the fence ``FOR SHARE`` (writers that passed
    their check) to finish first.
    """
    with conn.transaction(), conn.cursor() as cur:
        current = _row(cur, "UPDATE")
        if current is None:
            raise UnseededFence(f"claim generation {generation}")
        claimed = rules.claim_instance_fence(current, generation, holder)
        if claimed != current:
            _write(cur, claimed)
        return claimed


def assert_fence_touch(cur: psycopg.Cursor[Any], writer: FenceState) -> FenceState:
    """Inside an open transaction: lock the fence ``FOR SHARE`` until it ends and raise
    ``FencedOut`` unless ``writer``'s generation and holder are the fence's."""
    if cur.connection.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
        raise OperatorStateError(
            "instance fence: assert_fence_touch must run inside the mutating transaction "
            "it guards (use fenced_transaction)"
        )
    current = _row(cur, "SHARE")
    if current is None:
        raise UnseededFence(f"write at generation {writer.generation}")
    rules.assert_fence_touch(current, writer)
    return current


@contextmanager
def fenced_transaction(
    conn: psycopg.Connection[Any], writer: FenceState
) -> Iterator[psycopg.Cursor[Any]]:
    """A transaction that may write only while the fence is ``writer``'s standing.

    It begins once this process holds the write turn (``WRITE_TURN``). The fence check
    is the transaction's first statement and its lock lasts until the commit;
    ``FencedOut`` (from the check or anywhere in the body) rolls everything back.
    """
    WRITE_TURN.begin_write()
    with conn.transaction(), conn.cursor() as cur:
        assert_fence_touch(cur, writer)
        yield cur


def _write(cur: psycopg.Cursor[Any], state: FenceState) -> None:
    cur.execute(
        "UPDATE instance_fence SET generation = %s, holder = %s, updated_at = now() "
        "WHERE id = 1",
        (state.generation, state.holder),
    )

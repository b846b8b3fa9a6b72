"""The fenced-out verdict a stopped resident leaves in its state directory.

A resident that is fenced out (refused at the boot's fence check, or superseded while
serving) stops for good, and its fabric with it, so nothing running can say why the node
is down. Before it exits it writes ``fenced-out.json`` (``state_layout.FENCED_OUT``): the
fence it met — the holder and the generation — and the store generation it was refused
at. ``valis status`` reads it when no node answers and says "fenced out by HOLDER at
generation G". The verdict holds only for the store it was written against: a condense
onto this state directory writes a higher store generation, which makes the verdict
stale (it is ignored), and an instance that passes the fence removes it.

The library's, beside the fence (``valis_core.fence``): the resident writes and clears it,
``valis status`` and ``backup`` read it, and none of them imports the others for it.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import attrs

from valis_core.atomic import write_atomic
from valis_core.clock import wall
from valis_core.documents import Document
from valis_core.errors import ValisError
from valis_core.fence import FencedOut, FenceState
from valis_core.state_layout import fenced_out_path

_MAX_FILE = 1 << 16


class NodeFencedOut(ValisError):
    """No node serves from this state directory because its instance was fenced out."""


class VerdictUnreadable(ValisError):
    """A ``fenced-out.json`` that is not a verdict (``read_verdict`` passes it over)."""


@attrs.frozen
class FencedOutVerdict:
    """The fence a writer met (``fence``) and the writer it refused (``writer``), and when."""

    fence: FenceState
    writer: FenceState
    at: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at))
        return (
            f"fenced out by {self.fence.holder} at generation {self.fence.generation}: this "
            f"node's store is at generation {self.writer.generation}, and it stopped for good "
            f"at {when} (a restart is refused the same way; only condense claims the fence). "
            "If the node was evacuated or restored elsewhere, disable its units here "
            "(systemctl disable --now fulcrum-valis.service fulcrum-valis-control.socket); "
            "to serve from this host again, condense the holder's newest backup set onto it"
        )


DOCUMENT: Document[FencedOutVerdict] = Document(
    kind=FencedOutVerdict,
    name="fenced-out.json",
    error=VerdictUnreadable,
    remedy="it is passed over",
    newline=False,
    max_bytes=_MAX_FILE,
)
"""``fenced-out.json`` as a JSON document (``valis_core.documents``)."""


def record_verdict(state_dir: Path, fenced: FencedOut, *, now: float | None = None) -> None:
    """Write the verdict of ``fenced`` into ``state_dir`` (atomically, the run account's)."""
    verdict = FencedOutVerdict(
        fence=fenced.current, writer=fenced.writer, at=wall() if now is None else now
    )
    write_atomic(fenced_out_path(state_dir), DOCUMENT.render(verdict), mode=0o600)


def clear_verdict(state_dir: Path) -> None:
    """Remove a verdict: an instance of this state directory passed the fence."""
    fenced_out_path(state_dir).unlink(missing_ok=True)


def read_verdict(state_dir: Path, store_generation: int | None) -> FencedOutVerdict | None:
    """The verdict left in ``state_dir`` for a store at ``store_generation``; ``None`` when
    there is none, it cannot be read, or it was written against another store generation
    (a condense since made this directory another instance's)."""
    with contextlib.suppress(OSError, VerdictUnreadable):
        with fenced_out_path(state_dir).open("rb") as handle:
            verdict = DOCUMENT.read(handle.read(_MAX_FILE + 1))
        if verdict.writer.generation == store_generation:
            return verdict
    return None

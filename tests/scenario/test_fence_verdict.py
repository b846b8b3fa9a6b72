"""The fenced-out verdict a stopped resident leaves: read back for the store it was written
against, and ignored once a condense has moved that state directory's store on."""

from __future__ import annotations

from pathlib import Path

from valis_core.fence import FencedOut, FenceState
from valis_core.fence_verdict import clear_verdict, read_verdict, record_verdict
from valis_core.state_layout import fenced_out_path

SUCCESSOR = FenceState(5, "node-a@elsewhere#0123456789abcdef")
OLD = FenceState(4, "node-a@here#fedcba9876543210")


def test_the_verdict_names_the_holder_and_generation_for_the_store_it_was_written_at(
    tmp_path: Path,
) -> None:
    record_verdict(tmp_path, FencedOut(SUCCESSOR, OLD), now=0.0)
    assert fenced_out_path(tmp_path).stat().st_mode & 0o777 == 0o600
    verdict = read_verdict(tmp_path, 4)
    assert verdict is not None
    assert (verdict.fence, verdict.writer) == (SUCCESSOR, OLD)
    assert verdict.describe().startswith(
        f"fenced out by {SUCCESSOR.holder} at generation 5: this node's store is at "
        "generation 4, and it stopped for good at 1970-01-01T00:00:00Z")


def test_a_store_condensed_since_or_a_cleared_verdict_is_not_fenced_out(tmp_path: Path) -> None:
    record_verdict(tmp_path, FencedOut(SUCCESSOR, OLD))
    assert read_verdict(tmp_path, 6) is None  # a restore onto this directory since
    assert read_verdict(tmp_path, None) is None  # no store head at all
    clear_verdict(tmp_path)
    assert read_verdict(tmp_path, 4) is None
    clear_verdict(tmp_path)  # nothing to clear is no error


def test_an_unreadable_verdict_is_no_verdict(tmp_path: Path) -> None:
    fenced_out_path(tmp_path).write_text("{not json")
    assert read_verdict(tmp_path, 4) is None

"""The record of a supervised unit, against real processes: a re-run stops the process it
names and only that one — never another that has its pid, nor one of another pid
namespace's numbering."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest

from tests.scenario.proving_ground import process_gone
from valis_core.apply.unit_record import (
    UnitRecordError,
    read_record,
    record_of,
    stop_recorded,
    write_record,
)

# Says it is ready once its SIGTERM handler is in place; exits 0 on SIGTERM.
UNIT = r"""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("ready", flush=True)
time.sleep(60)
"""


@contextmanager
def running_unit() -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen([sys.executable, "-c", UNIT], stdout=subprocess.PIPE,
                          text=True, start_new_session=True) as unit:
        try:
            assert unit.stdout is not None
            assert unit.stdout.readline().strip() == "ready"
            yield unit
        finally:
            unit.kill()


def test_the_recorded_unit_is_stopped_by_sigterm(tmp_path: Path) -> None:
    with running_unit() as unit:
        record = record_of(unit.pid, ["unit"])
        assert record is not None
        write_record(tmp_path / "unit.json", record)
        assert read_record(tmp_path / "unit.json") == record
        assert stop_recorded(record, stop_timeout=30)
        assert unit.wait(30) == 0  # its own SIGTERM handler: stopped, not killed


def test_a_process_that_only_has_the_recorded_pid_is_left_alone() -> None:
    with running_unit() as unit:
        record = record_of(unit.pid, ["unit"])
        assert record is not None
        for other in (attrs.evolve(record, start=record.start + 1),
                      attrs.evolve(record, pidns=record.pidns + 1)):
            assert not stop_recorded(other, stop_timeout=30)
        assert unit.poll() is None


def test_a_unit_gone_since_it_was_recorded_is_nothing_to_stop() -> None:
    with running_unit() as unit:
        record = record_of(unit.pid, ["unit"])
        unit.send_signal(signal.SIGKILL)
        unit.wait(30)
    assert record is not None
    assert process_gone(record.pid)
    assert not stop_recorded(record, stop_timeout=30)


def test_a_record_that_does_not_parse_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "unit.json"
    path.write_text("{\"pid\": ")
    with pytest.raises(UnitRecordError, match=f"the unit record {path} does not parse"):
        read_record(path)
    assert read_record(tmp_path / "absent.json") is None

"""The atomic writer: a file appears whole with its final mode, or not at all."""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.atomic import create_exclusive, sweep_orphans, write_atomic

payloads = st.binary(max_size=4096)
modes = st.sampled_from([0o600, 0o640, 0o644, 0o400, 0o444, 0o660])


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        entry.name: (entry.read_bytes(), stat.S_IMODE(entry.stat().st_mode))
        for entry in directory.iterdir()
    }


@settings(max_examples=scaled(0.4))
@given(data=payloads, mode=modes, mask=st.sampled_from([0o022, 0o077, 0o777]))
def test_written_file_holds_the_bytes_and_exactly_the_mode_whatever_the_umask(
    data: bytes, mode: int, mask: int
) -> None:
    with scratch() as d, umask(mask):
        write_atomic(d / "f", data, mode=mode)
        assert snapshot(d) == {"f": (data, mode)}


@settings(max_examples=scaled(0.4))
@given(old=payloads, new=payloads, old_mode=modes, new_mode=modes)
def test_rewrite_replaces_bytes_and_mode_and_leaves_no_temporary_file(
    old: bytes, new: bytes, old_mode: int, new_mode: int
) -> None:
    with scratch() as d:
        write_atomic(d / "f", old, mode=old_mode)
        write_atomic(d / "f", new, mode=new_mode)
        assert snapshot(d) == {"f": (new, new_mode)}


@settings(max_examples=scaled(0.2))
@given(old=payloads, new=payloads)
def test_a_failed_write_removes_its_temporary_file_and_leaves_the_target_untouched(
    old: bytes, new: bytes
) -> None:
    with scratch() as d:
        write_atomic(d / "f", old, mode=0o640)
        before = snapshot(d)
        failure = OSError(5, "Input/output error")
        with (
            mock.patch.object(os, "fsync", side_effect=failure),
            pytest.raises(OSError, match="Input/output"),
        ):
            write_atomic(d / "f", new, mode=0o644)
        assert snapshot(d) == before


def test_a_write_onto_a_directory_fails_and_leaves_the_directory_as_it_was() -> None:
    with scratch() as d:
        (d / "sub").mkdir()
        (d / "other").write_bytes(b"x")
        before = sorted(p.name for p in d.iterdir())
        with pytest.raises(IsADirectoryError):
            write_atomic(d / "sub", b"data")
        assert sorted(p.name for p in d.iterdir()) == before
        assert (d / "sub").is_dir()


def test_a_write_into_a_missing_directory_fails_and_creates_nothing() -> None:
    with scratch() as d:
        with pytest.raises(FileNotFoundError):
            write_atomic(d / "missing" / "f", b"data")
        assert list(d.iterdir()) == []


@settings(max_examples=scaled(0.3))
@given(first=payloads, second=payloads, mode=modes)
def test_exclusive_create_never_replaces_an_existing_file(
    first: bytes, second: bytes, mode: int
) -> None:
    with scratch() as d:
        create_exclusive(d / "k", first, mode=mode)
        with pytest.raises(FileExistsError):
            create_exclusive(d / "k", second, mode=0o600)
        assert snapshot(d) == {"k": (first, mode)}


def test_exclusive_create_refuses_a_name_held_by_a_dangling_symlink() -> None:
    with scratch() as d:
        (d / "k").symlink_to(d / "nowhere")
        with pytest.raises(FileExistsError):
            create_exclusive(d / "k", b"seed")
        assert not (d / "nowhere").exists()
        assert sorted(p.name for p in d.iterdir()) == ["k"]


def test_exclusive_create_gives_the_mode_from_the_start_under_a_restrictive_umask() -> None:
    with scratch() as d, umask(0o777):
        create_exclusive(d / "k", b"seed", mode=0o600)
        assert snapshot(d) == {"k": (b"seed", 0o600)}


def _orphan(directory: Path, name: str, data: bytes) -> Path:
    """A temporary file as a writer killed mid-write leaves it: nobody holds its lock."""
    temp = directory / f".{name}.{os.urandom(6).hex()}.tmp"
    temp.write_bytes(data)
    return temp


@pytest.mark.parametrize("write", [write_atomic, create_exclusive])
def test_the_next_write_sweeps_the_temporary_files_a_killed_writer_left(write: Any) -> None:
    with scratch() as directory:
        left = [_orphan(directory, "target", b"torn"), _orphan(directory, "target", b"")]
        other = _orphan(directory, "other", b"another file's")
        write(directory / "target", b"whole")
        assert (directory / "target").read_bytes() == b"whole"
        assert not any(path.exists() for path in left)
        assert other.exists()


def test_a_temporary_file_a_live_writer_holds_is_never_swept() -> None:
    with scratch() as directory:
        held = _orphan(directory, "target", b"in progress")
        fd = os.open(held, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            sweep_orphans(directory / "target")
            assert held.read_bytes() == b"in progress"
        finally:
            os.close(fd)
        sweep_orphans(directory / "target")
        assert not held.exists()


def test_exclusive_create_gives_the_file_no_name_until_it_is_whole() -> None:
    """A writer killed before the link leaves nothing at all (an unnamed file)."""
    with scratch() as directory:
        listings: list[list[str]] = []
        fsync = os.fsync

        def spy(fd: int) -> None:
            listings.append(sorted(p.name for p in directory.iterdir()))
            fsync(fd)

        with mock.patch.object(os, "fsync", side_effect=spy):
            create_exclusive(directory / "k", b"seed")
        assert listings[0] == []
        assert sorted(p.name for p in directory.iterdir()) == ["k"]

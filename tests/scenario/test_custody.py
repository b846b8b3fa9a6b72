"""Custody of the owner seed on a real filesystem: minted once, kept, never loose."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from valis_core.errors import ValisError
from valis_core.identity.custody import (
    KEYFILE_NAME,
    CustodyError,
    derive_x25519,
    keyfile_path,
    load_or_create_keyfile,
    public_key_hex,
)

RACERS = 4
ROUNDS = 5

# A racer announces it is ready, waits (bounded) for the starting gun, then mints.
RACER = """
import sys, time
from pathlib import Path
from valis_core.identity.custody import load_or_create_keyfile, public_key_hex
state, gate, ready = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
deadline = time.monotonic() + 20
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.001)
print(public_key_hex(load_or_create_keyfile(state)))
"""


def test_the_first_call_mints_a_private_32_byte_keyfile(tmp_path: Path) -> None:
    key = load_or_create_keyfile(tmp_path)
    info = keyfile_path(tmp_path).lstat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_size == 32
    assert keyfile_path(tmp_path).read_bytes() == key.private_bytes_raw()
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEYFILE_NAME]


def test_reloading_gives_the_same_key_and_never_rewrites_the_file(tmp_path: Path) -> None:
    first = load_or_create_keyfile(tmp_path)
    before = keyfile_path(tmp_path).stat()
    for _ in range(3):
        again = load_or_create_keyfile(tmp_path)
        assert public_key_hex(again) == public_key_hex(first)
    after = keyfile_path(tmp_path).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_separate_state_directories_get_separate_keys(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = load_or_create_keyfile(tmp_path / "a")
    b = load_or_create_keyfile(tmp_path / "b")
    assert public_key_hex(a) != public_key_hex(b)


def test_processes_racing_to_mint_end_with_one_key(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        state = tmp_path / f"round-{round_}"
        state.mkdir()
        gate = tmp_path / f"gate-{round_}"
        ready = [tmp_path / f"ready-{round_}-{i}" for i in range(RACERS)]
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, str(state), str(gate), str(flag)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for flag in ready
        ]
        deadline = time.monotonic() + 30
        while not all(flag.exists() for flag in ready) and time.monotonic() < deadline:
            time.sleep(0.005)
        gate.touch()
        keys = set()
        for racer in racers:
            out, err = racer.communicate(timeout=30)
            assert racer.returncode == 0, err
            keys.add(out.strip())
        assert len(keys) == 1
        assert keys == {public_key_hex(load_or_create_keyfile(state))}
        assert sorted(p.name for p in state.iterdir()) == [KEYFILE_NAME]


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o644, 0o660])
def test_a_keyfile_open_to_other_accounts_is_refused_and_left_alone(
    tmp_path: Path, mode: int
) -> None:
    load_or_create_keyfile(tmp_path)
    path = keyfile_path(tmp_path)
    seed = path.read_bytes()
    path.chmod(mode)
    with pytest.raises(CustodyError, match=f"chmod 0600 {path}"):
        load_or_create_keyfile(tmp_path)
    assert path.read_bytes() == seed
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.parametrize("size", [0, 1, 31, 33, 64])
def test_a_keyfile_of_the_wrong_size_is_refused_and_never_replaced(
    tmp_path: Path, size: int
) -> None:
    path = keyfile_path(tmp_path)
    path.write_bytes(b"\x07" * size)
    path.chmod(0o600)
    with pytest.raises(CustodyError, match=f"{path} holds {size} bytes.*backup set"):
        load_or_create_keyfile(tmp_path)
    assert path.read_bytes() == b"\x07" * size


def test_a_symlinked_keyfile_is_refused_even_when_it_points_at_a_good_key(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    load_or_create_keyfile(real)
    state = tmp_path / "state"
    state.mkdir()
    keyfile_path(state).symlink_to(keyfile_path(real))
    with pytest.raises(CustodyError, match="symlink"):
        load_or_create_keyfile(state)


def test_a_dangling_symlink_is_refused_and_nothing_is_minted_through_it(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.key"
    keyfile_path(tmp_path).symlink_to(target)
    with pytest.raises(CustodyError, match="symlink"):
        load_or_create_keyfile(tmp_path)
    assert not target.exists()


def test_a_directory_in_place_of_the_keyfile_is_refused(tmp_path: Path) -> None:
    keyfile_path(tmp_path).mkdir(mode=0o700)
    with pytest.raises(CustodyError, match="not a regular file"):
        load_or_create_keyfile(tmp_path)


def test_a_missing_state_directory_is_an_operator_error(tmp_path: Path) -> None:
    with pytest.raises(CustodyError, match="state directory must exist"):
        load_or_create_keyfile(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()


def test_custody_errors_are_operator_errors() -> None:
    assert issubclass(CustodyError, ValisError)


def test_the_x25519_twin_is_stable_across_reloads(tmp_path: Path) -> None:
    first = derive_x25519(load_or_create_keyfile(tmp_path)).public_key().public_bytes_raw()
    again = derive_x25519(load_or_create_keyfile(tmp_path)).public_key().public_bytes_raw()
    assert first == again


def test_the_mode_is_private_from_the_start_under_any_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        load_or_create_keyfile(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(keyfile_path(tmp_path).stat().st_mode) == 0o600

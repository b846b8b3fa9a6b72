"""Zone-signing keys on disk: made once per zone in the state directory (0600, atomic),
read back as the key they were (a split zone's KSK and ZSK each with its flags), carried
by the backup set and restored byte for byte, so a restored or evacuated node signs under
the same DS."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from valis_core.dns.dnssec.zone_keys import (
    ZoneKeyError,
    ensure_signing_keys,
    ensure_zone_key,
    file_zone,
    key_file_name,
    load_key_ring,
    load_zone_keys,
)
from valis_core.identity.custody import load_or_create_keyfile
from valis_core.ops.backup import BackupError, create_backup, restore_backup, verify_backup_set
from valis_core.store.manifest import Manifest, dumps


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "valis-dns"
    state.mkdir(mode=0o700)
    load_or_create_keyfile(state)
    (state / "store").mkdir()
    (state / "store" / "manifest.json").write_bytes(dumps(Manifest(generation=1)))
    return state


@pytest.mark.parametrize("algorithm", [13, 15])
def test_a_zone_key_is_made_once_and_read_back_as_itself(state_dir: Path, algorithm: int) -> None:
    key, made = ensure_zone_key(state_dir, "Example.TEST.", algorithm)
    again, made_again = ensure_zone_key(state_dir, "example.test.", algorithm)
    assert made
    assert not made_again
    assert (again.dnskey, again.tag) == (key.dnskey, key.tag)
    path = state_dir / "dnssec" / key_file_name("example.test.", key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_zone_keys(state_dir)[file_zone("example.test.")].dnskey == key.dnskey


def test_another_algorithm_for_a_signed_zone_is_refused(state_dir: Path) -> None:
    ensure_zone_key(state_dir, "example.test.", 13)
    with pytest.raises(ZoneKeyError, match="rollover"):
        ensure_zone_key(state_dir, "example.test.", 15)


@pytest.mark.parametrize("split", [False, True])
def test_keys_held_keep_their_algorithm_and_kind_where_none_is_named(
    state_dir: Path, split: bool
) -> None:
    made, _ = ensure_signing_keys(state_dir, "example.test.", 15, split=split)
    kept, made_again = ensure_signing_keys(state_dir, "example.test.", None, split=None)
    assert not made_again
    assert [key.dnskey for key in kept] == [key.dnskey for key in made]
    assert {key.algorithm for key in kept} == {15}
    fresh, made_fresh = ensure_signing_keys(state_dir, "other.test.", None, split=None)
    assert made_fresh
    assert [key.algorithm for key in fresh] == [13]  # a zone signed anew: the default


def test_a_key_file_renamed_to_another_tag_is_refused(state_dir: Path) -> None:
    key, _ = ensure_zone_key(state_dir, "example.test.", 15)
    path = state_dir / "dnssec" / key_file_name("example.test.", key)
    path.rename(path.with_name(f"Kexample.test+015+{(key.tag + 1) % 65536:05d}.pem"))
    with pytest.raises(ZoneKeyError, match="not what its name says"):
        load_zone_keys(state_dir)


def test_signing_keys_are_backed_up_and_restored_byte_for_byte(
    state_dir: Path, tmp_path: Path
) -> None:
    key13, _ = ensure_zone_key(state_dir, "example.test.", 13)
    key15, _ = ensure_zone_key(state_dir, "other.test.", 15)
    archive = tmp_path / "backup.tar"
    manifest = create_backup(state_dir, archive)
    names = {entry.path for entry in manifest.files}
    expected = {
        f"dnssec/{key_file_name('example.test.', key13)}",
        f"dnssec/{key_file_name('other.test.', key15)}",
    }
    assert expected <= names
    verify_backup_set(archive)
    fresh = tmp_path / "restored"
    restore_backup(archive, fresh)
    for name in expected:
        assert (fresh / name).read_bytes() == (state_dir / name).read_bytes()
    restored = load_zone_keys(fresh)
    assert restored["example.test"].dnskey == key13.dnskey
    assert restored["other.test"].dnskey == key15.dnskey


def test_a_backup_of_a_damaged_signing_key_does_not_verify(
    state_dir: Path, tmp_path: Path
) -> None:
    key, _ = ensure_zone_key(state_dir, "example.test.", 13)
    (state_dir / "dnssec" / key_file_name("example.test.", key)).write_bytes(b"not a key")
    archive = tmp_path / "backup.tar"
    create_backup(state_dir, archive)
    with pytest.raises(BackupError, match="no usable signing key"):
        verify_backup_set(archive)


@pytest.mark.parametrize("algorithm", [13, 15])
def test_a_split_zone_keeps_a_ksk_and_a_zsk_backed_up_and_restored_as_themselves(
    state_dir: Path, tmp_path: Path, algorithm: int
) -> None:
    """``--split`` makes a KSK (flags 257) and a ZSK (flags 256) once; read back, each
    has its flags again (the tag in the file name says which), and a restore of the
    backup set reproduces both byte for byte."""
    (ksk, zsk), made = ensure_signing_keys(state_dir, "example.test.", algorithm, split=True)
    again, made_again = ensure_signing_keys(state_dir, "example.test.", algorithm, split=True)
    assert made
    assert not made_again
    assert (ksk.flags, zsk.flags) == (257, 256)
    assert [key.dnskey for key in again] == [ksk.dnskey, zsk.dnskey]
    archive = tmp_path / "backup.tar"
    create_backup(state_dir, archive)
    verify_backup_set(archive)
    fresh = tmp_path / "restored"
    restore_backup(archive, fresh)
    for key in (ksk, zsk):
        name = f"dnssec/{key_file_name('example.test.', key)}"
        assert (fresh / name).read_bytes() == (state_dir / name).read_bytes()
    restored = load_key_ring(fresh)["example.test"]
    assert {tag: (key.flags, key.dnskey) for tag, key in restored.items()} == {
        ksk.tag: (257, ksk.dnskey), zsk.tag: (256, zsk.dnskey),
    }


def test_a_zone_signed_one_way_is_not_signed_the_other(state_dir: Path) -> None:
    ensure_zone_key(state_dir, "csk.test.", 13)
    with pytest.raises(ZoneKeyError, match=r"combined signing key \(CSK\).*without --split"):
        ensure_signing_keys(state_dir, "csk.test.", 13, split=True)
    ensure_signing_keys(state_dir, "split.test.", 13, split=True)
    with pytest.raises(ZoneKeyError, match=r"a KSK and a ZSK.*with --split"):
        ensure_zone_key(state_dir, "split.test.", 13)
    with pytest.raises(ZoneKeyError, match="algorithm rollover is not offered"):
        ensure_signing_keys(state_dir, "split.test.", 15, split=True)

"""`valis backup create|verify` on a real state directory with a minted owner key: the
archive restores byte for byte, and any tampering or truncation is named."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.conftest import require_root
from tests.scenario.edge_ca import make_test_ca
from tests.scenario.pg import RUN_USER, ensure_system_user
from valis_core import safe_tar
from valis_core.fence import FencedOut, FenceState
from valis_core.fence_verdict import record_verdict
from valis_core.identity.custody import load_or_create_keyfile, public_key_hex
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.ops.backup import (
    MANIFEST_NAME,
    SIGNATURE_NAME,
    BackupError,
    BackupFile,
    BackupManifest,
    create_backup,
    render_manifest,
    restore_backup,
    verify_backup_set,
)
from valis_core.state_layout import OPERATOR_STATE_TLS
from valis_core.store.manifest import Manifest, dumps

VALIS = Path(sys.executable).parent / "valis"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A node's state directory after its first boot, serving the edge."""
    state = tmp_path / "valis-dns"
    state.mkdir(mode=0o700)
    load_or_create_keyfile(state)
    (state / "store").mkdir()
    (state / "store" / "manifest.json").write_bytes(dumps(Manifest(generation=3)))
    (state / "config").mkdir(mode=0o700)
    write_site_facts(
        state / "config" / "site-facts.env",
        {
            "VALIS_NODE_NAME": "origin-a",
            "VALIS_LOCATION": "198.51.100.10",
            "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
            "VALIS_SERVED_ZONES": "example.org.",
        },
        mode=0o600,
    )
    (state / "edge").mkdir()
    (state / "edge" / "acme-account.key").write_bytes(make_test_ca().issue(("a",)).key_pem)
    leaf = make_test_ca().issue(("example.org",))
    (state / "edge" / "leaf.key").write_bytes(leaf.key_pem)
    (state / "edge" / "leaf.crt").write_bytes(leaf.chain_pem)
    (state / "fabric.token").write_text("not part of the backup set")
    return state


def _owner_key(state: Path) -> str:
    return public_key_hex(load_or_create_keyfile(state))


def _data_spans(archive: bytes) -> list[tuple[str, int, int]]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return [(m.name, m.offset_data, m.offset_data + m.size) for m in tar.getmembers()]


def test_a_backup_set_holds_the_critical_files_and_verifies(
    state_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "backup.tar"
    manifest = create_backup(state_dir, out)
    assert out.stat().st_mode & 0o777 == 0o600
    assert {entry.path for entry in manifest.files} == {
        "owner.key",
        "store/manifest.json",
        "config/site-facts.env",
        "edge/acme-account.key",
        "edge/leaf.crt",
        "edge/leaf.key",
    }
    verified = verify_backup_set(out)
    assert verified.owner_public_key == _owner_key(state_dir)
    assert verified.generation == 3


def test_the_same_state_backs_up_to_the_same_bytes(state_dir: Path, tmp_path: Path) -> None:
    create_backup(state_dir, tmp_path / "one.tar")
    create_backup(state_dir, tmp_path / "two.tar")
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()


def test_edge_keys_are_optional(state_dir: Path, tmp_path: Path) -> None:
    for key in ("acme-account.key", "leaf.key", "leaf.crt"):
        (state_dir / "edge" / key).unlink()
    manifest = create_backup(state_dir, tmp_path / "b.tar")
    assert not any(entry.path.startswith("edge/") for entry in manifest.files)
    verify_backup_set(tmp_path / "b.tar")


def test_an_edge_chain_that_is_not_its_keys_is_found_by_verify(
    state_dir: Path, tmp_path: Path
) -> None:
    other = make_test_ca().issue(("example.org",))
    (state_dir / "edge" / "leaf.crt").write_bytes(other.chain_pem)
    create_backup(state_dir, tmp_path / "b.tar")
    with pytest.raises(BackupError, match=r"edge/leaf\.crt does not serve with edge/leaf\.key"):
        verify_backup_set(tmp_path / "b.tar")


def test_an_edge_key_that_is_not_a_key_is_found_by_verify(
    state_dir: Path, tmp_path: Path
) -> None:
    (state_dir / "edge" / "acme-account.key").write_bytes(os.urandom(48))
    create_backup(state_dir, tmp_path / "b.tar")
    with pytest.raises(BackupError, match=r"edge/acme-account\.key is not a PEM private key"):
        verify_backup_set(tmp_path / "b.tar")


def test_a_state_directory_without_an_owner_seed_is_not_backed_up(
    state_dir: Path, tmp_path: Path
) -> None:
    (state_dir / "owner.key").unlink()
    with pytest.raises(BackupError, match=r"owner\.key is missing"):
        create_backup(state_dir, tmp_path / "b.tar")
    assert list(tmp_path.glob("b.tar*")) == []


def test_tampering_with_any_member_is_found_and_named(state_dir: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.tar"
    create_backup(state_dir, good)
    archive = good.read_bytes()
    spans = _data_spans(archive)
    assert len(spans) == 8
    for name, start, end in spans:
        for at in {start, (start + end) // 2, end - 1}:
            bent = bytearray(archive)
            bent[at] ^= 0x01
            tampered = tmp_path / "tampered.tar"
            tampered.write_bytes(bytes(bent))
            with pytest.raises(BackupError) as found:
                verify_backup_set(tampered)
            assert name in str(found.value), (name, at, str(found.value))


def test_a_truncated_archive_is_found_and_the_file_named(
    state_dir: Path, tmp_path: Path
) -> None:
    good = tmp_path / "good.tar"
    create_backup(state_dir, good)
    archive = good.read_bytes()
    for name, start, end in _data_spans(archive):
        for cut in {start, (start + end) // 2, end - 1}:
            truncated = tmp_path / "truncated.tar"
            truncated.write_bytes(archive[:cut])
            with pytest.raises(BackupError) as found:
                verify_backup_set(truncated)
            assert name in str(found.value), (name, cut, str(found.value))
    last_end = _data_spans(archive)[-1][2]
    truncated.write_bytes(archive[: last_end + 512])
    with pytest.raises(BackupError, match="truncated"):
        verify_backup_set(truncated)


def _forge(members: list[tuple[str, bytes]], path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            tar.addfile(safe_tar.file_info(name, len(data), 0o600), io.BytesIO(data))
    path.write_bytes(raw.getvalue())


def test_a_consistent_archive_whose_seed_is_not_the_recorded_identity_is_refused(
    state_dir: Path, tmp_path: Path
) -> None:
    seed = (state_dir / "owner.key").read_bytes()
    impostor = Ed25519PrivateKey.generate()
    manifest = BackupManifest(
        owner_public_key=public_key_hex(impostor),
        generation=3,
        files=(BackupFile("owner.key", hashlib.sha256(seed).hexdigest(), 32),),
    )
    document = render_manifest(manifest)
    forged = tmp_path / "forged.tar"
    _forge(
        [(MANIFEST_NAME, document), (SIGNATURE_NAME, impostor.sign(document)), ("owner.key", seed)],
        forged,
    )
    with pytest.raises(BackupError, match=r"owner\.key .*not the recorded owner key"):
        verify_backup_set(forged)


@pytest.mark.parametrize(
    ("kind", "name", "problem"),
    [
        (tarfile.SYMTYPE, "owner.key", "link"),
        (tarfile.LNKTYPE, "config/x", "link"),
        (tarfile.CHRTYPE, "dev", "device"),
        (tarfile.REGTYPE, "../escape", "'..'"),
        (tarfile.REGTYPE, "/etc/shadow", "absolute"),
    ],
)
def test_unsafe_members_are_refused_by_name(
    state_dir: Path, tmp_path: Path, kind: bytes, name: str, problem: str
) -> None:
    good = tmp_path / "good.tar"
    create_backup(state_dir, good)
    raw = io.BytesIO(good.read_bytes())
    out = io.BytesIO()
    with tarfile.open(fileobj=raw) as src, tarfile.open(fileobj=out, mode="w") as dst:
        evil = tarfile.TarInfo(name)
        evil.type = kind
        evil.linkname = "/etc/shadow" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
        dst.addfile(evil, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member))
    bad = tmp_path / "bad.tar"
    bad.write_bytes(out.getvalue())
    with pytest.raises(BackupError, match=problem) as found:
        verify_backup_set(bad)
    assert name in str(found.value)


def test_a_restore_reproduces_the_owner_seed_byte_for_byte(
    state_dir: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "b.tar"
    create_backup(state_dir, archive)
    fresh = tmp_path / "fresh" / "valis-dns"
    verified = restore_backup(archive, fresh)
    assert (fresh / "owner.key").read_bytes() == (state_dir / "owner.key").read_bytes()
    assert (fresh / "owner.key").stat().st_mode & 0o777 == 0o600
    assert (fresh / "edge").stat().st_mode & 0o777 == 0o700
    assert _owner_key(fresh) == verified.owner_public_key == _owner_key(state_dir)
    assert (fresh / "store" / "manifest.json").read_bytes() == (
        state_dir / "store" / "manifest.json"
    ).read_bytes()
    assert not (fresh / "fabric.token").exists()


def test_a_restore_hands_the_state_directory_to_the_run_account(
    state_dir: Path, tmp_path: Path, run_account_dir: Path
) -> None:
    account = ensure_system_user(RUN_USER)
    archive = tmp_path / "b.tar"
    create_backup(state_dir, archive)
    fresh = run_account_dir / "fresh"
    restore_backup(archive, fresh, owner=(account.pw_uid, account.pw_gid))
    for path in [fresh, *fresh.rglob("*")]:
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (account.pw_uid, account.pw_gid), path


def test_a_restore_where_the_run_account_cannot_reach_is_refused_plainly(
    state_dir: Path, tmp_path: Path
) -> None:
    require_root()
    account = ensure_system_user(RUN_USER)
    archive = tmp_path / "b.tar"
    create_backup(state_dir, archive)
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    with pytest.raises(BackupError, match="every directory on its path"):
        restore_backup(archive, hidden / "fresh", owner=(account.pw_uid, account.pw_gid))
    assert list((hidden / "fresh").iterdir()) == []


def test_a_restore_replaces_the_database_bundle_a_provisioned_host_was_given(
    state_dir: Path, tmp_path: Path
) -> None:
    """The successor of an evacuation, provisioned with a database bundle of its own:
    the restore resumes into that state directory and leaves the backup's certificate."""
    for name, data in (("ca.crt", b"CA"), ("client.crt", b"A's"), ("client.key", b"A's key")):
        (state_dir / OPERATOR_STATE_TLS).mkdir(mode=0o700, exist_ok=True)
        (state_dir / OPERATOR_STATE_TLS / name).write_bytes(data)
    archive = tmp_path / "b.tar"
    create_backup(state_dir, archive)
    successor = tmp_path / "successor"
    (successor / OPERATOR_STATE_TLS).mkdir(mode=0o700, parents=True)
    for name, data in (("ca.crt", b"CA"), ("client.crt", b"B's"), ("client.key", b"B's key")):
        (successor / OPERATOR_STATE_TLS / name).write_bytes(data)

    restore_backup(archive, successor, resume=True)

    for name in ("ca.crt", "client.crt", "client.key"):
        assert (successor / OPERATOR_STATE_TLS / name).read_bytes() == (
            state_dir / OPERATOR_STATE_TLS / name).read_bytes()
    assert _owner_key(successor) == _owner_key(state_dir)


def test_a_restore_refuses_a_state_directory_that_is_not_empty(
    state_dir: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "b.tar"
    create_backup(state_dir, archive)
    seed = (state_dir / "owner.key").read_bytes()
    with pytest.raises(BackupError, match="not empty"):
        restore_backup(archive, state_dir)
    assert (state_dir / "owner.key").read_bytes() == seed


def test_the_cli_verifies_a_good_set_and_names_the_file_in_a_bad_one(
    state_dir: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "b.tar"
    created = subprocess.run(
        [VALIS, "backup", "create", "--state-dir", state_dir, "--out", archive],
        capture_output=True,
        text=True,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    verified = subprocess.run(
        [VALIS, "backup", "verify", archive], capture_output=True, text=True, check=False
    )
    assert verified.returncode == 0, verified.stderr
    assert _owner_key(state_dir) in verified.stdout

    start = next(s for n, s, _ in _data_spans(archive.read_bytes()) if n == "edge/leaf.key")
    bent = bytearray(archive.read_bytes())
    bent[start] ^= 0xFF
    archive.write_bytes(bytes(bent))
    refused = subprocess.run(
        [VALIS, "backup", "verify", archive], capture_output=True, text=True, check=False
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("valis: backup set: edge/leaf.key ")
    assert len(refused.stderr.splitlines()) == 1


SECRET = b"root's own secret, outside the state directory\n"


@pytest.mark.parametrize("directory", ["edge", "store", "dnssec"])
def test_a_link_in_place_of_a_directory_of_the_set_is_refused_not_followed(
    state_dir: Path, tmp_path: Path, directory: str
) -> None:
    """A directory of the set swapped for a symlink (one the walk never sees as a file)
    is refused by name; what lies where the link points never reaches an archive."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (state_dir / "dnssec").mkdir(mode=0o700, exist_ok=True)
    for name in [*(p.name for p in (state_dir / directory).iterdir()), "manifest.json"]:
        (elsewhere / name).write_bytes(SECRET)
    shutil.rmtree(state_dir / directory)
    (state_dir / directory).symlink_to(elsewhere, target_is_directory=True)
    out = tmp_path / "b.tar"
    with pytest.raises(BackupError, match=rf"{directory} is (a symlink|not a directory)"):
        create_backup(state_dir, out)
    assert list(tmp_path.glob("b.tar*")) == []


def test_a_directory_swapped_for_a_link_after_it_was_listed_is_not_followed(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race made deterministic: right after ``dnssec/`` is listed, the run account
    moves it aside and puts a link to another directory (holding files of the same names)
    in its place. The archive holds the listed directory's keys, never the link's."""
    keys = state_dir / "dnssec"
    keys.mkdir(mode=0o700)
    (keys / "Kexample.test+013+00001.pem").write_bytes(b"the node's own key\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "Kexample.test+013+00001.pem").write_bytes(SECRET)
    real_scandir = os.scandir
    swapped: list[bool] = []

    class Listed(list[os.DirEntry[str]]):
        def __enter__(self) -> Listed:
            return self

        def __exit__(self, *_: object) -> None:
            pass

    def listed(path: Any = ".") -> Any:
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path)
        if where != str(keys) or swapped:
            return real_scandir(path)
        with real_scandir(path) as entries:
            listing = Listed(entries)
        swapped.append(True)
        keys.rename(tmp_path / "moved-aside")
        keys.symlink_to(elsewhere, target_is_directory=True)
        return listing

    monkeypatch.setattr(os, "scandir", listed)
    out = tmp_path / "b.tar"
    create_backup(state_dir, out)
    monkeypatch.undo()
    assert swapped
    with tarfile.open(out) as archive:
        member = archive.extractfile("dnssec/Kexample.test+013+00001.pem")
        assert member is not None
        assert member.read() == b"the node's own key\n"
    assert SECRET not in out.read_bytes()


def test_as_root_a_file_the_run_account_could_not_read_is_not_backed_up(
    state_dir: Path, tmp_path: Path
) -> None:
    """Run as root over the run account's state directory, every read is the account's:
    a hard link to a root-only file, put where a key of the set should be, is refused."""
    require_root()
    account = ensure_system_user(RUN_USER)
    for path in [state_dir, *state_dir.rglob("*")]:
        os.lchown(path, account.pw_uid, account.pw_gid)
    secret = tmp_path / "root-only"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    own = (state_dir / "edge" / "leaf.key").read_bytes()
    (state_dir / "edge" / "leaf.key").unlink()
    os.link(secret, state_dir / "edge" / "leaf.key")
    out = tmp_path / "b.tar"
    with pytest.raises(BackupError, match=r"cannot read .*edge/leaf\.key.*run account"):
        create_backup(state_dir, out)
    assert list(tmp_path.glob("b.tar*")) == []
    (state_dir / "edge" / "leaf.key").unlink()
    (state_dir / "edge" / "leaf.key").write_bytes(own)
    os.chown(state_dir / "edge" / "leaf.key", account.pw_uid, account.pw_gid)
    create_backup(state_dir, out)  # the account's own files back up as before
    assert verify_backup_set(out).owner_public_key == _owner_key(state_dir)


def test_the_cli_names_the_fence_generation_a_set_is_taken_at(
    state_dir: Path, tmp_path: Path
) -> None:
    created = subprocess.run(
        [VALIS, "backup", "create", "--state-dir", state_dir,
         "--out", tmp_path / "origin-a-g{generation}.tar"],
        capture_output=True, text=True, check=False,
    )
    assert created.returncode == 0, created.stderr
    archive = tmp_path / "origin-a-g3.tar"
    assert verify_backup_set(archive).generation == 3
    assert f"to {archive} " in created.stdout
    assert "taken at fence generation 3" in created.stdout
    assert "back up again after every evacuate or restore" in created.stdout


def test_a_fenced_out_state_directory_is_not_backed_up(state_dir: Path, tmp_path: Path) -> None:
    """The old host after an evacuation: its set is older than the fence."""
    successor = FenceState(4, "origin-a@elsewhere#0123456789abcdef")
    record_verdict(state_dir, FencedOut(successor, FenceState(3, "origin-a@here#fedcba9876543210")))
    archive = tmp_path / "old.tar"
    with pytest.raises(BackupError, match=(
        f"fenced out by {successor.holder} at generation 4 .* could never be restored; take "
        "the backup on the node that holds the fence")):
        create_backup(state_dir, archive)
    assert not archive.exists()

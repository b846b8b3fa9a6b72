"""The backup set: the node's irreplaceable durable state, in one archive proved restorable.

The backup-critical set under a state directory is the owner seed (``owner.key``), the
store head (``store/manifest.json``), the configuration store, and the edge's ACME
account and leaf keys and the leaf's certificate chain when the node serves the edge
(``edge/acme-account.key``, ``edge/leaf.key``, ``edge/leaf.crt``: a restored node serves
the same certificate without asking its CA again), and the zone-signing keys under
``dnssec/`` when it signs (a restored node's signatures validate under the same DS), and
the client certificate under ``operator-state-tls/`` when it reaches operator state on a
database host (the successor of an evacuation connects with it).
``create_backup`` writes them into one tar archive, atomically and mode 0600, with
``BACKUP-MANIFEST.json`` (every file's sha256 and size, the owner public key, the store
generation) and ``BACKUP-MANIFEST.sig`` (the owner key's Ed25519 signature over the
manifest bytes, so a manifest edited after the fact is found out).

``verify_backup_set`` proves an archive restorable rather than merely well-formed: it
restores into a scratch root with the same code ``restore_backup`` uses, reads the
restored bytes back and compares them with the archive's and with the recorded hashes,
and derives the identity from the restored seed and compares it with the recorded public
key. A tampered or truncated archive fails with the file it found wrong.

The archive is deterministic for a given state (sorted members, zero mtimes, root
ownership), and small: the set is keys and a few documents, never zone data, which
lives in the operator-state database.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from valis_core import safe_tar
from valis_core.acting_as import acting_as
from valis_core.atomic import write_atomic
from valis_core.edge.acme_store import backed_up_problem
from valis_core.fence import MAX_GENERATION
from valis_core.fence_verdict import read_verdict
from valis_core.identity.custody import SEED_SIZE, public_key_hex
from valis_core.ops.backup_manifest import (
    MANIFEST_NAME,
    MAX_ARCHIVE_BYTES,
    MAX_FILES,
    SIGNATURE_NAME,
    BackupError,
    BackupFile,
    BackupManifest,
    parse_manifest,
    render_manifest,
    wrong,
)
from valis_core.ops.backup_read import opened_state_dir, read_backup_files, read_beneath
from valis_core.safe_tar import TarDefect
from valis_core.state_layout import CONFIG_STORE, OPERATOR_STATE_TLS, SIGNING_KEYS, STORE_HEAD
from valis_core.state_layout import KEYFILE as KEYFILE_NAME
from valis_core.store.manifest import ManifestError
from valis_core.store.manifest import loads as load_manifest

__all__ = [
    "MANIFEST_NAME",
    "SIGNATURE_NAME",
    "BackupError",
    "BackupFile",
    "BackupManifest",
    "VerifiedBackup",
    "backup_path",
    "build_backup_bytes",
    "create_backup",
    "read_backup_files",
    "read_backup_set",
    "render_manifest",
    "restore_backup",
    "verify_backup_set",
]

ARCHIVE_MODE = 0o600
FILE_MODE = 0o600
DIR_MODE = 0o700
_SIGNATURE_SIZE = 64


@attrs.frozen
class VerifiedBackup:
    """A backup set proved restorable: its manifest, restored and re-derived."""

    archive: Path
    manifest: BackupManifest

    @property
    def owner_public_key(self) -> str:
        return self.manifest.owner_public_key

    @property
    def generation(self) -> int:
        return self.manifest.generation


def _seed_key(seed: bytes, where: str) -> Ed25519PrivateKey:
    if len(seed) != SEED_SIZE:
        raise BackupError(
            f"backup: the owner seed {where} holds {len(seed)} bytes, not {SEED_SIZE}"
        )
    return Ed25519PrivateKey.from_private_bytes(seed)


def build_backup_bytes(state_dir: Path) -> tuple[bytes, BackupManifest]:
    """The archive bytes of ``state_dir``'s backup set and the manifest they carry."""
    contents = read_backup_files(state_dir)
    if sum(len(data) for data in contents.values()) > MAX_ARCHIVE_BYTES:
        raise BackupError(f"backup: the set under {state_dir} exceeds {MAX_ARCHIVE_BYTES} bytes")
    key = _seed_key(contents[KEYFILE_NAME], f"at {state_dir / KEYFILE_NAME}")
    try:
        generation = load_manifest(contents[STORE_HEAD]).generation
    except ManifestError as exc:
        raise BackupError(
            f"backup: the store head {state_dir / STORE_HEAD} is unreadable ({exc}); "
            "refusing to back up a store that could not be restored"
        ) from None
    try:
        manifest = BackupManifest(
            owner_public_key=public_key_hex(key),
            generation=generation,
            files=tuple(
                BackupFile(path, hashlib.sha256(data).hexdigest(), len(data))
                for path, data in sorted(contents.items())
            ),
        )
    except ValueError as exc:
        raise BackupError(f"backup: the set under {state_dir} cannot be recorded: {exc}") from None
    manifest_bytes = render_manifest(manifest)
    members = [
        (MANIFEST_NAME, manifest_bytes),
        (SIGNATURE_NAME, key.sign(manifest_bytes)),
        *sorted(contents.items()),
    ]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, data in members:
            archive.addfile(safe_tar.file_info(path, len(data), FILE_MODE), io.BytesIO(data))
    return raw.getvalue(), manifest


GENERATION_FIELD = "{generation}"
"""In an archive's name, replaced by the generation the set is taken at."""


def backup_path(out: Path, generation: int) -> Path:
    """Where a set taken at ``generation`` is written: ``out`` with ``{generation}`` in its
    name replaced by it (``node-a-g{generation}.tar``), so the file says which fence
    generation it can restore after."""
    return out.with_name(out.name.replace(GENERATION_FIELD, str(generation)))


def create_backup(state_dir: Path, out: Path) -> BackupManifest:
    """Write ``state_dir``'s backup set to ``out`` (atomically, mode 0600; named by
    ``backup_path``). A state directory whose instance was fenced out is refused: its set
    is older than the fence, and could never be restored."""
    data, manifest = build_backup_bytes(state_dir)
    verdict = read_verdict(state_dir, manifest.generation)
    if verdict is not None:
        raise BackupError(
            f"backup: {state_dir} was fenced out by {verdict.fence.holder} at generation "
            f"{verdict.fence.generation} (its store is at generation {manifest.generation}), "
            "so a backup of it could never be restored; take the backup on the node that "
            "holds the fence"
        )
    out = backup_path(out, manifest.generation)
    try:
        write_atomic(out, data, mode=ARCHIVE_MODE)
    except OSError as exc:
        raise BackupError(f"backup: cannot write {out}: {exc.strerror or exc}") from exc
    return manifest


# -- reading and verifying --------------------------------------------------------------


def _read_archive(archive: Path) -> bytes:
    try:
        with open(archive, "rb") as handle:
            data = handle.read(MAX_ARCHIVE_BYTES + 1)
    except OSError as exc:
        raise BackupError(f"backup set {archive}: cannot read it: {exc.strerror or exc}") from exc
    if len(data) > MAX_ARCHIVE_BYTES:
        raise BackupError(f"backup set {archive}: larger than any backup set ({MAX_ARCHIVE_BYTES})")
    return data


def _members(data: bytes) -> dict[str, bytes]:
    """Every regular member's bytes by path; any unsafe or damaged member refused by name."""
    contents: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for path, member in safe_tar.members(archive, limit=MAX_FILES + 2):
                if member.isdir():
                    raise TarDefect(member.name, "is a directory; a backup set holds files only")
                contents[path] = safe_tar.read_member(archive, member)
    except TarDefect as defect:
        raise wrong(
            defect.member if defect.member is not None else "the archive", defect.problem
        ) from None
    except safe_tar.READ_ERRORS as exc:
        raise wrong("the archive", f"is not a readable tar archive ({exc})") from None
    return contents


def read_backup_set(data: bytes) -> tuple[BackupManifest, dict[str, bytes]]:
    """The manifest and every file of an archive, checked against each other: signature,
    membership, sizes and hashes. Raises ``BackupError`` naming the file found wrong."""
    contents = _members(data)
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        if name not in contents:
            raise wrong(name, "is missing")
    manifest_bytes = contents.pop(MANIFEST_NAME)
    signature = contents.pop(SIGNATURE_NAME)
    manifest = parse_manifest(manifest_bytes)
    if len(signature) != _SIGNATURE_SIZE:
        raise wrong(SIGNATURE_NAME, f"holds {len(signature)} bytes, not a signature")
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(manifest.owner_public_key))
    try:
        public.verify(signature, manifest_bytes)
    except InvalidSignature:
        raise wrong(
            MANIFEST_NAME,
            f"does not match {SIGNATURE_NAME}, its signature by the recorded owner key "
            "(one of the two was altered)",
        ) from None
    listed = {entry.path: entry for entry in manifest.files}
    for path in sorted(contents.keys() - listed.keys()):
        raise wrong(path, f"is in the archive but not listed in {MANIFEST_NAME}")
    for path in sorted(listed.keys() - contents.keys()):
        raise wrong(path, f"is listed in {MANIFEST_NAME} but missing from the archive")
    for entry in manifest.files:
        data_ = contents[entry.path]
        if len(data_) != entry.size or hashlib.sha256(data_).hexdigest() != entry.sha256:
            raise wrong(entry.path, f"does not match its sha256 in {MANIFEST_NAME}")
    return manifest, contents


def _materialise(contents: dict[str, bytes], root: Path) -> None:
    """Write each file under ``root`` (atomically, mode 0600; directories 0700)."""
    for path, data in sorted(contents.items()):
        target = root / path
        made = []
        parent = target.parent
        while not parent.exists():
            made.append(parent)
            parent = parent.parent
        for directory in reversed(made):
            directory.mkdir(mode=DIR_MODE)
        write_atomic(target, data, mode=FILE_MODE)


def _prove_restored(
    manifest: BackupManifest,
    contents: dict[str, bytes],
    root: Path,
    what: str,
    *,
    kept: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Read back what was restored under ``root``: bytes, hashes, and the identity
    (``kept``: files an earlier restore left, already compared)."""
    for entry in manifest.files:
        if entry.path in kept:
            continue
        restored = (root / entry.path).read_bytes()
        if restored != contents[entry.path]:
            raise BackupError(
                f"{what}: {entry.path} restored to bytes other than the archive's; the "
                "restore target is not holding what was written (check the filesystem)"
            )
        if hashlib.sha256(restored).hexdigest() != entry.sha256:
            raise wrong(entry.path, f"restores to bytes that do not match {MANIFEST_NAME}")
    for entry in manifest.files:
        if entry.path.startswith(SIGNING_KEYS + "/") and entry.path.endswith(".pem"):
            _check_signing_key(root / entry.path, entry.path)
    seed = (root / KEYFILE_NAME).read_bytes()
    if len(seed) != SEED_SIZE:
        raise wrong(KEYFILE_NAME, f"restores to {len(seed)} bytes, not a {SEED_SIZE}-byte seed")
    derived = public_key_hex(Ed25519PrivateKey.from_private_bytes(seed))
    if derived != manifest.owner_public_key:
        raise wrong(
            KEYFILE_NAME,
            f"restores to a seed whose public key {derived} is not the recorded owner key "
            f"{manifest.owner_public_key}",
        )
    edge = backed_up_problem(contents)
    if edge is not None:
        raise wrong(*edge)


def _check_signing_key(path: Path, name: str) -> None:
    """A restored zone-signing key must load as one, or the restored node could not sign."""
    from valis_core.dns.dnssec.zone_keys import ZoneKeyError, read_key_file

    try:
        read_key_file(path)
    except ZoneKeyError as exc:
        raise wrong(name, f"restores to no usable signing key ({exc})") from None


def _verify(archive: Path) -> tuple[BackupManifest, dict[str, bytes]]:
    manifest, contents = read_backup_set(_read_archive(archive))
    with tempfile.TemporaryDirectory(prefix="valis-backup-verify-") as scratch:
        root = Path(scratch) / "state"
        root.mkdir(mode=DIR_MODE)
        _materialise(contents, root)
        _prove_restored(manifest, contents, root, f"backup set {archive}")
    return manifest, contents


def verify_backup_set(archive: Path) -> VerifiedBackup:
    """Prove ``archive`` a restorable backup set by restoring it into a scratch root."""
    manifest, _ = _verify(archive)
    return VerifiedBackup(archive, manifest)


def _claimed_head(existing: bytes, restored: bytes) -> bool:
    """Whether ``existing`` is the backup's store head as a condense's claim left it:
    the same manifest, one generation on."""
    try:
        mine, theirs = load_manifest(existing), load_manifest(restored)
    except ManifestError:
        return False
    return (
        theirs.generation < MAX_GENERATION
        and attrs.evolve(theirs, generation=theirs.generation + 1) == mine
    )


def _resumable(contents: dict[str, bytes], state_dir: Path) -> set[str]:
    """The paths of a restore into ``state_dir`` already done (left as they are), when the
    directory holds this backup set's own earlier restore; raise when it holds anything
    else of the set.

    Files a restore writes identically are done; the store head may also stand one
    generation on (the claim a condense records after the restore); the configuration
    store is written again (evacuate renders it anew), and so is the client certificate
    under ``operator-state-tls/`` (a host provisioned with its own database bundle is
    given the backup's: the restored node is the backed-up node's durable identity).
    Anything else under a backed-up name that differs — another owner seed above all — is
    another node's state.
    """
    done: set[str] = set()
    with opened_state_dir(state_dir) as root:
        existing_files = {path: read_beneath(root, state_dir, path) for path in contents}
    for path, data in sorted(contents.items()):
        existing = existing_files[path]
        if existing is None:
            continue
        if existing == data or (path == STORE_HEAD and _claimed_head(existing, data)):
            done.add(path)
            continue
        if path.startswith((CONFIG_STORE + "/", OPERATOR_STATE_TLS + "/")):
            continue
        raise BackupError(
            f"restore: {state_dir} already holds a {path} other than this backup set's, so "
            "it is not an earlier restore of this set to resume; restore into a fresh state "
            "directory (move this one aside first: its owner seed may be the only copy)"
        )
    return done


def restore_backup(
    archive: Path,
    state_dir: Path,
    *,
    owner: tuple[int, int] | None = None,
    resume: bool = False,
) -> VerifiedBackup:
    """Restore ``archive`` into ``state_dir``, which must be absent or empty.

    The archive is first proved restorable (as ``verify_backup_set`` does); then each file
    is written atomically, mode 0600 (directories 0700), and read back. With ``owner``
    (uid, gid), the state directory is chowned to it and everything in it is written as
    that account (``acting_as``), so it is the account's.

    With ``resume``, ``state_dir`` may also hold an earlier restore of this same set that
    stopped part-way (a condense to be re-run): what it already holds of the set is kept,
    the rest written; a file of the set it holds otherwise refuses the restore, and the
    directory is left as it was.
    """
    manifest, contents = _verify(archive)
    if state_dir.is_symlink() or (state_dir.exists() and not state_dir.is_dir()):
        raise BackupError(f"restore: {state_dir} is not a directory")
    fresh = not (state_dir.exists() and any(state_dir.iterdir()))
    if not fresh and not resume:
        raise BackupError(
            f"restore: {state_dir} is not empty; restore only into a fresh state directory "
            "(move the old one aside first: its owner seed may be the only copy)"
        )
    with acting_as(owner):
        done = set() if fresh else _resumable(contents, state_dir)
    state_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if owner is not None:
        os.chown(state_dir, *owner)
    try:
        with acting_as(owner):
            _materialise({p: d for p, d in contents.items() if p not in done}, state_dir)
    except OSError as exc:
        if fresh:
            # The directory was empty: take back whatever this restore wrote.
            for child in state_dir.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        as_whom = " as the run account" if owner is not None else ""
        raise BackupError(
            f"restore: cannot write into {state_dir}{as_whom}: {exc.strerror or exc}; "
            "every directory on its path must be traversable by it, and it writable"
        ) from exc
    _prove_restored(manifest, contents, state_dir, f"restore into {state_dir}", kept=done)
    return VerifiedBackup(archive, manifest)

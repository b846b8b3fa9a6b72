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

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
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
from valis_core.errors import ValisError
from valis_core.fence import MAX_GENERATION
from valis_core.identity.custody import SEED_SIZE, public_key_hex
from valis_core.resident.fence_verdict import read_verdict
from valis_core.safe_tar import TarDefect
from valis_core.state_layout import (
    CONFIG_STORE,
    EDGE_BACKED_UP,
    OPERATOR_STATE_TLS,
    SIGNING_KEYS,
    STORE_HEAD,
)
from valis_core.state_layout import KEYFILE as KEYFILE_NAME
from valis_core.store.manifest import ManifestError
from valis_core.store.manifest import loads as load_manifest

MANIFEST_NAME = "BACKUP-MANIFEST.json"
SIGNATURE_NAME = "BACKUP-MANIFEST.sig"
FORMAT = 1
ARCHIVE_MODE = 0o600
FILE_MODE = 0o600
DIR_MODE = 0o700
MAX_ARCHIVE_BYTES = 64 << 20
MAX_FILES = 1000
_SIGNATURE_SIZE = 64


class BackupError(ValisError):
    """A backup that cannot be made, or an archive that is not a restorable backup set."""


@attrs.frozen
class BackupFile:
    """One file of the set: its path under the state directory, hash and size."""

    path: str
    sha256: str
    size: int


@attrs.frozen
class BackupManifest:
    """What ``BACKUP-MANIFEST.json`` records."""

    owner_public_key: str
    generation: int
    files: tuple[BackupFile, ...]


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


# -- creating --------------------------------------------------------------------------


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MAX_DEPTH = 8


def _refusal(shown: Path, parent: int, name: str, exc: OSError, what: str) -> BackupError:
    try:
        linked = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        linked = False
    if linked:
        return BackupError(
            f"backup: {shown} is a symlink; the backup set is read only from the state "
            "directory's own files and directories, never through a link (replace it with "
            f"the {what} itself)"
        )
    if isinstance(exc, NotADirectoryError) and what == "directory":
        return BackupError(f"backup: {shown} is not a directory")
    return BackupError(
        f"backup: cannot read {shown}: {exc.strerror or exc}; everything in the backup set "
        "must be readable by the state directory's owner (the run account), as the resident "
        "reads it"
    )


def _open_dir(parent: int, name: str, shown: Path) -> int | None:
    """A descriptor of directory ``name`` beneath ``parent``, never through a symlink;
    None when there is none."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refusal(shown, parent, name, exc, "directory") from exc


def _read_file(parent: int, name: str, shown: Path) -> bytes | None:
    """The bytes of regular file ``name`` beneath ``parent``, never through a symlink;
    None when there is none."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refusal(shown, parent, name, exc, "file") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BackupError(f"backup: {shown} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(MAX_ARCHIVE_BYTES + 1)
    finally:
        os.close(fd)


def _read_beneath(root: int, state_dir: Path, path: str) -> bytes | None:
    """The bytes of ``path`` (relative) under the directory open as ``root``, every
    component opened relative to the one before it and none through a symlink, so a
    directory swapped for a link between any two steps is refused, never followed."""
    *directories, name = path.split("/")
    fds: list[int] = []
    try:
        parent = root
        for depth, directory in enumerate(directories):
            fd = _open_dir(parent, directory, state_dir.joinpath(*directories[: depth + 1]))
            if fd is None:
                return None
            fds.append(fd)
            parent = fd
        return _read_file(parent, name, state_dir / path)
    finally:
        for fd in fds:
            os.close(fd)


def _read_tree(
    parent: int, state_dir: Path, directory: str, out: dict[str, bytes], depth: int = 0
) -> None:
    """Every file beneath ``directory`` (under ``parent``) into ``out`` by relative path,
    listed and read through the same directory descriptors: what is read is what was
    listed, never a link's target."""
    shown = state_dir / directory
    fd = _open_dir(parent, directory.rsplit("/", 1)[-1], shown)
    if fd is None:
        return
    try:
        if depth > _MAX_DEPTH:
            raise BackupError(f"backup: {shown} is nested deeper than {_MAX_DEPTH} directories")
        with os.scandir(fd) as entries:
            names = sorted(
                (entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries
            )
        for name, is_dir in names:
            if len(out) > MAX_FILES:
                raise BackupError(f"backup: the set under {state_dir} exceeds {MAX_FILES} files")
            relative = f"{directory}/{name}"
            if is_dir:
                _read_tree(fd, state_dir, relative, out, depth + 1)
                continue
            data = _read_file(fd, name, state_dir / relative)
            if data is not None:
                out[relative] = data
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened(state_dir: Path) -> Iterator[int]:
    """A descriptor of the state directory itself (the path the operator named)."""
    try:
        root = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise BackupError(
            f"backup: cannot open the state directory {state_dir}: {exc.strerror or exc}"
        ) from exc
    try:
        yield root
    finally:
        os.close(root)


def _owner(fd: int) -> tuple[int, int] | None:
    """The account that owns the state directory open as ``fd``, when it is not root."""
    info = os.fstat(fd)
    return None if info.st_uid == 0 else (info.st_uid, info.st_gid)


def read_backup_files(state_dir: Path) -> dict[str, bytes]:
    """The backup-critical files present under ``state_dir``, by relative path.

    The owner seed and the store head are required; the configuration store, the
    edge's keys and certificate, the zone-signing keys and the operator-state client
    certificate (a node that reaches a database host) are taken when present. Every
    file is opened relative to its directory's descriptor and nothing through a symlink
    (a link in place of a file or directory refuses the backup), and when this is root
    every read is done as the state directory's owner (``acting_as``): no file outside
    the state directory, and none its owner could not read, reaches the archive.
    """
    contents: dict[str, bytes] = {}
    with _opened(state_dir) as root, acting_as(_owner(root)):
        for required in (KEYFILE_NAME, STORE_HEAD):
            data = _read_beneath(root, state_dir, required)
            if data is None:
                raise BackupError(
                    f"backup: {state_dir / required} is missing; a state directory "
                    "without its "
                    f"{'owner seed' if required == KEYFILE_NAME else 'store head'} is "
                    "not a node to back up (was it condensed and booted?)"
                )
            contents[required] = data
        for optional in EDGE_BACKED_UP:
            data = _read_beneath(root, state_dir, optional)
            if data is not None:
                contents[optional] = data
        for directory in (CONFIG_STORE, SIGNING_KEYS, OPERATOR_STATE_TLS):
            _read_tree(root, state_dir, directory, contents)
    return dict(sorted(contents.items()))


def _seed_key(seed: bytes, where: str) -> Ed25519PrivateKey:
    if len(seed) != SEED_SIZE:
        raise BackupError(
            f"backup: the owner seed {where} holds {len(seed)} bytes, not {SEED_SIZE}"
        )
    return Ed25519PrivateKey.from_private_bytes(seed)


def render_manifest(manifest: BackupManifest) -> bytes:
    """The canonical bytes of a backup manifest."""
    document = {
        "format": FORMAT,
        "owner_public_key": manifest.owner_public_key,
        "generation": manifest.generation,
        "files": [attrs.asdict(entry) for entry in manifest.files],
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("ascii")


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
    manifest = BackupManifest(
        owner_public_key=public_key_hex(key),
        generation=generation,
        files=tuple(
            BackupFile(path, hashlib.sha256(data).hexdigest(), len(data))
            for path, data in sorted(contents.items())
        ),
    )
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


def _wrong(name: str, problem: str) -> BackupError:
    return BackupError(f"backup set: {name} {problem}; this archive cannot be trusted to restore")


def _parse_manifest(data: bytes) -> BackupManifest:
    def bad(problem: str) -> BackupError:
        return _wrong(MANIFEST_NAME, problem)

    try:
        document = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"is not valid JSON ({exc})") from None
    keys = {"format", "owner_public_key", "generation", "files"}
    if not isinstance(document, dict) or set(document) != keys:
        raise bad(f"must be an object with exactly {', '.join(sorted(keys))}")
    if document["format"] != FORMAT:
        raise bad(f"has format {document['format']!r}; this valis reads format {FORMAT}")
    public = document["owner_public_key"]
    if not isinstance(public, str) or len(public) != 64 or public.strip("0123456789abcdef"):
        raise bad("records an owner public key that is not 64 lowercase hex digits")
    generation = document["generation"]
    if type(generation) is not int or generation < 0:
        raise bad("records a generation that is not a non-negative integer")
    entries = document["files"]
    if not isinstance(entries, list) or len(entries) > MAX_FILES:
        raise bad(f'"files" must be a list of at most {MAX_FILES} entries')
    files = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {"path", "sha256", "size"}:
            raise bad('each file must be an object with exactly "path", "sha256" and "size"')
        path, digest, size = entry["path"], entry["sha256"], entry["size"]
        if not isinstance(path, str) or not safe_tar.is_plain_relative(path):
            raise bad(f"lists {path!r}, which is not a plain relative path")
        if path in (MANIFEST_NAME, SIGNATURE_NAME):
            raise bad(f"lists {path}")
        if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
            raise bad(f"gives {path} a sha256 that is not 64 lowercase hex digits")
        if type(size) is not int or size < 0:
            raise bad(f"gives {path} a size that is not a non-negative integer")
        files.append(BackupFile(path, digest, size))
    paths = [entry.path for entry in files]
    if len(set(paths)) != len(paths):
        raise bad("lists a file twice")
    clash = safe_tar.file_beneath_file(paths)
    if clash is not None:
        raise bad(f"lists {clash[0]} as a file and also {clash[1]} beneath it")
    if KEYFILE_NAME not in paths:
        raise bad(f"does not list the owner seed {KEYFILE_NAME}")
    return BackupManifest(public, generation, tuple(sorted(files, key=lambda f: f.path)))


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
        raise _wrong(
            defect.member if defect.member is not None else "the archive", defect.problem
        ) from None
    except safe_tar.READ_ERRORS as exc:
        raise _wrong("the archive", f"is not a readable tar archive ({exc})") from None
    return contents


def read_backup_set(data: bytes) -> tuple[BackupManifest, dict[str, bytes]]:
    """The manifest and every file of an archive, checked against each other: signature,
    membership, sizes and hashes. Raises ``BackupError`` naming the file found wrong."""
    contents = _members(data)
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        if name not in contents:
            raise _wrong(name, "is missing")
    manifest_bytes = contents.pop(MANIFEST_NAME)
    signature = contents.pop(SIGNATURE_NAME)
    manifest = _parse_manifest(manifest_bytes)
    if len(signature) != _SIGNATURE_SIZE:
        raise _wrong(SIGNATURE_NAME, f"holds {len(signature)} bytes, not a signature")
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(manifest.owner_public_key))
    try:
        public.verify(signature, manifest_bytes)
    except InvalidSignature:
        raise _wrong(
            MANIFEST_NAME,
            f"does not match {SIGNATURE_NAME}, its signature by the recorded owner key "
            "(one of the two was altered)",
        ) from None
    listed = {entry.path: entry for entry in manifest.files}
    for path in sorted(contents.keys() - listed.keys()):
        raise _wrong(path, f"is in the archive but not listed in {MANIFEST_NAME}")
    for path in sorted(listed.keys() - contents.keys()):
        raise _wrong(path, f"is listed in {MANIFEST_NAME} but missing from the archive")
    for entry in manifest.files:
        data_ = contents[entry.path]
        if len(data_) != entry.size or hashlib.sha256(data_).hexdigest() != entry.sha256:
            raise _wrong(entry.path, f"does not match its sha256 in {MANIFEST_NAME}")
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
            raise _wrong(entry.path, f"restores to bytes that do not match {MANIFEST_NAME}")
    for entry in manifest.files:
        if entry.path.startswith(SIGNING_KEYS + "/") and entry.path.endswith(".pem"):
            _check_signing_key(root / entry.path, entry.path)
    seed = (root / KEYFILE_NAME).read_bytes()
    if len(seed) != SEED_SIZE:
        raise _wrong(KEYFILE_NAME, f"restores to {len(seed)} bytes, not a {SEED_SIZE}-byte seed")
    derived = public_key_hex(Ed25519PrivateKey.from_private_bytes(seed))
    if derived != manifest.owner_public_key:
        raise _wrong(
            KEYFILE_NAME,
            f"restores to a seed whose public key {derived} is not the recorded owner key "
            f"{manifest.owner_public_key}",
        )
    edge = backed_up_problem(contents)
    if edge is not None:
        raise _wrong(*edge)


def _check_signing_key(path: Path, name: str) -> None:
    """A restored zone-signing key must load as one, or the restored node could not sign."""
    from valis_core.dns.dnssec.zone_keys import ZoneKeyError, read_key_file

    try:
        read_key_file(path)
    except ZoneKeyError as exc:
        raise _wrong(name, f"restores to no usable signing key ({exc})") from None


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
    with _opened(state_dir) as root:
        existing_files = {path: _read_beneath(root, state_dir, path) for path in contents}
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

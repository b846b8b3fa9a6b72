"""The backup set's manifest, ``BACKUP-MANIFEST.json``: every file's path, sha256 and
size, the owner public key and the store generation the set was taken at. The owner
key's Ed25519 signature over these bytes (``BACKUP-MANIFEST.sig``) travels beside it, so
the bytes are canonical (sorted keys, one-space indent, files in path order) and a
manifest edited after the fact is found out.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from valis_core import safe_tar
from valis_core.documents import Document, is_sha256, shown
from valis_core.errors import ValisError
from valis_core.state_layout import KEYFILE as KEYFILE_NAME

MANIFEST_NAME = "BACKUP-MANIFEST.json"
SIGNATURE_NAME = "BACKUP-MANIFEST.sig"
FORMAT = 1
MAX_ARCHIVE_BYTES = 64 << 20
MAX_FILES = 1000


class BackupError(ValisError):
    """A backup that cannot be made, or an archive that is not a restorable backup set."""


def _check_path(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or not safe_tar.is_plain_relative(value):
        raise ValueError(f"path {shown(value)} is not a plain relative path")
    if value in (MANIFEST_NAME, SIGNATURE_NAME):
        raise ValueError(f"path {value} names the manifest itself")


def _check_sha256(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not is_sha256(value):
        raise ValueError(f"{attribute.name} {shown(value)} is not 64 lowercase hex digits")


def _check_count(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} {shown(value)} is not a non-negative integer")


@attrs.frozen
class BackupFile:
    """One file of the set: its path under the state directory, hash and size."""

    path: str = attrs.field(validator=_check_path)
    sha256: str = attrs.field(validator=_check_sha256)
    size: int = attrs.field(validator=_check_count)


def _in_path_order(files: Iterable[BackupFile]) -> tuple[BackupFile, ...]:
    return tuple(sorted(files, key=lambda entry: entry.path))


def _check_files(
    _: object, attribute: attrs.Attribute[tuple[BackupFile, ...]], value: tuple[BackupFile, ...]
) -> None:
    if len(value) > MAX_FILES:
        raise ValueError(f"files lists {len(value)} files, more than a set holds ({MAX_FILES})")
    paths = [entry.path for entry in value]
    twice = sorted({path for path in paths if paths.count(path) > 1})
    if twice:
        raise ValueError(f"files lists {twice[0]} twice")
    clash = safe_tar.file_beneath_file(paths)
    if clash is not None:
        raise ValueError(f"files lists {clash[0]} as a file and also {clash[1]} beneath it")
    if KEYFILE_NAME not in paths:
        raise ValueError(f"files does not list the owner seed {KEYFILE_NAME}")


@attrs.frozen
class BackupManifest:
    """What ``BACKUP-MANIFEST.json`` records; files in path order."""

    owner_public_key: str = attrs.field(validator=_check_sha256)
    generation: int = attrs.field(validator=_check_count)
    files: tuple[BackupFile, ...] = attrs.field(converter=_in_path_order, validator=_check_files)


DOCUMENT: Document[BackupManifest] = Document(
    kind=BackupManifest,
    name=f"backup set: {MANIFEST_NAME}",
    error=BackupError,
    remedy="this archive cannot be trusted to restore",
    format=FORMAT,
    indent=1,
    encoding="ascii",
)
"""``BACKUP-MANIFEST.json`` as a JSON document (``valis_core.documents``)."""


def render_manifest(manifest: BackupManifest) -> bytes:
    """The canonical bytes of a backup manifest (what its signature signs)."""
    return DOCUMENT.render(manifest)


def wrong(name: str, problem: str) -> BackupError:
    return BackupError(f"backup set: {name} {problem}; this archive cannot be trusted to restore")


def parse_manifest(data: bytes) -> BackupManifest:
    """The manifest in ``data``; anything else raises ``BackupError`` naming the field."""
    return DOCUMENT.read(data)

"""The backup set's manifest, ``BACKUP-MANIFEST.json``: every file's path, sha256 and
size, the owner public key and the store generation the set was taken at. The owner
key's Ed25519 signature over these bytes (``BACKUP-MANIFEST.sig``) travels beside it, so
the bytes are canonical (sorted keys, one-space indent, files in path order) and a
manifest edited after the fact is found out.
"""

from __future__ import annotations

import json

import attrs

from valis_core import safe_tar
from valis_core.errors import ValisError
from valis_core.state_layout import KEYFILE as KEYFILE_NAME

MANIFEST_NAME = "BACKUP-MANIFEST.json"
SIGNATURE_NAME = "BACKUP-MANIFEST.sig"
FORMAT = 1
MAX_ARCHIVE_BYTES = 64 << 20
MAX_FILES = 1000


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



def render_manifest(manifest: BackupManifest) -> bytes:
    """The canonical bytes of a backup manifest."""
    document = {
        "format": FORMAT,
        "owner_public_key": manifest.owner_public_key,
        "generation": manifest.generation,
        "files": [attrs.asdict(entry) for entry in manifest.files],
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("ascii")


def wrong(name: str, problem: str) -> BackupError:
    return BackupError(f"backup set: {name} {problem}; this archive cannot be trusted to restore")


def parse_manifest(data: bytes) -> BackupManifest:
    def bad(problem: str) -> BackupError:
        return wrong(MANIFEST_NAME, problem)

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

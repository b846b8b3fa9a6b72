"""The store head on disk: ``store/manifest.json`` under a state directory.

The head's manifest says which generation this store is; the instance fence projects
that generation. A state directory with no head yet is materialised from genesis — the
default manifest at generation 0 (``make_default_manifest``) — which is the whole of
what deploy-from-genesis writes here before the first boot. The head is created
exclusively (an existing head is never replaced by genesis, even by a racing writer)
and atomically, mode 0600, so a reader sees a whole manifest or none.
"""

from __future__ import annotations

from pathlib import Path

from valis_core.atomic import create_exclusive
from valis_core.state_layout import head_path
from valis_core.store.manifest import Manifest, ManifestError, dumps, loads, make_default_manifest

HEAD_MODE = 0o600
DIR_MODE = 0o700
_MAX_HEAD_BYTES = 1 << 20

__all__ = ["HEAD_MODE", "head_path", "materialise_genesis", "read_store_head"]


def read_store_head(state_dir: Path) -> Manifest | None:
    """The head's manifest, or ``None`` when the state directory has no head yet."""
    path = head_path(state_dir)
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_HEAD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(
            f"store head {path} cannot be read: {exc.strerror or exc}; it must be readable "
            "by the run account"
        ) from exc
    if len(data) > _MAX_HEAD_BYTES:
        raise ManifestError(f"store head {path} is larger than any manifest; restore it")
    try:
        return loads(data)
    except ManifestError as exc:
        raise ManifestError(f"store head {path}: {exc}") from exc


def materialise_genesis(state_dir: Path) -> tuple[Manifest, bool]:
    """The head's manifest, writing the genesis manifest first if there is no head.

    Returns the manifest and whether this call wrote it.
    """
    found = read_store_head(state_dir)
    if found is not None:
        return found, False
    path = head_path(state_dir)
    genesis = make_default_manifest()
    try:
        path.parent.mkdir(mode=DIR_MODE, exist_ok=True)
        create_exclusive(path, dumps(genesis), mode=HEAD_MODE)
    except FileExistsError:
        raced = read_store_head(state_dir)
        if raced is None:  # pragma: no cover - needs the head removed mid-race
            raise ManifestError(f"store head {path} vanished while being created") from None
        return raced, False
    except OSError as exc:
        raise ManifestError(
            f"cannot write the genesis store head {path}: {exc.strerror or exc}"
        ) from exc
    return genesis, True

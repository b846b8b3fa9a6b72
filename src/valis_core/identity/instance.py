"""The instance token: which condensed state directory a fence holder is.

A node's name and location say where it serves, not which copy of its state is writing:
a second genesis node configured alike, a node whose state directory was made anew, or
two restores of one backup set would all call themselves ``node@location``. The fence
must tell them apart, or one generation gets two writers. So every state directory a
condense materialises (and a genesis directory the resident boots for the first time)
mints a random token into ``instance`` under it, and the fence holder is
``node@location#token``.

The token is *not* in the backup-critical set: a restore is a new instance of the same
node (a new holder at a claimed generation), while re-running a condense against the same
directory keeps the token, so that run's re-claim of its own generation is the no-op the
contract's "restart is re-run" relies on. The file is created exclusively and atomically,
so two processes racing to mint end with one token.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from valis_core.atomic import create_exclusive
from valis_core.errors import ValisError
from valis_core.state_layout import instance_path

INSTANCE_MODE = 0o600
_TOKEN = re.compile(r"[0-9a-f]{16}")
_MAX_BYTES = 64


class InstanceError(ValisError):
    """The state directory's instance token cannot be minted or read."""


def holder_name(node_at_location: str, token: str) -> str:
    """The fence holder of ``node@location`` condensed into the state directory ``token``
    names."""
    return f"{node_at_location}#{token}"


def parse_instance(data: bytes, where: str) -> str:
    """The token in an instance file's bytes (one line of 16 lowercase hex digits)."""
    text = data.decode("ascii", errors="replace").strip()
    if _TOKEN.fullmatch(text) is None:
        raise InstanceError(
            f"instance token {where} is not 16 lowercase hex digits; it was damaged: "
            "condense this node again (restore from its backup set)"
        )
    return text


def read_instance(state_dir: Path) -> str | None:
    """The state directory's token, or ``None`` when it has none yet."""
    path = instance_path(state_dir)
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InstanceError(
            f"instance token {path} cannot be read: {exc.strerror or exc}; it must be "
            "readable by the run account"
        ) from exc
    return parse_instance(data, str(path))


def load_or_mint_instance(state_dir: Path) -> str:
    """The state directory's token, minting it first if (and only if) there is none."""
    found = read_instance(state_dir)
    if found is not None:
        return found
    path = instance_path(state_dir)
    try:
        create_exclusive(path, (secrets.token_hex(8) + "\n").encode(), mode=INSTANCE_MODE)
    except FileExistsError:
        pass  # another process minted first; its token is this directory's
    except OSError as exc:
        raise InstanceError(
            f"cannot mint the instance token {path}: {exc.strerror or exc} (the state "
            "directory must exist and be writable by the run account)"
        ) from exc
    minted = read_instance(state_dir)
    if minted is None:
        raise InstanceError(f"instance token {path} vanished while being minted")
    return minted


def instance_token(state_dir: Path, generation: int) -> str:
    """The token the resident writes under: minted on a genesis store's first boot (like
    the owner seed); a store at a claimed generation must have been given one by the
    condense that claimed it."""
    if generation == 0:
        return load_or_mint_instance(state_dir)
    found = read_instance(state_dir)
    if found is None:
        raise InstanceError(
            f"the store at generation {generation} has no instance token "
            f"({instance_path(state_dir)}), so it cannot show it is the instance that "
            "claimed that generation; condense this node again (valis condense writes it)"
        )
    return found

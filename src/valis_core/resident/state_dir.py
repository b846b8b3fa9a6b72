"""Where the node's durable state lives, and whether this account may keep it there.

The state directory comes from ``--state-dir PATH`` on the resident's argv when given,
otherwise from systemd's ``$STATE_DIRECTORY`` (its first path: systemd joins several
with ``:``). ``--state-dir`` is the resident's own flag, read by the launch argv's one
reader (``valis_core.launch``) with every other flag: no launcher emits it, and an older
resident passes it over, so the two deploy in either order. The flag wins over the
environment because it is the more specific instruction (a development run inside a
systemd session, the demo, a test).

The directory must already exist, be a directory (not a symlink to one) and be owned by
the run account, which must be able to write in it: provisioning creates it and hands
it over (contract §2); the resident never creates or re-owns it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from valis_core.errors import ValisError
from valis_core.launch import parse_launch_argv

FLAG = "--state-dir"
ENV_VAR = "STATE_DIRECTORY"


class StateDirError(ValisError):
    """No usable state directory."""


def state_dir_argument(argv: Sequence[str]) -> str | None:
    """The value of ``--state-dir`` in the launch argv ``argv``, as the launch record
    reads it (``LaunchArgError`` for an argv it refuses)."""
    return parse_launch_argv(argv).state_dir


def resolve_state_dir(argv: Sequence[str], environ: Mapping[str, str]) -> Path:
    """The state directory this launch names: ``--state-dir``, else ``$STATE_DIRECTORY``."""
    chosen = state_dir_argument(argv)
    source = FLAG
    if chosen is None:
        listed = environ.get(ENV_VAR, "")
        chosen = listed.split(":", 1)[0] if listed else None
        source = f"${ENV_VAR}"
    if not chosen:
        raise StateDirError(
            f"no state directory: run under systemd with StateDirectory= (which sets "
            f"${ENV_VAR}) or pass {FLAG} PATH"
        )
    if not chosen.startswith("/") or "\0" in chosen:
        raise StateDirError(f"{source} {chosen!r} is not an absolute path")
    return Path(chosen)


def check_state_dir(path: Path) -> None:
    """Refuse a state directory the run account does not own or cannot write."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise StateDirError(
            f"{path} does not exist; provisioning creates the state directory and gives it "
            "to the run account before the resident starts"
        ) from None
    except OSError as exc:
        raise StateDirError(f"cannot reach {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(f"{path} is not a directory (a symlink is not accepted)")
    if info.st_uid != os.geteuid():
        raise StateDirError(
            f"{path} is owned by uid {info.st_uid}, not by the run account (uid "
            f"{os.geteuid()}); chown it to the account the resident runs as"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise StateDirError(f"{path} is not writable by its owner; give it mode 0700")

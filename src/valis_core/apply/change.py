"""Which kind of change a delivery is: a handover, or a restart of the unit.

fulcrum outlives its residents, so most deliveries need only a new resident: the unit's
reload (``systemctl reload``, fulcrum's handover) starts the new version's resident
beside the serving one and hands over without a gap. What the running fulcrum loaded
when it started cannot change that way; a delivery that changes one of these files
restarts the unit instead:

- ``bin/fulcrum``, the launcher's program;
- ``lib/sk-lookup-catchall.bpf.o``, the steer fulcrum loaded into the kernel;
- ``lib/systemd/system/*``, the units systemd runs fulcrum by.

A frozen build is one program for ``valis`` and ``fulcrum`` (``bin/fulcrum`` holds the
resident's code too), so ``bin/fulcrum`` is compared by what fulcrum runs: each version's
``fulcrum fingerprint`` (``fulcrum.fingerprint``), the digest of the code fulcrum loads,
when both versions print one; by its sha256 otherwise. ``valis apply --restart``
restarts the unit anyway. The first delivery on a host, a unit not running, and a
supervised unit (``--supervise``) are restarts too.

``change_kind`` is pure (digests in, verdict out); ``staged_digests`` reads a staged
version's files and ``fulcrum_fingerprint`` asks its program.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

FULCRUM_PROGRAM = "bin/fulcrum"
STEER_OBJECT = "lib/sk-lookup-catchall.bpf.o"
UNIT_DIRECTORY = "lib/systemd/system/"
_CHUNK = 1 << 20
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
#: How long a version's ``fulcrum fingerprint`` may take.
FINGERPRINT_TIMEOUT = 60.0


def restarts_the_unit(path: str) -> bool:
    """Whether a change to the delivered file at ``path`` needs the unit restarted."""
    return path in (FULCRUM_PROGRAM, STEER_OBJECT) or path.startswith(UNIT_DIRECTORY)


@attrs.frozen
class Change:
    """How a delivery is applied: ``handover`` or not (a restart), and why, in words."""

    handover: bool
    why: str


def change_kind(
    new: Mapping[str, str],
    old: Mapping[str, str] | None,
    fingerprints: tuple[str | None, str | None] = (None, None),
) -> Change:
    """The kind of change from the serving version's files ``old`` (path -> sha256 of
    those ``restarts_the_unit`` names; None: no version serves) to the delivery's ``new``
    (path -> sha256, every file). ``fingerprints`` are the new and the serving version's
    ``fulcrum fingerprint``: when both are known, ``bin/fulcrum`` is compared by them."""
    if old is None:
        return Change(False, "no version serves yet: the unit is started")
    paths = sorted({path for path in (*new, *old) if restarts_the_unit(path)})
    by_code = None not in fingerprints

    def differs(path: str) -> bool:
        if path == FULCRUM_PROGRAM and by_code:
            return fingerprints[0] != fingerprints[1]
        return new.get(path) != old.get(path)

    changed = [path for path in paths if differs(path)]
    if changed:
        return Change(False, f"it changes {', '.join(changed)}, which fulcrum runs by: "
                             "the unit is restarted")
    return Change(True, "fulcrum, its steer and its units are unchanged: the new resident "
                        "is handed over to (systemctl reload), without a restart")


def fulcrum_fingerprint(version: Path) -> str | None:
    """What ``<version>/bin/fulcrum fingerprint`` prints, or None when it prints no
    fingerprint (a version that predates the command, or one that fails)."""
    try:
        done = subprocess.run(
            [str(version / FULCRUM_PROGRAM), "fingerprint"], stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=FINGERPRINT_TIMEOUT, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    printed = done.stdout.strip()
    return printed if done.returncode == 0 and _FINGERPRINT.fullmatch(printed) else None


def staged_digests(directory: Path, paths: Iterable[str]) -> dict[str, str]:
    """sha256 of each of ``paths`` under ``directory`` that ``restarts_the_unit`` names,
    and of every file under its unit directory (a missing file is left out)."""
    wanted = {FULCRUM_PROGRAM, STEER_OBJECT, *(path for path in paths if restarts_the_unit(path))}
    units = directory / UNIT_DIRECTORY
    if units.is_dir():
        wanted |= {str(path.relative_to(directory)) for path in units.iterdir()}
    digests: dict[str, str] = {}
    for path in sorted(wanted):
        file = directory / path
        if not file.is_file():
            continue
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        digests[path] = digest.hexdigest()
    return digests

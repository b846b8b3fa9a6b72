"""Which kind of change a delivery is: a handover, or a restart of the unit.

fulcrum outlives its residents, so most deliveries need only a new resident: the unit's
reload (``systemctl reload``, fulcrum's handover) starts the new version's resident
beside the serving one and hands over without a gap. What the running fulcrum loaded
when it started cannot change that way; a delivery that changes one of these files
restarts the unit instead:

- ``bin/fulcrum``, the launcher's program;
- ``lib/sk-lookup-catchall.bpf.o``, the steer fulcrum loaded into the kernel;
- ``lib/systemd/system/*``, the units systemd runs fulcrum by.

A frozen build keeps fulcrum's Python code in the bundle it shares with the resident
(``bin/fulcrum`` is the bundle's bootloader), so a handover leaves the running fulcrum
on the code it was started with; ``valis apply --restart`` restarts the unit anyway, for
a delivery whose fulcrum code must take effect now. The first delivery on a host, a unit
not running, and a supervised unit (``--supervise``) are restarts too.

``change_kind`` is pure (digests in, verdict out); ``staged_digests`` reads a staged
version's files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

FULCRUM_PROGRAM = "bin/fulcrum"
STEER_OBJECT = "lib/sk-lookup-catchall.bpf.o"
UNIT_DIRECTORY = "lib/systemd/system/"
_CHUNK = 1 << 20


def restarts_the_unit(path: str) -> bool:
    """Whether a change to the delivered file at ``path`` needs the unit restarted."""
    return path in (FULCRUM_PROGRAM, STEER_OBJECT) or path.startswith(UNIT_DIRECTORY)


@attrs.frozen
class Change:
    """How a delivery is applied: ``handover`` or not (a restart), and why, in words."""

    handover: bool
    why: str


def change_kind(new: Mapping[str, str], old: Mapping[str, str] | None) -> Change:
    """The kind of change from the serving version's files ``old`` (path -> sha256 of
    those ``restarts_the_unit`` names; None: no version serves) to the delivery's ``new``
    (path -> sha256, every file)."""
    if old is None:
        return Change(False, "no version serves yet: the unit is started")
    paths = sorted({path for path in (*new, *old) if restarts_the_unit(path)})
    changed = [path for path in paths if new.get(path) != old.get(path)]
    if changed:
        return Change(False, f"it changes {', '.join(changed)}, which fulcrum runs by: "
                             "the unit is restarted")
    return Change(True, "fulcrum, its steer and its units are unchanged: the new resident "
                        "is handed over to (systemctl reload), without a restart")


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

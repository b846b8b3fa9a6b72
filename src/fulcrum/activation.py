"""systemd socket activation: the listening sockets systemd made and handed to fulcrum.

systemd passes them as descriptors 3, 4, ... with ``LISTEN_FDS`` (how many),
``LISTEN_PID`` (the process they are for: a child that inherited the variables must not
take them) and ``LISTEN_FDNAMES`` (colon-separated names, from each ``.socket`` unit's
``FileDescriptorName=``). Pure: an environment and a pid in, names to descriptors out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fulcrum.errors import LauncherError

#: The first descriptor systemd passes (``SD_LISTEN_FDS_START``).
LISTEN_FDS_START = 3
#: More than this many passed sockets is a unit file that is not fulcrum's.
MAX_LISTEN_FDS = 64
ACTIVATION_VARIABLES: tuple[str, ...] = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
_NUMBER = re.compile(r"[0-9]{1,10}")


def activated_sockets(environ: Mapping[str, str], pid: int) -> dict[str, tuple[int, ...]]:
    """Descriptors systemd passed to process ``pid``, by name (``unknown`` when unnamed).

    Empty when nothing was passed or the variables are for another process.
    """
    listen_pid, listen_fds = environ.get("LISTEN_PID"), environ.get("LISTEN_FDS")
    if listen_pid is None or listen_fds is None:
        return {}
    if _NUMBER.fullmatch(listen_pid) is None:
        raise LauncherError(
            f"LISTEN_PID={listen_pid!r} is not a process id; systemd sets it — check the "
            "fulcrum unit's socket activation"
        )
    if int(listen_pid) != pid:
        return {}
    if _NUMBER.fullmatch(listen_fds) is None or int(listen_fds) > MAX_LISTEN_FDS:
        raise LauncherError(
            f"LISTEN_FDS={listen_fds!r} is not a descriptor count 0..{MAX_LISTEN_FDS}; "
            "check the fulcrum unit's socket activation"
        )
    count = int(listen_fds)
    names = environ.get("LISTEN_FDNAMES", "").split(":") if count else []
    if len(names) != count:
        names = ["unknown"] * count
    found: dict[str, tuple[int, ...]] = {}
    for index, name in enumerate(names):
        found[name] = (*found.get(name, ()), LISTEN_FDS_START + index)
    return found

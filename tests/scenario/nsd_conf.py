"""The part of an NSD configuration every test that runs NSD writes alike: where it
listens and keeps its files, with its control channel off; the keys and zones a test
adds after it are its own."""

from __future__ import annotations

from pathlib import Path


def nsd_server(directory: Path, address: str, *extra: str) -> str:
    """NSD's ``server:`` and ``remote-control:`` sections: listening on ``address`` (an
    address, or ``address@port``), every file it keeps under ``directory``, run as the
    caller and not chrooted; ``extra`` are further ``server:`` lines (``verbosity: 2``)."""
    more = "".join(f"    {line}\n" for line in extra)
    return f"""server:
    ip-address: {address}
{more}    username: ""
    chroot: ""
    zonesdir: "{directory}"
    database: ""
    zonelistfile: "{directory}/zone.list"
    xfrdfile: "{directory}/xfrd.state"
    xfrdir: "{directory}"
    pidfile: "{directory}/nsd.pid"
    logfile: "{directory}/nsd.log"
remote-control:
    control-enable: no
"""

"""A launcher in a few lines, run with ``python -c LAUNCHER PORT STATE_DIR UID GID RUNTIME``:
it binds the DNS pair on 127.0.0.1:PORT, makes them inheritable and execs the resident
on them under ``setpriv`` as UID:GID, as fulcrum would without its netns."""

from __future__ import annotations

LAUNCHER = """
import os, socket, sys
from pathlib import Path
from valis_core.dev_launcher import bind_dns_pair, resident_argv
port, state_dir, uid, gid, runtime = sys.argv[1:6]
udp, tcp = bind_dns_pair(socket.AF_INET, "127.0.0.1", int(port))
for sock in (udp, tcp):
    os.set_inheritable(sock.fileno(), True)
argv = resident_argv([runtime], udp.fileno(), tcp.fileno(), int(port), Path(state_dir))
os.execvp("setpriv", ["setpriv", "--reuid=" + uid, "--regid=" + gid, "--init-groups", "--",
                      *argv])
"""

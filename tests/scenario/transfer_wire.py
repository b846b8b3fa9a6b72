"""A node and its real secondary (NSD or Knot) in two namespaces joined by a veth pair
(``Wire``: the node at ``NODE_IP``, the secondary at ``SECONDARY_IP`` beside a stranger at
``STRANGER_IP``): each secondary's configuration as docs/transfers.md gives it
(``SERVERS``), and the resident started in the node's namespace on port 53 as fulcrum's
handoff would (``start_node``)."""

from __future__ import annotations

import base64
import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs

from tests.scenario.nsd_conf import nsd_server
from tests.scenario.pg import RUN_USER, ensure_system_user
from tests.scenario.proving_ground import run
from tests.scenario.resident_harness import (
    NotifyListener,
    Resident,
    make_state_dir,
    resident_runtime,
)

ZONE = "example.test."
NODE_IP = "192.0.2.1"
SECONDARY_IP = "192.0.2.2"
STRANGER_IP = "192.0.2.3"
KEY_NAME = "xfr-key."
# Runs in the node's namespace as a stock interpreter, standing in for fulcrum's handoff:
# bind the DNS pair on the node's address, port 53, and exec the resident with them.
_HANDOFF = r"""
import os, socket, sys
host = sys.argv[1]
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((host, 53))
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind((host, 53))
tcp.listen(socket.SOMAXCONN)  # as fulcrum binds it (listen.bind_dns_sockets)
owner = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
owner.bind((host, 8053))
owner.listen(16)
for sock in (udp, tcp, owner):
    os.set_inheritable(sock.fileno(), True)
argv = [a.replace("{udp}", str(udp.fileno())).replace("{tcp}", str(tcp.fileno()))
        .replace("{owner}", str(owner.fileno())) for a in sys.argv[2:]]
os.execvp(argv[0], argv)
"""


def nsd_conf(directory: Path, secret: str, primaries: tuple[str, ...] = (NODE_IP,), *,
             udp: bool = False) -> str:
    """The secondary's configuration, as docs/transfers.md gives it; with ``udp`` NSD asks
    IXFR over UDP first (``request-xfr: UDP``), and over TCP when told TC."""
    ask = "UDP " if udp else ""
    xfr = "".join(f"    request-xfr: {ask}{ip} {KEY_NAME}\n    allow-notify: {ip} {KEY_NAME}\n"
                  for ip in primaries)
    return nsd_server(directory, SECONDARY_IP, "port: 53", "verbosity: 2") + f"""\
key:
    name: "{KEY_NAME}"
    algorithm: hmac-sha256
    secret: "{secret}"
zone:
    name: "{ZONE}"
    zonefile: "{ZONE}zone"
{xfr}"""


def knot_head(directory: Path, secret: str, primaries: tuple[str, ...] = (NODE_IP,),
              templates: str = "") -> str:
    """A Knot secondary's configuration up to its zones, as docs/transfers.md gives it:
    the node as ``primary`` with the key, the ACL for its NOTIFY, the default template
    and ``templates`` after it."""
    remotes, sources = ", ".join(f"{ip}@53" for ip in primaries), ", ".join(primaries)
    if len(primaries) > 1:
        remotes, sources = f"[{remotes}]", f"[{sources}]"
    return f"""server:
    listen: {SECONDARY_IP}@53
    rundir: "{directory}"
    user: root:root
log:
  - target: "{directory}/knot.log"
    any: info
database:
    storage: "{directory}"
control:
    listen: "{directory}/knot.sock"
key:
  - id: {KEY_NAME}
    algorithm: hmac-sha256
    secret: {secret}
remote:
  - id: primary
    address: {remotes}
    key: {KEY_NAME}
acl:
  - id: notify-from-primary
    address: {sources}
    key: {KEY_NAME}
    action: notify
template:
  - id: default
    storage: "{directory}"
{templates}"""


def knot_conf(directory: Path, secret: str, primaries: tuple[str, ...] = (NODE_IP,)) -> str:
    """The secondary's configuration, as docs/transfers.md gives it."""
    return knot_head(directory, secret, primaries) + f"""zone:
  - domain: {ZONE}
    master: primary
    acl: notify-from-primary
"""


SERVERS = {
    "nsd": (nsd_conf, ["nsd", "-d", "-c"], "nsd.log"),
    "knot": (knot_conf, ["knotd", "-c"], "knot.log"),
}
"""Each real secondary: its configuration, how it runs in the foreground, its log."""


@attrs.define
class Wire:
    """Two namespaces joined by a veth pair: the node and its secondary."""

    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))

    @property
    def node(self) -> str:
        return f"vl-xn-{self.tag}"

    @property
    def secondary(self) -> str:
        return f"vl-xs-{self.tag}"

    def build(self) -> None:
        near, far = f"vxn-{self.tag}", f"vxs-{self.tag}"
        for netns in (self.node, self.secondary):
            run(["ip", "netns", "add", netns])
            run(["ip", "-n", netns, "link", "set", "lo", "up"])
        run(["ip", "link", "add", near, "type", "veth", "peer", "name", far])
        run(["ip", "link", "set", near, "netns", self.node])
        run(["ip", "link", "set", far, "netns", self.secondary])
        run(["ip", "-n", self.node, "addr", "add", f"{NODE_IP}/24", "dev", near])
        for address in (SECONDARY_IP, STRANGER_IP):
            run(["ip", "-n", self.secondary, "addr", "add", f"{address}/24", "dev", far])
        run(["ip", "-n", self.node, "link", "set", near, "up"])
        run(["ip", "-n", self.secondary, "link", "set", far, "up"])

    def cleanup(self) -> None:
        for netns in (self.node, self.secondary):
            for pid in run(["ip", "netns", "pids", netns], check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            run(["ip", "netns", "del", netns], check=False)


def start_node(
    wire: Wire, state_dir: Path, facts: dict[str, str], workdir: Path, address: str = NODE_IP
) -> Resident:
    notify_dir = Path(tempfile.mkdtemp(prefix="notify-", dir=workdir))
    os.chmod(notify_dir, 0o755)
    notify = NotifyListener(notify_dir)
    account = pwd.getpwnam(RUN_USER)
    argv = [
        "ip", "netns", "exec", wire.node, "/usr/bin/python3", "-c", _HANDOFF, address,
        "setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
        "--", resident_runtime(), "--resident", "--control-socket", "/run/fulcrum/none.sock",
        "--dns-udp-fd", "{udp}", "--dns-tcp-fd", "{tcp}", "--owner-fd", "{owner}",
        "--ports", "53",
        "--state-dir", str(state_dir),
    ]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8",
           "NOTIFY_SOCKET": str(notify.path), **facts}
    stderr_path = workdir / f"resident-{address}.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(argv, env=env, cwd="/", stdin=subprocess.DEVNULL,
                                stdout=stderr, stderr=stderr, start_new_session=True)
    return Resident(proc, notify, stderr_path, state_dir, 53)


@contextlib.contextmanager
def node_and_secondary(
    facts: dict[str, str], conf: Callable[[Path, str], str], command: Sequence[str],
    secret: bytes, name: str,
) -> Iterator[tuple[Wire, Resident]]:
    """A resident on ``facts`` in a fresh ``Wire``'s node namespace and one real
    secondary (``conf`` written with ``secret``, run by ``command`` in the foreground) in
    the other, both started; everything stopped and removed on the way out."""
    account = ensure_system_user(RUN_USER)
    workdir = Path(tempfile.mkdtemp(prefix=f"valis-{name}-", dir="/tmp"))
    os.chown(workdir, account.pw_uid, account.pw_gid)
    os.chmod(workdir, 0o755)
    wire = Wire()
    server: subprocess.Popen[bytes] | None = None
    node: Resident | None = None
    try:
        wire.build()
        node = start_node(wire, make_state_dir(workdir), facts, workdir)
        directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
        config = directory / f"{name}.conf"
        config.write_text(conf(directory, base64.b64encode(secret).decode()))
        server = subprocess.Popen(
            ["ip", "netns", "exec", wire.secondary, *command, str(config)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        node.wait_ready()
        yield wire, node
    finally:
        stop_server(server)
        if node is not None:
            node.stop()
            node.notify.close()
        wire.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def stop_server(server: subprocess.Popen[bytes] | None) -> None:
    """Stop a peer server started in the secondary's namespace, if it was: SIGTERM, then
    SIGKILL after 10 s."""
    if server is None:
        return
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()

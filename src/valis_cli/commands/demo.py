"""``valis demo``: run a whole node on this machine, without root.

What a deploy does on a real host, in miniature and under the user's cache directory
(``${XDG_CACHE_HOME:-~/.cache}/valis-demo``): a private PostgreSQL cluster (UNIX socket
only, peer authentication, the user's own account mapped to the ``valis`` role), the
schema migrated and a zone imported, a state directory condensed from genesis (the
default manifest at generation 0), the site facts handed over in the environment, and
the resident started by an unprivileged launcher stand-in that binds the DNS pair and
hands the descriptors down — the production inherited-descriptor path. It prints the
``dig`` commands to try; Ctrl-C stops the node and then the database.

Everything persists between runs: the second run is the same node (same owner key, same
configuration store), serving the zone as imported afresh.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from valis_cli.commands.serve import DEFAULT_LISTEN, ListenAddress, parse_listen
from valis_core.errors import ValisError

if TYPE_CHECKING:
    from valis_core.dns.records import RecordRow
    from valis_core.operator_state.local_cluster import LocalCluster

READY_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
ROLE = "valis"
DATABASE = "valis_state"


class DemoError(ValisError):
    """The demo node cannot be set up."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a whole node on this machine, without root",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--zone", type=Path, required=True,
                        help="master file to serve (make demo uses docs/examples/"
                             "example.test.zone)")
    parser.add_argument("--listen", default=DEFAULT_LISTEN,
                        help=f"ADDRESS:PORT for DNS over UDP and TCP (default {DEFAULT_LISTEN})")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where the cluster and state live (default "
                             "${XDG_CACHE_HOME:-~/.cache}/valis-demo)")
    parser.set_defaults(handler=run_demo)


def default_demo_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "valis-demo"


def _say(text: str) -> None:
    print(f"valis demo: {text}", flush=True)


def _valis_command() -> list[str]:
    beside = Path(sys.executable).with_name("valis")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-c", "from valis_cli.main import main; main()"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_demo(args: argparse.Namespace) -> int:
    from valis_core.dns.records import ZoneError
    from valis_core.dns.zone_build import parse_zone_text
    from valis_core.operator_state.local_cluster import LocalCluster

    if os.geteuid() == 0:
        raise DemoError(
            "demo: run it as an ordinary user; the resident refuses root and PostgreSQL "
            "will not run as root either"
        )
    listen = parse_listen(args.listen)
    try:
        rows = parse_zone_text(args.zone.read_text("utf-8"))
    except OSError as exc:
        raise DemoError(f"demo: cannot read {args.zone}: {exc.strerror or exc}") from exc
    except ZoneError as exc:
        raise DemoError(f"demo: {args.zone}: {exc}") from exc
    root = (args.cache_dir or default_demo_root()).absolute()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(
            f"demo: cannot make the demo directory {root}: {exc.strerror or exc}; give a "
            "directory this account can write with --cache-dir"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DemoError(
            f"demo: the demo directory {root} is not writable by this account; give one it "
            "can write with --cache-dir"
        )
    user = pwd.getpwuid(os.geteuid()).pw_name
    cluster = LocalCluster(root=root / "postgres", server_user=user)
    # Ctrl-C and SIGTERM both stop the node, even where SIGINT arrived ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    _say(f"PostgreSQL under {cluster.root} (UNIX socket only, peer authentication)")
    cluster.initialize({user: [ROLE]})
    cluster.start()
    try:
        return _run_node(listen, root, cluster, rows)
    finally:
        _say("stopping PostgreSQL")
        cluster.stop()


def _run_node(
    listen: ListenAddress, root: Path, cluster: LocalCluster, rows: Sequence[RecordRow]
) -> int:
    from valis_core.dev_launcher import spawn_resident
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.schema import migrate
    from valis_core.operator_state.zones import replace_zone
    from valis_core.store.head import materialise_genesis

    host, port = listen.host, listen.port
    cluster.ensure_role(ROLE)
    cluster.ensure_database(DATABASE, owner=ROLE)
    dsn = cluster.dsn(ROLE, DATABASE)
    with connect(dsn) as conn:
        migrate(conn)
        summary = replace_zone(conn, rows)
        conn.commit()
    _say(f"imported {summary.name} ({summary.records} records, serial {summary.serial})")
    state_dir = root / "state"
    state_dir.mkdir(mode=0o700, exist_ok=True)
    manifest, written = materialise_genesis(state_dir)
    _say(
        f"state directory {state_dir} "
        f"({'condensed from genesis' if written else 'kept'}, generation {manifest.generation})"
    )
    notify_path = root / "notify.sock"
    with contextlib.suppress(FileNotFoundError):
        notify_path.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "LC_ALL": "C.UTF-8",
            "NOTIFY_SOCKET": str(notify_path),
            "VALIS_NODE_NAME": "demo",
            "VALIS_LOCATION": "this-machine",
            "VALIS_OPERATOR_STATE_DSN": dsn,
            "VALIS_SERVED_ZONES": summary.name,
        }
        shown = f"[{host}]" if ":" in host else host
        _say(f"starting the resident on {shown}:{port} (descriptors bound here, handed down)")
        proc = spawn_resident(
            _valis_command(), family=listen.family, host=host, port=port, state_dir=state_dir,
            env=env,
        )
        try:
            if _wait_ready(proc, notify):
                name = summary.name.rstrip(".")
                _say("ready. Try:")
                print(f"    dig @{host} -p {port} {name} SOA", flush=True)
                print(f"    dig @{host} -p {port} www.{name} A +tcp", flush=True)
                _say("Ctrl-C stops the node and the database")
            return proc.wait()
        except KeyboardInterrupt:
            return _stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], notify: socket.socket) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT
    notify.settimeout(0.2)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            data = notify.recv(4096)
        except TimeoutError:
            continue
        if b"READY=1" in data.split(b"\n"):
            return True
    _say(f"the resident did not report ready within {READY_TIMEOUT:.0f}s")
    return False


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """The terminal's Ctrl-C reaches the resident too; forward it if it did not."""
    try:
        return proc.wait(1.0)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()

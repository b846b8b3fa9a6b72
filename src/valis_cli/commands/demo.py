"""``valis demo``: run a whole node on this machine, without root.

What a deploy does on a real host, in miniature and under the user's cache directory
(``${XDG_CACHE_HOME:-~/.cache}/valis-demo``): a private PostgreSQL cluster (UNIX socket
only, peer authentication, the user's own account mapped to the ``valis`` role), the
schema migrated and the zones imported, a state directory condensed from genesis (the
default manifest at generation 0), the site facts handed over in the environment, and
the resident started by an unprivileged launcher stand-in that binds the DNS pair and the
owner listener (before anything else, so a taken port is refused at once) and hands the
descriptors down — the production inherited-descriptor path. When the node is ready it
prints what to try: ``dig``, ``valis status``, ``valis zone import`` and an ``nsupdate``
line that changes a record live. Ctrl-C (or closing the terminal) stops the node and
then the database. One demo runs per directory: it locks it first, and a second one is
refused naming the first's PID (``--cache-dir`` gives it a directory of its own).

Everything persists between runs: the second run is the same node (same owner key, same
configuration store, same database). A zone file is imported again only when it changed
since the demo last imported it, so changes made with ``nsupdate`` or ``valis zone
import`` survive a restart. The node serves exactly the zones this run names: the demo
rewrites its own configuration store when that list changes (a real node keeps its
first-boot site facts).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pwd
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import attrs

from valis_cli.commands.serve import ListenAddress, parse_listen
from valis_core.clock import monotonic
from valis_core.errors import ValisError

if TYPE_CHECKING:
    import psycopg

    from valis_core.dev_launcher import Listeners
    from valis_core.dns.wire.records import RecordRow
    from valis_core.documents import Document
    from valis_core.operator_state.local_cluster import LocalCluster

DEFAULT_PORT = 5300
"""Not 5353: that is multicast DNS, which a desktop's avahi or resolver already holds."""
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
READY_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
ROLE = "valis"
DATABASE = "valis_state"
IMPORTED_FILE = "imported.json"
KEY_FILE = "owner.tsig"
LIVE_NAME = "hello"
LIVE_ADDRESS = "192.0.2.7"


class DemoError(ValisError):
    """The demo node cannot be set up."""


@attrs.frozen
class ZoneFile:
    """One ``--zone`` file: its path, its zone's name, its records and their digest."""

    path: Path
    name: str
    rows: tuple[RecordRow, ...]
    digest: str


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a whole node on this machine, without root",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--zone", type=Path, action="append", required=True,
                        help="master file to serve; repeat for more zones (make demo uses "
                             "docs/examples/example.test.zone)")
    parser.add_argument("--listen", default=DEFAULT_LISTEN,
                        help=f"ADDRESS:PORT for DNS over UDP and TCP (default {DEFAULT_LISTEN})")
    parser.add_argument("--owner-port", type=int, default=None,
                        help="TCP port on the same address for signed updates (nsupdate); "
                             "default: the DNS port plus one")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where the cluster and state live (default "
                             "${XDG_CACHE_HOME:-~/.cache}/valis-demo)")
    parser.set_defaults(handler=run_demo)


def default_demo_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "valis-demo"


def _show(text: str) -> None:
    # A closed terminal makes every write fail; the demo still has to stop its database.
    with contextlib.suppress(OSError):
        print(text, flush=True)


def _say(text: str) -> None:
    _show(f"valis demo: {text}")


def _valis_command() -> list[str]:
    beside = Path(sys.executable).with_name("valis")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-c", "from valis_cli.main import main; main()"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def read_zone_file(path: Path) -> ZoneFile:
    from valis_core.dns.wire.records import ZoneError
    from valis_core.dns.zone.build import parse_zone_text
    from valis_core.operator_state.zones import checked_zone

    try:
        data = path.read_bytes()
        name, rows = checked_zone(parse_zone_text(data.decode("utf-8")))
    except OSError as exc:
        raise DemoError(f"demo: cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise DemoError(f"demo: {path} is not UTF-8 text ({exc.reason})") from exc
    except ZoneError as exc:
        raise DemoError(f"demo: {path}: {exc}") from exc
    return ZoneFile(path.absolute(), name, rows, hashlib.sha256(data).hexdigest())


def owner_port_for(listen: ListenAddress, given: int | None) -> int:
    if given is not None:
        return given
    if listen.port in (0, 65535):
        return 0
    return listen.port + 1


def run_demo(args: argparse.Namespace) -> int:
    from valis_core.dev_launcher import DirectoryBusy, lock_directory

    if os.geteuid() == 0:
        raise DemoError(
            "demo: run it as an ordinary user; the resident refuses root and PostgreSQL "
            "will not run as root either"
        )
    listen = parse_listen(args.listen)
    zones = [read_zone_file(path) for path in args.zone]
    names = [zone.name for zone in zones]
    if len(set(names)) != len(names):
        raise DemoError(f"demo: two --zone files hold the same zone ({', '.join(names)})")
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
    # One demo per directory: a second would share the cluster and the state directory,
    # and its stop would stop the first's PostgreSQL. Held until this process ends.
    try:
        lock = lock_directory(root)
    except DirectoryBusy as exc:
        raise DemoError(f"demo: {exc}") from None
    try:
        return _run_locked(args, listen, root, zones)
    finally:
        os.close(lock)


def _run_locked(
    args: argparse.Namespace, listen: ListenAddress, root: Path, zones: Sequence[ZoneFile]
) -> int:
    from valis_core.dev_launcher import bind_listeners
    from valis_core.dns.serve.listen import ListenError
    from valis_core.operator_state.local_cluster import LocalCluster

    # Bound first and held until the resident has them: a taken port stops the demo
    # before initdb, and nothing can take it in between.
    try:
        listeners = bind_listeners(
            listen.family, listen.host, listen.port, owner_port_for(listen, args.owner_port)
        )
    except ListenError as exc:
        raise DemoError(
            f"demo: {exc} (make demo PORT=N, or --listen ADDRESS:PORT and --owner-port N)"
        ) from None
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
        cluster = LocalCluster(root=root / "postgres", server_user=user)
        # Ctrl-C, SIGTERM and a closed terminal (SIGHUP) all stop the node and the
        # database, even where a signal arrived ignored.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _interrupt)
        _say(f"PostgreSQL under {cluster.root} (UNIX socket only, peer authentication)")
        if not (cluster.data_dir / "PG_VERSION").is_file():
            _say("first run: creating the cluster with initdb (a few seconds; later runs "
                 "reuse it)")
        cluster.initialize({user: [ROLE]})
        cluster.start()
    except BaseException:
        listeners.close()
        raise
    try:
        return _run_node(listen, root, cluster, zones, listeners)
    finally:
        # A second signal (a hang-up after Ctrl-C) must not cut the database's stop short.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        _say("stopping PostgreSQL")
        cluster.stop()


def imported_document() -> Document[dict[str, str]]:
    """``imported.json``: the digest of the file each zone was last imported from."""
    from valis_core.documents import Document

    return Document(
        kind=dict[str, str],
        name=IMPORTED_FILE,
        error=DemoError,
        remedy="every zone is imported again",
        newline=False,
    )


def _load_imported(path: Path) -> dict[str, str]:
    """The digest of the file each zone was last imported from (empty when unknown)."""
    try:
        return imported_document().read(path.read_bytes())
    except (OSError, DemoError):
        return {}


def _import_zones(conn: psycopg.Connection[Any], root: Path, zones: Sequence[ZoneFile]) -> None:
    """Import each zone unless the database holds it from this very file, and say which."""
    from valis_core.atomic import write_atomic
    from valis_core.operator_state.zones import list_zones, replace_zone

    record_path = root / IMPORTED_FILE
    imported = _load_imported(record_path)
    held = {summary.name: summary for summary in list_zones(conn)}
    for zone in zones:
        summary = held.get(zone.name)
        if summary is not None and imported.get(zone.name) == zone.digest:
            _say(
                f"kept {zone.name} as the database holds it ({summary.records} records, "
                f"serial {summary.serial}): {zone.path} is unchanged since it was imported, "
                "so live changes stay"
            )
            continue
        summary = replace_zone(conn, zone.rows)
        conn.commit()
        imported[zone.name] = zone.digest
        write_atomic(record_path, imported_document().render(imported), mode=0o600)
        how = "imported" if zone.name not in held else (
            f"re-imported (the file changed since the last import; it replaced what the "
            f"database held for {zone.name})"
        )
        _say(f"{how} {zone.path}: {summary.name} ({summary.records} records, "
             f"serial {summary.serial})")


def _settle_config_store(state_dir: Path, facts: Mapping[str, str]) -> None:
    """Make the demo node's configuration store carry this run's site facts.

    A real node reads its site facts once, on the first boot; the demo is a throwaway
    node whose zone list is whatever this run names, so it rewrites its store when the
    list (or the database's address) changed.
    """
    from valis_core.config_store import (
        read_config_store,
        store_path,
        write_config_store,
    )
    from valis_core.operator_state.site_facts import SiteFactsError

    if not store_path(state_dir).exists():
        return  # the first boot copies the facts from the environment
    try:
        stored = dict(read_config_store(state_dir).facts)
    except SiteFactsError:
        stored = {}
    if stored == dict(facts):
        return
    path = write_config_store(state_dir, facts)
    was = stored.get("VALIS_SERVED_ZONES", "nothing readable")
    _say(f"serving {facts['VALIS_SERVED_ZONES']} now (the store said {was}); "
         f"rewrote the demo node's {path}")


def _run_node(
    listen: ListenAddress,
    root: Path,
    cluster: LocalCluster,
    zones: Sequence[ZoneFile],
    listeners: Listeners,
) -> int:
    from valis_core.dev_launcher import spawn_resident
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.schema import migrate
    from valis_core.store.head import materialise_genesis

    try:
        cluster.ensure_role(ROLE)
        cluster.ensure_database(DATABASE, owner=ROLE)
        dsn = cluster.dsn(ROLE, DATABASE)
        with connect(dsn) as conn:
            migrate(conn)
            conn.commit()
            _import_zones(conn, root, zones)
        state_dir = root / "state"
        state_dir.mkdir(mode=0o700, exist_ok=True)
        manifest, written = materialise_genesis(state_dir)
        _say(
            f"state directory {state_dir} "
            f"({'condensed from genesis' if written else 'kept'}, "
            f"generation {manifest.generation})"
        )
        facts = {
            "VALIS_NODE_NAME": "demo",
            "VALIS_LOCATION": "this-machine",
            "VALIS_OPERATOR_STATE_DSN": dsn,
            "VALIS_SERVED_ZONES": ",".join(zone.name for zone in zones),
        }
        _settle_config_store(state_dir, facts)
    except BaseException:
        listeners.close()
        raise
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
            **facts,
        }
        port, owner_port = listeners.port, listeners.owner_port
        shown = f"[{listen.host}]" if ":" in listen.host else listen.host
        _say(f"starting the resident on {shown}:{port}, owner updates on {shown}:{owner_port} "
             "(descriptors bound here, handed down)")
        proc = spawn_resident(_valis_command(), listeners, state_dir=state_dir, env=env)
        try:
            if _wait_ready(proc, notify):
                _print_ready(
                    listen.host, port=port, owner_port=owner_port, root=root,
                    state_dir=state_dir, dsn=dsn, zones=zones,
                )
            return _said_exit(proc.wait())
        except KeyboardInterrupt:
            return _said_exit(_stop(proc))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _print_ready(
    host: str,
    *,
    port: int,
    owner_port: int | None,
    root: Path,
    state_dir: Path,
    dsn: str,
    zones: Sequence[ZoneFile],
) -> None:
    """What a newcomer can do with the node now, every line ready to paste."""
    from valis_core.atomic import write_atomic
    from valis_core.identity.custody import load_keyfile
    from valis_core.owner.key import derive_owner_tsig

    valis = shlex.join(_valis_command())
    name = zones[0].name
    bare = name.rstrip(".")
    _say("ready. Ask it:")
    for zone in zones:
        _show(f"    dig @{host} -p {port} {zone.name.rstrip('.')} SOA")
    _show(f"    dig @{host} -p {port} www.{bare} A +tcp")
    _say("is it serving, and why not (exit 0 when ready):")
    _show(f"    {valis} status --state-dir {shlex.quote(str(state_dir))}")
    _say(f"the operator-state database (psql works as this account): {dsn}")
    _say("replace a zone from a master file (the node serves it at once):")
    _show(f"    {valis} zone import --state-dir {shlex.quote(str(state_dir))} "
          f"{shlex.quote(str(zones[0].path))}")
    if owner_port is not None:
        key_path = root / KEY_FILE
        key = derive_owner_tsig(load_keyfile(state_dir))
        write_atomic(key_path, key.bind_text().encode(), mode=0o600)
        script = (
            f"server {host} {owner_port}\\nzone {name}\\n"
            f"update delete {LIVE_NAME}.{name} A\\n"
            f"update add {LIVE_NAME}.{name} 300 A {LIVE_ADDRESS}\\nsend\\n"
        )
        _say(f"change a record live through the owner port {owner_port}, signed with the "
             f"owner key ({valis} owner key --state-dir {shlex.quote(str(state_dir))} "
             f"prints it; it is in {key_path}):")
        _show(f"    printf '{script}' | nsupdate -v -k {shlex.quote(str(key_path))}")
        _show(f"    dig @{host} -p {port} {LIVE_NAME}.{bare} A")
    _say("Ctrl-C stops the node and the database")


def _wait_ready(proc: subprocess.Popen[bytes], notify: socket.socket) -> bool:
    deadline = monotonic() + READY_TIMEOUT
    notify.settimeout(0.2)
    while monotonic() < deadline:
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


def _said_exit(status: int) -> int:
    """Say how the resident ended (its own last log line says why); its status."""
    if status < 0:
        _say(f"the resident was killed by {signal.Signals(-status).name}")
    else:
        _say(f"the resident exited with status {status}" + (" (stopped cleanly)" if status == 0
                                                             else "; its log above says why"))
    return status


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

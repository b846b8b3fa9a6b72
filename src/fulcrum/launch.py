"""``fulcrum launch``: prepare the unit, exec the resident, supervise it, tear down.

First the unit's lock (``/run/fulcrum/<netns-name>.lock``, ``valis_core.life_lock``), taken
before anything is touched and held until teardown is done: one fulcrum per netns, by
construction. A second fulcrum for the netns refuses, naming the holder's pid, and
touches nothing; a fulcrum that died released its lock with its life, so the next one
starts. Bring-up, in order: the netns with its public surface (a stale one from a dead
run is reclaimed first), the default-deny firewall, the privileged binds (the DNS pair, the owner
port), when ``edge-port`` is elected the sk_lookup steer attached to the netns, and the
control socket (``fulcrum.control``). The edge port is never bound: its traffic is
steered to the listening socket the resident pushes over the control socket. Then the
resident is started across the exec chain holding exactly the bound descriptors, and
supervised while the control socket is served beside it. fulcrum outlives the resident:
it keeps its own copies of the bound descriptors for the unit's whole life, so a
resident that crashes is started again on the very same sockets (``fulcrum.respawn``:
bounded, with backoff), nothing re-bound, the netns, its firewall and the steer
untouched, queries meanwhile waiting in the sockets' queues; systemd's ``STATUS=`` says
so while it happens. Asked over its handover socket (``fulcrum handover``, the unit's
reload), it starts a new resident beside the serving one and hands over to it
(``fulcrum.supervise.Residents``); the residents' sd_notify goes through fulcrum's relay
(``fulcrum.notify_relay``). Teardown is the same list in
reverse — the control socket closed, the steer's link removed, sockets closed, firewall
table removed, NIC returned or child link deleted, netns deleted — and it runs whether
the resident was stopped, crashed, or a bring-up stage failed. It acts on what this
fulcrum made: the netns it created (held open, so known by identity, not by name) and
the processes in it.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import shutil
from collections.abc import Mapping
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import attrs

from fulcrum import firewall, netns
from fulcrum.bind import UnitSockets, bind_unit_sockets
from fulcrum.control import PushGate, open_control_socket, serve_control
from fulcrum.errors import LauncherError
from fulcrum.exec_chain import (
    CONTROL_SOCKET_DIR,
    RUN_ACCOUNT,
    build_resident_argv,
    control_socket_path,
    launch_record,
    resident_environment,
)
from fulcrum.handover import (
    close_handover_socket,
    handover_path,
    open_handover_socket,
    serve_handovers,
)
from fulcrum.notify_relay import NotifyRelay, relay_path
from fulcrum.respawn import RespawnPolicy, Restart
from fulcrum.steer import Steer
from fulcrum.supervise import Handover, ResidentExit, StopLatch, run_resident
from valis_core.launch import LaunchRecord
from valis_core.launcher_config import (
    LauncherConfig,
    firewall_accept_set,
    served_dns_reachability,
)
from valis_core.life_lock import HeldLock, LockHeld, hold
from valis_core.operator_state.site_facts import DNS_WORKERS_KEY, SiteFactsError, dns_workers
from valis_core.sd_notify import ENV_VAR as NOTIFY_ENV

log = logging.getLogger(__name__)

#: How long the resident gets to stop after the forwarded signal before SIGKILL.
STOP_TIMEOUT = 20.0
REQUIRED_TOOLS: tuple[str, ...] = ("ip", "setpriv", "env", "nsenter", "nft")
#: Where the units' locks live: beside the control sockets, root's (0755).
LOCK_DIR = CONTROL_SOCKET_DIR
LOCK_DIR_MODE = 0o755


def launch(
    cfg: LauncherConfig,
    environ: Mapping[str, str],
    *,
    stop_timeout: float = STOP_TIMEOUT,
    respawn: RespawnPolicy = RespawnPolicy(),  # noqa: B008 (a frozen value)
) -> int:
    """Run one unit from bring-up to teardown; return fulcrum's exit status."""
    preflight(cfg)
    workers = launch_workers(environ)
    with StopLatch() as latch, hold_unit_lock(cfg), ExitStack() as undo:
        surface = netns.bring_up(cfg)
        made = surface.netns
        undo.callback(made.close)
        undo.callback(netns.tear_down, made)
        firewall.apply_ruleset(cfg.netns_name, firewall_accept_set(cfg))
        undo.callback(firewall.remove_ruleset, cfg.netns_name)
        sockets = bind_unit_sockets(
            cfg.netns_name,
            cfg.unit_ip,
            dns_port=cfg.designated_port,
            owner_port=cfg.owner_port,
            dns_workers=workers,
        )
        undo.callback(sockets.close)
        steer = attach_steer(cfg, made)
        if steer is not None:
            undo.callback(steer.close)
        uid, gid = run_ids(cfg)
        control = open_control_socket(control_socket_path(cfg), environ, uid=uid, gid=gid)
        undo.callback(control.close)
        gate = PushGate(
            run_uid=uid,
            unit_netns=made.identity,
            elected=frozenset() if cfg.edge_port is None else frozenset({cfg.edge_port}),
            assign=None if steer is None else steer.assign,
        )
        relay = NotifyRelay.open(relay_path(cfg.netns_name), uid=uid, gid=gid,
                                 environ=environ)
        undo.callback(relay.close)
        requests = handover_path(cfg.netns_name)
        handovers = open_handover_socket(requests)
        undo.callback(close_handover_socket, handovers, requests)
        record = _record(cfg, sockets, control.path)
        # Each resident tells fulcrum's relay, which tells systemd what the serving one says.
        env = {**resident_environment(environ), NOTIFY_ENV: relay.path}
        argv = build_resident_argv(cfg, record, env)
        handover = Handover(
            argv=build_resident_argv(cfg, attrs.evolve(record, successor=True), env),
            relay=relay,
            serve=partial(serve_handovers, handovers),
        )
        log.info(
            "unit %s up on %s, DNS bound on port %d; starting the resident",
            cfg.netns_name, cfg.unit_ip, cfg.designated_port,
        )
        reachability = served_dns_reachability(cfg)
        if reachability.problem is not None:
            # A warning, not a refusal: the contract allows the port; it only never opens it.
            log.warning("unit %s: %s", cfg.netns_name, reachability.problem)

        # fulcrum keeps its own copies of the bound sockets (closed at teardown): a
        # resident started after a crash adopts the very same ones, and what arrives
        # meanwhile waits in their queues instead of being refused.
        def spawned(pid: int) -> None:
            log.info("resident running as pid %d", pid)

        def restarting(ended: ResidentExit, restart: Restart) -> None:
            text = (f"{ended.describe()}; starting it again on the same sockets in "
                    f"{restart.delay:g} s (restart {restart.attempt} of at most "
                    f"{respawn.attempts} in a row)")
            log.warning("%s", text)
            relay.tell(STATUS=f"resident restarting: {text}")

        outcome = run_resident(
            argv, sockets.fds(), stop_timeout=stop_timeout, latch=latch, on_spawn=spawned,
            beside=partial(serve_control, control.sock, gate),
            respawn=respawn, on_respawn=restarting, handover=handover,
        )
        if outcome is None:
            log.info("stop asked for before the resident started; tearing the unit down")
            status = 0
        else:
            report = log.info if outcome.stop_signal is not None else log.error
            report("%s; tearing the unit down", outcome.describe())
            status = outcome.exit_status
    log.info("unit %s torn down", cfg.netns_name)
    return status


def launch_workers(environ: Mapping[str, str]) -> int:
    """How many DNS UDP sockets to bind: ``VALIS_DNS_WORKERS`` from the site facts in
    fulcrum's environment, else one per CPU fulcrum (and so the resident) may run on."""
    try:
        return dns_workers(environ.get(DNS_WORKERS_KEY), len(os.sched_getaffinity(0)))
    except SiteFactsError as exc:
        raise LauncherError(f"{exc}; fix it in /etc/valis/site-facts.env") from None


def unit_lock_path(cfg: LauncherConfig) -> Path:
    """The lock one fulcrum of the unit holds for its life."""
    return Path(LOCK_DIR) / f"{cfg.netns_name}.lock"


def hold_unit_lock(cfg: LauncherConfig) -> HeldLock:
    """The unit's lock, taken now; a live fulcrum holding it is refused by name."""
    path = unit_lock_path(cfg)
    try:
        os.makedirs(path.parent, mode=LOCK_DIR_MODE, exist_ok=True)
        return hold(path)
    except LockHeld as held:
        holder = f"fulcrum pid {held.holder}" if held.holder else "another fulcrum"
        stop = (f"kill -TERM {held.holder}" if held.holder
                else f"the process holding {path}")
        raise LauncherError(
            f"netns {cfg.netns_name} is already run by {holder} (it holds {path}); a "
            "second fulcrum would tear the first's unit down, so this one touches "
            f"nothing: stop that unit first (systemctl stop, or {stop})"
        ) from None
    except OSError as exc:
        raise LauncherError(
            f"cannot take the unit lock {path}: {exc.strerror or exc}; {LOCK_DIR} must be "
            "a directory root can write"
        ) from None


def attach_steer(cfg: LauncherConfig, made: netns.MadeNetns) -> Steer | None:
    """The sk_lookup steer for the elected edge port, attached to the netns this fulcrum
    made; None with no edge elected.

    Loaded here, while fulcrum is still privileged: the resident can neither load nor
    attach it. A wrong ``catchall-object-path`` fails here, naming the path.
    """
    if cfg.edge_port is None:
        return None
    return Steer.attach(cfg.catchall_object_path, made.fd, cfg.unit_ip,
                        frozenset({cfg.edge_port}))


def preflight(cfg: LauncherConfig) -> None:
    """Refuse early, before touching the host, what would fail later in the exec chain."""
    if os.geteuid() != 0:
        raise LauncherError(
            "fulcrum must run as root: it creates the netns, moves the NIC and binds :53"
        )
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise LauncherError(
            f"{', '.join(missing)} not found on PATH; install iproute2, util-linux, "
            "coreutils and nftables"
        )
    _check_account(cfg)
    program = cfg.valis_command[0]
    if not os.path.isfile(program):
        raise LauncherError(
            f"valis-command program {program} does not exist; stage the resident there "
            "or fix valis-command in the launcher config"
        )


def _check_account(cfg: LauncherConfig) -> None:
    remedy = (
        "create it (useradd --system --user-group --no-create-home "
        "--shell /usr/sbin/nologin valis) or pin existing ids with valis-uid/valis-gid"
    )
    try:
        if cfg.valis_uid is None:
            pwd.getpwnam(RUN_ACCOUNT)
        else:
            pwd.getpwuid(cfg.valis_uid)  # --init-groups needs the account by number too
    except KeyError:
        who = RUN_ACCOUNT if cfg.valis_uid is None else f"uid {cfg.valis_uid}"
        raise LauncherError(f"run account {who} does not exist; {remedy}") from None
    if cfg.valis_gid is None:
        try:
            grp.getgrnam(RUN_ACCOUNT)
        except KeyError:
            raise LauncherError(f"run group {RUN_ACCOUNT} does not exist; {remedy}") from None


def run_ids(cfg: LauncherConfig) -> tuple[int, int]:
    """The run account's uid and gid: the control socket's owner, and its only peer."""
    uid = cfg.valis_uid if cfg.valis_uid is not None else pwd.getpwnam(RUN_ACCOUNT).pw_uid
    gid = cfg.valis_gid if cfg.valis_gid is not None else grp.getgrnam(RUN_ACCOUNT).gr_gid
    return uid, gid


def _record(cfg: LauncherConfig, sockets: UnitSockets, control_socket: str) -> LaunchRecord:
    return launch_record(
        cfg,
        dns_udp_fds=tuple(sock.fileno() for sock in sockets.dns_udps),
        dns_tcp_fd=sockets.dns_tcp.fileno(),
        owner_fd=sockets.owner_tcp.fileno() if sockets.owner_tcp else None,
        control_socket=control_socket,
    )

"""The exec chain that turns fulcrum's prepared unit into the unprivileged resident.

``ip netns exec NAME`` enters the unit's netns, ``setpriv`` drops to the run account
with no capabilities left in any set and no way to regain them, ``env -i`` gives the
resident exactly the environment fulcrum chose, and the resident's own argv follows,
rendered from a launch record by ``valis_core.launch.render_launch_argv``. Each link
execs the next, so the process fulcrum starts *is* the resident by the end and fulcrum's
signals reach it directly.

The run account defaults to ``valis:valis`` by name — what a provisioned host resolves
and drops to; numeric ids appear only when the config pins them.

The resident's environment (``resident_environment``) is built, not inherited: every
``VALIS_*`` variable in fulcrum's own environment (the site facts, among them the
operator-state DSN — a socket path under peer authentication, no password), systemd's
``NOTIFY_SOCKET`` (the unit is ``NotifyAccess=all``, so the resident's ``READY=1``
reaches systemd directly), ``JOURNAL_STREAM`` (fulcrum hands the resident its own
stderr, the journal's stream, so the resident's lines carry their syslog priority —
without it every line, warnings and errors too, lands at priority 6) and the unit
directories systemd sets (``STATE_DIRECTORY``
and its siblings), ``REQUESTS_CA_BUNDLE`` (the trust anchors of a private ACME CA, named
in the unit's environment), plus a fixed ``PATH``. Nothing else of root's environment
crosses the privilege drop.

Pure: values in, argv out.
"""

from __future__ import annotations

from collections.abc import Mapping

from fulcrum.errors import LauncherError
from valis_core.launch import LaunchRecord, render_launch_argv
from valis_core.launcher_config import LauncherConfig

RUN_ACCOUNT = "valis"
RESIDENT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Variables systemd sets for the unit that the resident reads as its own (the resident
#: inherits fulcrum's stderr, so ``JOURNAL_STREAM`` still names it), and the
#: private ACME CA's roots the operator names in the unit's environment (docs/edge.md).
PASSED_THROUGH: frozenset[str] = frozenset(
    {
        "REQUESTS_CA_BUNDLE",
        "NOTIFY_SOCKET",
        "JOURNAL_STREAM",
        "STATE_DIRECTORY",
        "RUNTIME_DIRECTORY",
        "CACHE_DIRECTORY",
        "LOGS_DIRECTORY",
        "CONFIGURATION_DIRECTORY",
    }
)
PASSED_PREFIX = "VALIS_"
CONTROL_SOCKET_DIR = "/run/fulcrum"
SETPRIV_DROP: tuple[str, ...] = (
    "--init-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
)


def resident_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the resident gets, chosen from fulcrum's own."""
    chosen = {
        key: value
        for key, value in environ.items()
        if key.startswith(PASSED_PREFIX) or key in PASSED_THROUGH
    }
    chosen["PATH"] = RESIDENT_PATH
    return chosen


def served_ports(cfg: LauncherConfig) -> frozenset[int]:
    """The whole set of ports this unit serves: the designated port (DNS), edge, owner.

    DNS is served where fulcrum binds the pair, the designated port, and nowhere else.
    """
    ports = {cfg.designated_port}
    ports.update(port for port in (cfg.edge_port, cfg.owner_port) if port is not None)
    return frozenset(ports)


def control_socket_path(cfg: LauncherConfig) -> str:
    """The launcher's AF_LOCAL control socket for this unit (the push-boot handoff)."""
    return f"{CONTROL_SOCKET_DIR}/{cfg.netns_name}.sock"


def launch_record(
    cfg: LauncherConfig,
    *,
    dns_udp_fds: tuple[int, ...],
    dns_tcp_fd: int,
    edge_tcp_fd: int | None = None,
    owner_fd: int | None = None,
    control_socket: str | None = None,
) -> LaunchRecord:
    """What the resident is told: every served port, and only descriptors fulcrum bound.

    ``control_socket`` is where the control socket really is (systemd's ``.socket`` unit
    may name another path than ``control_socket_path``'s default).
    """
    return LaunchRecord(
        resident=True,
        control_socket=control_socket or control_socket_path(cfg),
        ports=served_ports(cfg),
        dns_udp_fds=dns_udp_fds,
        dns_tcp_fd=dns_tcp_fd,
        owner_fd=owner_fd,
        edge_tcp_fd=edge_tcp_fd,
    )


def run_account(cfg: LauncherConfig) -> tuple[str, str]:
    """(user, group) for setpriv: ``valis`` by name unless the config pins numbers."""
    user = str(cfg.valis_uid) if cfg.valis_uid is not None else RUN_ACCOUNT
    group = str(cfg.valis_gid) if cfg.valis_gid is not None else RUN_ACCOUNT
    return user, group


def build_resident_argv(
    cfg: LauncherConfig, record: LaunchRecord, env: Mapping[str, str]
) -> list[str]:
    """``ip netns exec NAME setpriv ... env -i K=V... <valis-command> <launch argv>``."""
    for key in env:
        if not key or "=" in key or "\0" in key:
            raise LauncherError(f"environment variable name {key!r} cannot be passed on")
        if "\0" in env[key]:
            raise LauncherError(f"environment variable {key} holds a NUL; it cannot be passed")
    program = cfg.valis_command[0]
    if "=" in program:
        raise LauncherError(
            f"valis-command program {program!r} contains '=', which env(1) would read as "
            "an assignment; stage the resident at a path without '='"
        )
    user, group = run_account(cfg)
    return [
        "ip", "netns", "exec", cfg.netns_name,
        "setpriv", "--reuid", user, "--regid", group, *SETPRIV_DROP,
        "env", "-i", *(f"{key}={env[key]}" for key in sorted(env)),
        *cfg.valis_command,
        *render_launch_argv(record),
    ]  # fmt: skip

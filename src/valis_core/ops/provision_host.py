"""The host provision runs on: observing what it holds, and carrying out one step.

The thin IO shell around ``ops.provision``: ``observe`` reads the host into ``HostFacts``
(and changes nothing), ``carry_out`` does one step of the plan. Each step is written so
that running it on a host that already has what it makes changes nothing, and every
file it writes is written atomically. The launcher config is written by the function
the caller passes (``fulcrum config produce``'s own), so the library never imports the
launcher.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import attrs
import psycopg

from valis_core.acting_as import acting_as
from valis_core.apply.delivery import (
    VERSIONS_DIR,
    Reachable,
    current_version,
    stage_delivery,
    switch_current,
)
from valis_core.atomic import write_atomic
from valis_core.errors import ValisError
from valis_core.launcher_config import LauncherConfig
from valis_core.operator_state import host_cluster
from valis_core.operator_state.host_cluster import ListedCluster, ServerAccess
from valis_core.operator_state.peer_access import with_hba_line, with_ident_line
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.ops.host_probe import HostProbe
from valis_core.ops.host_readiness import traversal_problem
from valis_core.ops.provision import (
    LAYOUT_MODE,
    NOLOGIN_SHELL,
    STATE_MODE,
    TLS_FILE_MODE,
    AccountFacts,
    ClusterFacts,
    FileFacts,
    HostFacts,
    ProvisionRequest,
    Step,
    StepName,
    UnitFacts,
    tls_dir,
)
from valis_core.plugin.dist_home import DistHomeError, read_registration, register_dist

SYSTEMD_UNIT_DIR = "/etc/systemd/system"
DROPIN_NAME = "valis-run-account.conf"
_COMMAND_TIMEOUT = 120.0
_MAX_FILE_BYTES = 1 << 20
_DSN_KEY = "VALIS_OPERATOR_STATE_DSN"


class ProvisionError(ValisError):
    """A provisioning step that could not be carried out; the message says what to do."""


@attrs.frozen
class ProvisionHost:
    """What the shell needs beyond the request: the probe the o+x check reads through,
    the launcher-config writer, and where the private dist is registered."""

    probe: HostProbe
    write_launcher_config: Callable[[LauncherConfig, Path], None]
    dist_home: Path


# -- observing -------------------------------------------------------------------------


def observe(request: ProvisionRequest, host: ProvisionHost) -> HostFacts:
    """What the host holds of everything provision makes; reads only."""
    root = Path(request.root)
    account = _account(request, host)
    versions = root / VERSIONS_DIR
    staged = versions / request.version
    return HostFacts(
        account=account,
        root_mode=_dir_mode(root),
        versions_mode=_dir_mode(versions),
        version_staged=staged.is_dir() and not staged.is_symlink(),
        current=current_version(root),
        state_dir=_state_dir(Path(request.state_dir)),
        cluster=None if request.database_host is not None else _cluster(request, account),
        launcher_config=_file(Path(request.launcher_config_path)),
        site_facts=_file(Path(request.site_facts_path)),
        dist_registration=_registration(host.dist_home),
        systemd=os.path.isdir("/run/systemd/system"),
        units=tuple(_unit_facts(placement.name) for placement in request.units)
        if request.place_units else (),
        database_client=_database_client_facts(request),
        remote_schema_current=request.database_host is not None and account is not None
        and _schema_current(request, account),
    )


def _database_client_facts(request: ProvisionRequest) -> tuple[tuple[str, FileFacts], ...]:
    if request.database_host is None:
        return ()
    held = ((name, _file(Path(tls_dir(request)) / name))
            for name in request.database_host.files)
    return tuple((name, facts) for name, facts in held if facts is not None)


def _account(request: ProvisionRequest, host: ProvisionHost) -> AccountFacts | None:
    try:
        entry = pwd.getpwnam(request.account)
    except KeyError:
        return None
    blocked = None
    if not request.creates_account:
        held = host.probe.account(request.account)
        if held is not None:
            blocked = traversal_problem(host.probe, entry.pw_dir, held)
    return AccountFacts(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir,
                        entry.pw_shell, blocked)


def _dir_mode(path: Path) -> int | None:
    try:
        held = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return stat.S_IMODE(held.st_mode) if stat.S_ISDIR(held.st_mode) else None


def _state_dir(path: Path) -> FileFacts | None:
    try:
        held = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISDIR(held.st_mode):
        return None
    return FileFacts("", held.st_uid, stat.S_IMODE(held.st_mode))


def _file(path: Path) -> FileFacts | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):
            return None
        data = os.read(fd, _MAX_FILE_BYTES)
    finally:
        os.close(fd)
    return FileFacts(data.decode("utf-8", errors="replace"), held.st_uid,
                     stat.S_IMODE(held.st_mode), held.st_gid)


def _registration(home: Path) -> str | None:
    try:
        return read_registration(home)
    except DistHomeError:
        return None  # damaged: registering again replaces it


def _unit_facts(unit: str) -> UnitFacts:
    return UnitFacts(unit, _unit_link(unit), _unit_enabled(unit), _dropin_text(unit))


def _unit_link(unit: str) -> str | None:
    try:
        return os.readlink(Path(SYSTEMD_UNIT_DIR) / unit)
    except OSError:
        return None


def dropin_path(unit: str) -> Path:
    return Path(SYSTEMD_UNIT_DIR) / f"{unit}.d" / DROPIN_NAME


def _dropin_text(unit: str) -> str | None:
    held = _file(dropin_path(unit))
    return None if held is None else held.text


def _unit_enabled(unit: str) -> bool:
    try:
        done = subprocess.run(["systemctl", "is-enabled", unit], capture_output=True,
                              text=True, timeout=_COMMAND_TIMEOUT, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "enabled"


def _chosen_cluster(request: ProvisionRequest) -> ListedCluster | None:
    """The cluster listening on the node's PostgreSQL port."""
    clusters = host_cluster.list_clusters()
    matching = [cluster for cluster in clusters if cluster.port == request.pg_port]
    return matching[0] if matching else None


def _server(request: ProvisionRequest, cluster: ListedCluster) -> ServerAccess:
    return ServerAccess(request.socket_dir, cluster.port, cluster.owner)


def _cluster(request: ProvisionRequest, account: AccountFacts | None) -> ClusterFacts | None:
    listed = _chosen_cluster(request)
    if listed is None:
        return None
    facts = ClusterFacts(listed.version, listed.name, listed.port, listed.running)
    if not listed.running:
        return facts
    with host_cluster.superuser(_server(request, listed)) as conn:
        state = host_cluster.read_state(conn, request.access)
    return attrs.evolve(
        facts,
        role_exists=state.role_exists,
        database_exists=state.database_exists,
        ident_text=state.ident_text,
        hba_text=state.hba_text,
        schema_current=account is not None and _schema_current(request, account),
    )


def _schema_current(request: ProvisionRequest, account: AccountFacts) -> bool:
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.schema import schema_version, shipped_migrations

    try:
        with acting_as((account.uid, account.gid)):
            conn = connect(request.site_facts[_DSN_KEY])
        with conn:
            return schema_version(conn) == shipped_migrations()[-1].version
    except (ValisError, psycopg.Error):
        return False  # not reachable as the run account yet: the steps before make it so


# -- carrying out ----------------------------------------------------------------------


def carry_out(step: Step, request: ProvisionRequest, host: ProvisionHost) -> None:
    """Do ``step`` on this host (it is to do); raise ``ProvisionError`` when it cannot."""
    _ACTIONS[step.name](request, host)


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT,
                              check=False, stdin=subprocess.DEVNULL, env=env, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvisionError(f"provision: cannot {what}: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise ProvisionError(f"provision: cannot {what}: {detail.splitlines()[-1]}")


def _create_account(request: ProvisionRequest, host: ProvisionHost) -> None:
    name = request.account
    _run(["useradd", "--system", "--user-group", "--home-dir", "/nonexistent",
          "--no-create-home", "--shell", NOLOGIN_SHELL, name], f"create the account {name}")


def make_directory(path: Path, mode: int, owner: tuple[int, int] | None = None) -> None:
    """``path`` as a directory with exactly ``mode`` (set by chmod: the umask narrows what
    mkdir makes), and ``owner`` when given; an existing directory is only re-moded."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ProvisionError(f"provision: {path} exists and is not a directory; move it aside")
    try:
        path.mkdir(exist_ok=True)
        if owner is not None:
            os.chown(path, *owner, follow_symlinks=False)
        os.chmod(path, mode)
    except OSError as exc:
        raise ProvisionError(
            f"provision: cannot make {path}: {exc.strerror or exc}; run as root"
        ) from None


def _layout(request: ProvisionRequest, host: ProvisionHost) -> None:
    root = Path(request.root)
    for parent in reversed(root.parents):
        if not parent.exists():
            make_directory(parent, LAYOUT_MODE)
    make_directory(root, LAYOUT_MODE)
    make_directory(root / VERSIONS_DIR, LAYOUT_MODE)


def _delivery(request: ProvisionRequest, host: ProvisionHost) -> None:
    root = Path(request.root)
    staged = root / VERSIONS_DIR / request.version
    if not staged.is_dir():
        if request.delivery is None:
            raise ProvisionError(
                f"provision: version {request.version} is not staged; give --delivery TARBALL"
            )
        manifest, staged = stage_delivery(Path(request.delivery), root,
                                          reachable=_reachable(request, host))
        if manifest.version != request.version:
            raise ProvisionError(
                f"provision: {request.delivery} is version {manifest.version}, but this "
                f"valis is {request.version}; run the bin/valis unpacked from that delivery"
            )
    switch_current(root, request.version)


def _reachable(request: ProvisionRequest, host: ProvisionHost) -> Reachable:
    """The o+x chain check for the run account, as apply runs it before switching."""
    account = host.probe.account(request.account)
    if account is None:
        raise ProvisionError(f"provision: there is no account {request.account!r}")

    def reachable(path: Path) -> str | None:
        return traversal_problem(host.probe, str(path), account)

    return reachable


def _state_directory(request: ProvisionRequest, host: ProvisionHost) -> None:
    entry = _resolved_account(request)
    make_directory(Path(request.state_dir), STATE_MODE, (entry.pw_uid, entry.pw_gid))


def _resolved_account(request: ProvisionRequest) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(request.account)
    except KeyError:
        raise ProvisionError(f"provision: there is no account {request.account!r}") from None


def _listed(request: ProvisionRequest) -> ListedCluster:
    cluster = _chosen_cluster(request)
    if cluster is None:
        raise ProvisionError("provision: no local PostgreSQL cluster on the DSN's port")
    return cluster


def _start_cluster(request: ProvisionRequest, host: ProvisionHost) -> None:
    host_cluster.start_cluster(_listed(request))


def _role(request: ProvisionRequest, host: ProvisionHost) -> None:
    with host_cluster.superuser(_server(request, _listed(request))) as conn:
        if not host_cluster.read_state(conn, request.access).role_exists:
            host_cluster.create_role(conn, request.access)


def _database(request: ProvisionRequest, host: ProvisionHost) -> None:
    with host_cluster.superuser(_server(request, _listed(request))) as conn:
        if not host_cluster.read_state(conn, request.access).database_exists:
            host_cluster.create_database(conn, request.access)


def _ident(request: ProvisionRequest, host: ProvisionHost) -> None:
    with host_cluster.superuser(_server(request, _listed(request))) as conn:
        state = host_cluster.read_state(conn, request.access)
        text = with_ident_line(state.ident_text, request.access)
        if text != state.ident_text:
            host_cluster.rewrite_conf(state.ident_file, text)
            host_cluster.reload(conn)


def _hba(request: ProvisionRequest, host: ProvisionHost) -> None:
    with host_cluster.superuser(_server(request, _listed(request))) as conn:
        state = host_cluster.read_state(conn, request.access)
        text = with_hba_line(state.hba_text, request.access)
        if text != state.hba_text:
            host_cluster.install_hba(conn, state.hba_file, text)


def _database_client(request: ProvisionRequest, host: ProvisionHost) -> None:
    """The client bundle under the state directory, the run account's alone."""
    assert request.database_host is not None
    entry = _resolved_account(request)
    owner = (entry.pw_uid, entry.pw_gid)
    where = Path(tls_dir(request))
    make_directory(where, 0o700, owner)
    for name, data in request.database_host.files.items():
        write_atomic(where / name, data, mode=TLS_FILE_MODE, owner=owner)


def _schema(request: ProvisionRequest, host: ProvisionHost) -> None:
    """``valis db migrate`` as the run account (setpriv), by the staged binary: the
    account's own peer identity, and proof it can run what the unit will run."""
    entry = _resolved_account(request)
    valis = str(Path(request.root) / "current" / "bin" / "valis")
    _run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
          "--", valis, "db", "migrate", "--dsn", request.site_facts[_DSN_KEY]],
         f"migrate the schema as {request.account}", env=_RUN_ACCOUNT_ENV)


_RUN_ACCOUNT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/", "LC_ALL": "C.UTF-8"}


def _parent(path: Path) -> None:
    if not path.parent.is_dir():
        _parent(path.parent)
        make_directory(path.parent, LAYOUT_MODE)


def _launcher_config(request: ProvisionRequest, host: ProvisionHost) -> None:
    path = Path(request.launcher_config_path)
    _parent(path)
    host.write_launcher_config(request.launcher_config, path)


def _site_facts(request: ProvisionRequest, host: ProvisionHost) -> None:
    path = Path(request.site_facts_path)
    _parent(path)
    write_site_facts(path, request.site_facts)
    # Readable by the run group, so the run account's verbs find the DSN here.
    try:
        os.chown(path, 0, _resolved_account(request).pw_gid, follow_symlinks=False)
    except OSError as exc:
        raise ProvisionError(f"provision: cannot give {path} to the run group: "
                             f"{exc.strerror or exc}") from None


def _private_dist(request: ProvisionRequest, host: ProvisionHost) -> None:
    if request.dist_url is not None:
        _parent(host.dist_home / "registration")
        register_dist(host.dist_home, request.dist_url,
                      allow_insecure=request.allow_insecure_dist)


def _unit(request: ProvisionRequest, host: ProvisionHost) -> None:
    """Both units' drop-ins, links and enablement; each part only where it differs."""
    placements = request.units
    rewritten = False
    for placement in placements:
        dropin = dropin_path(placement.name)
        if _dropin_text(placement.name) == placement.dropin:
            continue
        if placement.dropin is None:
            dropin.unlink(missing_ok=True)
        else:
            _parent(dropin)
            write_atomic(dropin, placement.dropin.encode("utf-8"), mode=0o644)
        rewritten = True
    if rewritten:
        _run(["systemctl", "daemon-reload"], "reload systemd's units")
    unlinked = [placement.source for placement in placements
                if _unit_link(placement.name) != placement.source]
    if unlinked:
        _run(["systemctl", "link", *unlinked], f"link {' '.join(unlinked)}")
    names = [placement.name for placement in placements]
    _run(["systemctl", "enable", *names], f"enable {' '.join(names)}")


_ACTIONS: dict[StepName, Callable[[ProvisionRequest, ProvisionHost], None]] = {
    StepName.RUN_ACCOUNT: _create_account,
    StepName.FHS_LAYOUT: _layout,
    StepName.DELIVERY: _delivery,
    StepName.STATE_DIRECTORY: _state_directory,
    StepName.DATABASE_CLIENT: _database_client,
    StepName.POSTGRESQL_CLUSTER: _start_cluster,
    StepName.POSTGRESQL_ROLE: _role,
    StepName.POSTGRESQL_DATABASE: _database,
    StepName.PEER_IDENT: _ident,
    StepName.PEER_HBA: _hba,
    StepName.SCHEMA: _schema,
    StepName.LAUNCHER_CONFIG: _launcher_config,
    StepName.SITE_FACTS: _site_facts,
    StepName.PRIVATE_DIST: _private_dist,
    StepName.UNIT: _unit,
}

"""The first boot's plan: host facts observed in, the ordered steps out, each one already
done or still to do, with what it does in words.

``plan_provision`` is pure: what the host holds is a ``HostFacts`` value the IO shell
(``provision_host``) observed, and the plan says for every step whether the host already
has what the step makes. A step that cannot be carried out from here is *blocked* and
says what the operator (or the DBA) must do instead; a plan with a blocked step is
carried out not at all. ``settled`` is the plan's effect on the facts, as the shell's
steps make it: a plan of the settled facts is all done, which is what makes a second
provision say "nothing to change".

The steps make the host ready for condense and nothing more: nothing is started.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from enum import Enum

import attrs

from valis_core.launcher_config import (
    RESTART_TO_APPLY,
    LauncherConfig,
    owner_terminus,
    render_launcher_config,
)
from valis_core.operator_state.peer_access import (
    PeerAccess,
    dba_instructions,
    hba_admits,
    ident_maps,
    with_hba_line,
    with_ident_line,
)
from valis_core.operator_state.site_facts import SITE_FACTS_MODE, render_site_facts
from valis_core.state_layout import OPERATOR_STATE_TLS

DEFAULT_ACCOUNT = "valis"
NOLOGIN_SHELL = "/usr/sbin/nologin"
LAYOUT_MODE = 0o755
STATE_MODE = 0o700
LAUNCHER_CONFIG_MODE = 0o644
VERSIONS_DIR = "versions"
CURRENT_LINK = "current"
UNIT_DIR = "lib/systemd/system"
#: fulcrum's control socket unit, shipped beside the service (its ``Sockets=`` names it).
CONTROL_SOCKET_UNIT = "fulcrum-valis-control.socket"


class StepName(Enum):
    """Every step, in the order it runs: each needs only what the ones before it made."""

    RUN_ACCOUNT = "run-account"
    FHS_LAYOUT = "fhs-layout"
    DELIVERY = "delivery"
    STATE_DIRECTORY = "state-directory"
    DATABASE_CLIENT = "database-client"
    POSTGRESQL_CLUSTER = "postgresql-cluster"
    POSTGRESQL_ROLE = "postgresql-role"
    POSTGRESQL_DATABASE = "postgresql-database"
    PEER_IDENT = "peer-ident"
    PEER_HBA = "peer-hba"
    SCHEMA = "schema"
    LAUNCHER_CONFIG = "launcher-config"
    SITE_FACTS = "site-facts"
    PRIVATE_DIST = "private-dist"
    UNIT = "unit"


class Status(Enum):
    DONE = "done"
    TO_DO = "to do"
    BLOCKED = "blocked"


@attrs.frozen
class Step:
    """One step of the plan: its status and, in words, what it holds or will do."""

    name: StepName
    status: Status
    description: str


@attrs.frozen
class AccountFacts:
    """The run account as the host resolves it; ``home_blocked`` names the directory on
    the way to its home the account cannot traverse (the o+x chain check), if any."""

    name: str
    uid: int
    gid: int
    home: str
    shell: str
    home_blocked: str | None = None


@attrs.frozen
class FileFacts:
    """A configuration file as it stands: its text, owner, group and permission bits."""

    text: str
    uid: int
    mode: int
    gid: int = 0


@attrs.frozen
class ClusterFacts:
    """The local PostgreSQL cluster (Debian's ``pg_lsclusters``) and, when it runs, what
    the shell read from it: role, database, the two access files and the schema."""

    version: str
    name: str
    port: int
    running: bool
    role_exists: bool = False
    database_exists: bool = False
    ident_text: str | None = None
    hba_text: str | None = None
    schema_current: bool = False


@attrs.frozen
class UnitFacts:
    """A systemd unit as placed: where its link in /etc/systemd/system points, whether it
    is enabled, and the text of provision's drop-in for it (None: absent)."""

    name: str
    link: str | None = None
    enabled: bool = False
    dropin: str | None = None


@attrs.frozen
class UnitPlacement:
    """A delivered unit as provision places it: linked from ``source`` and enabled, with
    ``dropin`` (None: no drop-in) naming another run account."""

    name: str
    source: str
    dropin: str | None

    def placed(self, held: UnitFacts) -> bool:
        return (held.link, held.enabled, held.dropin) == (self.source, True, self.dropin)


@attrs.frozen
class RemoteDatabase:
    """Operator state on a database host (the two-host topology): where it is, and the
    client bundle's files by name under the state directory's ``operator-state-tls``
    (``state_layout``: the CA, the client certificate and its key)."""

    host: str
    port: int
    files: Mapping[str, bytes]


@attrs.frozen
class HostFacts:
    """What the host holds of everything provision makes (None: absent)."""

    account: AccountFacts | None
    root_mode: int | None
    versions_mode: int | None
    version_staged: bool
    current: str | None
    state_dir: FileFacts | None
    cluster: ClusterFacts | None
    launcher_config: FileFacts | None
    site_facts: FileFacts | None
    dist_registration: str | None
    systemd: bool
    units: tuple[UnitFacts, ...] = ()
    database_client: tuple[tuple[str, FileFacts], ...] = ()
    """The client bundle's files held under the state directory, by name."""
    remote_schema_current: bool = False
    """The schema on the database host is current, as the run account reads it."""

    def unit(self, name: str) -> UnitFacts:
        """The unit ``name`` as held; one the host has nothing of is all absent."""
        return next((held for held in self.units if held.name == name), UnitFacts(name))


@attrs.frozen
class ProvisionRequest:
    """What the operator asked for. ``delivery`` is the tarball to stage when
    ``version`` is not yet under ``root``; ``dist_url`` the private dist, if any (plain
    http only with ``allow_insecure_dist``)."""

    account: str
    version: str
    root: str
    state_dir: str
    socket_dir: str
    launcher_config_path: str
    launcher_config: LauncherConfig
    site_facts_path: str
    site_facts: Mapping[str, str]
    unit_name: str
    socket_unit_name: str = CONTROL_SOCKET_UNIT
    delivery: str | None = None
    dist_url: str | None = None
    allow_insecure_dist: bool = False
    pg_port: int = 5432
    run_group: str = DEFAULT_ACCOUNT
    role: str = "valis"
    database: str = "valis_state"
    database_host: RemoteDatabase | None = None
    """None: operator state on this host's PostgreSQL, by peer over its socket."""
    place_units: bool = True
    """False (``--no-unit``): a host without systemd as PID 1; no unit is placed and the
    node is started by hand under ``valis condense --unit-command`` (``hand_start``)."""

    @property
    def creates_account(self) -> bool:
        """The default account is made here; any other named account must exist."""
        return self.account == DEFAULT_ACCOUNT

    @property
    def access(self) -> PeerAccess:
        return PeerAccess(self.account, self.role, self.database)

    @property
    def versions_path(self) -> str:
        return posixpath.join(self.root, VERSIONS_DIR)

    @property
    def units(self) -> tuple[UnitPlacement, UnitPlacement]:
        """The service and its control socket unit, from the delivery under ``current``.

        The shipped units name valis:valis (the service's ``User=``/``Group=``, whose
        state directory systemd makes and chowns; the socket's ``SocketUser=``/
        ``SocketGroup=``); another run account gets a drop-in for each, none for valis.
        """
        return (
            UnitPlacement(self.unit_name, self._unit_source(self.unit_name),
                          self._dropin("Service", "User", "Group")),
            UnitPlacement(self.socket_unit_name, self._unit_source(self.socket_unit_name),
                          self._dropin("Socket", "SocketUser", "SocketGroup")),
        )

    def _unit_source(self, name: str) -> str:
        return posixpath.join(self.root, CURRENT_LINK, UNIT_DIR, name)

    def _dropin(self, section: str, user: str, group: str) -> str | None:
        if self.creates_account:
            return None
        return (f"# Written by valis provision: the run account.\n[{section}]\n"
                f"{user}={self.account}\n{group}={self.run_group}\n")

    @property
    def hand_start(self) -> str:
        """How the node is started without systemd: condense supervises fulcrum, as the
        shipped service's ``ExecStart=`` runs it."""
        fulcrum = posixpath.join(self.root, CURRENT_LINK, "bin", "fulcrum")
        return (f"valis condense --unit-command '{fulcrum} launch --config "
                f"{self.launcher_config_path}' --state-dir {self.state_dir} (as root; it "
                "supervises fulcrum in the foreground, and valis apply --supervise the same "
                "command does later)")

    @property
    def launcher_config_text(self) -> str:
        return render_launcher_config(self.launcher_config)

    @property
    def site_facts_text(self) -> str:
        return render_site_facts(self.site_facts)


@attrs.frozen
class Plan:
    steps: tuple[Step, ...]

    @property
    def blocked(self) -> tuple[Step, ...]:
        return tuple(step for step in self.steps if step.status is Status.BLOCKED)

    @property
    def to_do(self) -> tuple[Step, ...]:
        return tuple(step for step in self.steps if step.status is Status.TO_DO)

    @property
    def nothing_to_change(self) -> bool:
        return all(step.status is Status.DONE for step in self.steps)


def _done(name: StepName, text: str) -> Step:
    return Step(name, Status.DONE, text)


def _to_do(name: StepName, text: str) -> Step:
    return Step(name, Status.TO_DO, text)


def _blocked(name: StepName, text: str) -> Step:
    return Step(name, Status.BLOCKED, text)


def plan_provision(request: ProvisionRequest, facts: HostFacts) -> Plan:
    """Every step, in ``StepName`` order, judged against ``facts``."""
    return Plan((
        _run_account(request, facts),
        _layout(request, facts),
        _delivery(request, facts),
        _state_directory(request, facts),
        _database_client(request, facts),
        *_postgresql(request, facts),
        _file_step(StepName.LAUNCHER_CONFIG, request.launcher_config_path,
                   request.launcher_config_text, LAUNCHER_CONFIG_MODE, facts.launcher_config,
                   what=f"the launcher config (fulcrum config produce), "
                        f"{owner_terminus(request.launcher_config)}",
                   group=0, changed_note=RESTART_TO_APPLY),
        _site_facts(request, facts),
        _private_dist(request, facts),
        _unit(request, facts),
    ))


def _run_account(request: ProvisionRequest, facts: HostFacts) -> Step:
    name, user = StepName.RUN_ACCOUNT, request.account
    account = facts.account
    if account is None:
        if request.creates_account:
            return _to_do(name, f"create {user}:{user}, a system account with no login shell "
                          f"(useradd --system --shell {NOLOGIN_SHELL})")
        return _blocked(name, f"there is no account {user!r} (--run-account names an existing "
                        "account); create it, or leave --run-account out for valis:valis")
    if account.uid == 0:
        return _blocked(name, f"{user} is root; name an unprivileged run account")
    if not request.creates_account and account.home_blocked is not None:
        return _blocked(name, f"{user}'s home {account.home}: {account.home_blocked}")
    return _done(name, f"{user} exists (uid {account.uid}, gid {account.gid}, "
                 f"shell {account.shell})")


def _layout(request: ProvisionRequest, facts: HostFacts) -> Step:
    name = StepName.FHS_LAYOUT
    paths = f"{request.root} and {request.versions_path}"
    if facts.root_mode == LAYOUT_MODE and facts.versions_mode == LAYOUT_MODE:
        return _done(name, f"{paths} exist, mode 0755")
    return _to_do(name, f"make {paths}, mode 0755 (world-traversable whatever the umask)")


def _delivery(request: ProvisionRequest, facts: HostFacts) -> Step:
    name, version = StepName.DELIVERY, request.version
    link = posixpath.join(request.root, CURRENT_LINK)
    if facts.current is not None and facts.current != version:
        return _blocked(name, f"{link} is version {facts.current}, not this valis's {version}; "
                        f"run {link}/bin/valis provision (valis apply changes versions)")
    if facts.version_staged and facts.current == version:
        return _done(name, f"version {version} is staged and {link} points at it")
    if facts.version_staged:
        return _to_do(name, f"point {link} at the staged version {version}")
    if request.delivery is None:
        return _blocked(name, f"version {version} is not staged under {request.versions_path}; "
                        "give --delivery TARBALL, the delivery this valis was unpacked from")
    return _to_do(name, f"stage {request.delivery} as {request.versions_path}/{version} "
                  f"(as valis apply does, starting nothing) and point {link} at it")


def _state_directory(request: ProvisionRequest, facts: HostFacts) -> Step:
    name, path = StepName.STATE_DIRECTORY, request.state_dir
    account, held = facts.account, facts.state_dir
    if account is not None and held is not None and held.uid == account.uid \
            and held.mode == STATE_MODE:
        return _done(name, f"{path} exists, owned by {request.account}, mode 0700")
    return _to_do(name, f"make {path} owned by {request.account}, mode 0700")


TLS_FILE_MODE = 0o600


def tls_dir(request: ProvisionRequest) -> str:
    return posixpath.join(request.state_dir, OPERATOR_STATE_TLS)


def _database_client(request: ProvisionRequest, facts: HostFacts) -> Step:
    name, remote = StepName.DATABASE_CLIENT, request.database_host
    if remote is None:
        return _done(name, "none: operator state is on this host's PostgreSQL")
    where = tls_dir(request)
    account = facts.account
    held = dict(facts.database_client)
    if account is not None and set(held) >= set(remote.files) and all(
        (held[file].text, held[file].uid, held[file].mode)
        == (data.decode("ascii", errors="replace"), account.uid, TLS_FILE_MODE)
        for file, data in remote.files.items()
    ):
        return _done(name, f"{where} holds the client bundle for {remote.host} port "
                     f"{remote.port}, {request.account}'s, mode 0600")
    return _to_do(name, f"place the client bundle ({', '.join(sorted(remote.files))}) in "
                  f"{where}, {request.account}'s alone, mode 0600 (it joins the backup set)")


def _remote_postgresql(request: ProvisionRequest, facts: HostFacts,
                       names: tuple[StepName, ...]) -> tuple[Step, ...]:
    remote = request.database_host
    assert remote is not None
    there = f"the database host {remote.host} port {remote.port}"
    return (
        _done(names[0], f"not here: operator state is on {there} (valis db host there)"),
        *(_done(step, f"{there}'s (valis db host made it)") for step in names[1:5]),
        _done(names[5], f"the operator-state schema on {there} is current")
        if facts.remote_schema_current else
        _to_do(names[5], f"valis db migrate on {there}, as {request.account}, by its client "
               "certificate"),
    )


def _postgresql(request: ProvisionRequest, facts: HostFacts) -> tuple[Step, ...]:
    access = request.access
    cluster = facts.cluster
    names = (StepName.POSTGRESQL_CLUSTER, StepName.POSTGRESQL_ROLE,
             StepName.POSTGRESQL_DATABASE, StepName.PEER_IDENT, StepName.PEER_HBA,
             StepName.SCHEMA)
    if request.database_host is not None:
        return _remote_postgresql(request, facts, names)
    if cluster is None:
        text = (f"no PostgreSQL cluster on this host listens on port {request.pg_port} "
                "(pg_lsclusters); install postgresql here, or have the DBA do this:\n"
                + dba_instructions(access, request.socket_dir))
        return (_blocked(names[0], text),
                *(_blocked(step, "needs a local cluster") for step in names[1:]))
    which = f"{cluster.version}/{cluster.name}"
    steps = [
        _done(names[0], f"cluster {which} is running on port {cluster.port}")
        if cluster.running else
        _to_do(names[0], f"start cluster {which} (pg_ctlcluster {cluster.version} "
               f"{cluster.name} start)"),
        _done(names[1], f"role {access.role} exists") if cluster.role_exists else
        _to_do(names[1], f"{access.create_role_sql} (no password: peer authentication)"),
        _done(names[2], f"database {access.database} exists") if cluster.database_exists else
        _to_do(names[2], access.create_database_sql),
    ]
    if cluster.ident_text is not None and ident_maps(cluster.ident_text, access):
        steps.append(_done(names[3], f"pg_ident.conf maps {access.account} to {access.role}"))
    else:
        steps.append(_to_do(names[3], f"add to pg_ident.conf: {access.ident_line}"))
    if cluster.hba_text is not None and hba_admits(cluster.hba_text, access):
        steps.append(_done(names[4], f"pg_hba.conf admits {access.account} as {access.role} "
                           "by peer, ahead of any broader line"))
    else:
        steps.append(_to_do(names[4], f"add to pg_hba.conf before any broader local line: "
                            f"{access.hba_line}; reload the server"))
    steps.append(
        _done(names[5], "the operator-state schema is current") if cluster.schema_current else
        _to_do(names[5], f"valis db migrate, as {access.account}"))
    return tuple(steps)


def _file_step(name: StepName, path: str, text: str, mode: int, held: FileFacts | None, *,
               what: str, group: int, group_name: str = "root",
               changed_note: str | None = None) -> Step:
    """Write (or rewrite) the file unless it holds ``text`` as it should; ``changed_note``
    is said when its content changes (what the change needs before it takes effect)."""
    owned = f"owned by root:{group_name}, mode {mode:04o}"
    if held is not None and (held.text, held.uid, held.gid, held.mode) == (text, 0, group, mode):
        return _done(name, f"{path} holds {what}, {owned}")
    verb = "write" if held is None else "rewrite"
    note = f"; {changed_note}" if held is not None and held.text != text and changed_note else ""
    return _to_do(name, f"{verb} {path}: {what}, {owned}{note}")


def _site_facts_group(facts: HostFacts) -> int:
    """The site facts' group: the run account's, so its verbs find the DSN there."""
    return facts.account.gid if facts.account is not None else -1


def _site_facts(request: ProvisionRequest, facts: HostFacts) -> Step:
    return _file_step(StepName.SITE_FACTS, request.site_facts_path, request.site_facts_text,
                      SITE_FACTS_MODE, facts.site_facts, what="the site facts",
                      group=_site_facts_group(facts), group_name=request.account)


def _private_dist(request: ProvisionRequest, facts: HostFacts) -> Step:
    name, url = StepName.PRIVATE_DIST, request.dist_url
    if url is None:
        held = facts.dist_registration
        return _done(name, "none named" + (f" ({held} stays registered)" if held else ""))
    if facts.dist_registration == url:
        return _done(name, f"{url} is registered")
    return _to_do(name, f"register {url} as the private dist")


def _unit(request: ProvisionRequest, facts: HostFacts) -> Step:
    name = StepName.UNIT
    placements = request.units
    names = " and ".join(placement.name for placement in placements)
    if not request.place_units:
        return _done(name, f"none (--no-unit): {names} are not placed; start the node by "
                     f"hand: {request.hand_start}")
    if not facts.systemd:
        return _blocked(name, f"systemd is not running as PID 1 here, so {names} cannot be "
                        "placed; give --no-unit and start the node by hand: "
                        f"{request.hand_start}")
    account = "" if request.creates_account else (
        f", drop-ins make {request.account} the service's user and the socket's owner")
    if all(placement.placed(facts.unit(placement.name)) for placement in placements):
        source = posixpath.dirname(placements[0].source)
        return _done(name, f"{names} are linked from {source} and enabled "
                     f"(not started){account}")
    sources = " ".join(placement.source for placement in placements)
    enabled = " ".join(placement.name for placement in placements)
    return _to_do(name, f"systemctl link {sources}; systemctl enable {enabled} "
                  f"(not started){account}")


def settled(request: ProvisionRequest, facts: HostFacts) -> HostFacts:
    """``facts`` as they stand once every step of the plan has been carried out: what
    the IO shell's steps make, as values."""
    account = facts.account or AccountFacts(
        request.account, 990, 990, "/nonexistent", NOLOGIN_SHELL
    )
    cluster = facts.cluster
    if cluster is not None:
        access = request.access
        cluster = attrs.evolve(
            cluster,
            running=True,
            role_exists=True,
            database_exists=True,
            ident_text=with_ident_line(cluster.ident_text or "", access),
            hba_text=with_hba_line(cluster.hba_text or "", access),
            schema_current=True,
        )
    return attrs.evolve(
        facts,
        account=account,
        root_mode=LAYOUT_MODE,
        versions_mode=LAYOUT_MODE,
        version_staged=facts.version_staged or request.delivery is not None,
        current=request.version
        if facts.version_staged or request.delivery is not None else facts.current,
        state_dir=FileFacts("", account.uid, STATE_MODE),
        cluster=cluster,
        database_client=facts.database_client if request.database_host is None else tuple(
            (file, FileFacts(data.decode("ascii", errors="replace"), account.uid,
                             TLS_FILE_MODE, account.gid))
            for file, data in request.database_host.files.items()),
        remote_schema_current=request.database_host is not None,
        launcher_config=FileFacts(request.launcher_config_text, 0, LAUNCHER_CONFIG_MODE),
        site_facts=FileFacts(request.site_facts_text, 0, SITE_FACTS_MODE, account.gid),
        dist_registration=request.dist_url or facts.dist_registration,
        units=_placed_units(request, facts),
    )


def _placed_units(request: ProvisionRequest, facts: HostFacts) -> tuple[UnitFacts, ...]:
    """The units as the unit step leaves them: each placement linked, enabled and with
    its drop-in (others the host holds are left as they are)."""
    if not facts.systemd or not request.place_units:
        return facts.units
    placed = tuple(UnitFacts(placement.name, placement.source, True, placement.dropin)
                   for placement in request.units)
    names = {unit.name for unit in placed}
    return placed + tuple(held for held in facts.units if held.name not in names)


def render_plan(plan: Plan) -> str:
    """The plan as the operator reads it: one line per step (a blocked step's detail
    follows it, indented)."""
    width = max(len(step.name.value) for step in plan.steps)
    lines = []
    for step in plan.steps:
        first, *rest = step.description.split("\n")
        lines.append(f"  [{step.status.value:7}] {step.name.value:{width}}  {first}")
        lines.extend(f"      {line}" for line in rest)
    return "\n".join(lines) + "\n"

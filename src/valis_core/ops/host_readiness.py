"""Host assessment: every prerequisite of contract §2 as its own clause, judged over a probe.

``assess_host`` reads the host only through the ``HostProbe`` it is given and changes
nothing; there is no default probe, so a verb driven from a workstation can never grade
the workstation by accident. Only the CLI, running on the node, binds the local probe.

Each clause says pass or fail, what it saw, and for a failure the exact remedy; a passing
clause may carry a warning, for what the contract allows but an operator would not want
(a ``designated-port`` the firewall drops: the node boots and serves nobody). Clauses
are independent where the host lets them be: a missing run account fails the clauses
that are judged *for* that account (state-directory ownership, the binary's traversal
chain) because nothing can be said about them without it.

The PostgreSQL clauses are deliberately narrow: they prove a server accepts connections
on its local socket (``postgresql-socket``) or, for a node whose operator state is on a
database host (a certificate DSN, ``postgresql-tls``), that the certificate files are
there, the key the run account's alone, both certificates valid now and the client's
issued for the role, and that the host accepts TCP; never that the run account can
authenticate. A probe that connected would connect as whoever runs the assessment, and
that uid's success says nothing about the account the resident drops to; the resident
settles it by connecting as itself. Whichever seam the node does not use passes as "not
used".
"""

from __future__ import annotations

import datetime
import posixpath
import re
import stat
from collections.abc import Callable, Iterable
from typing import Literal, Protocol

import attrs
from cryptography import x509
from cryptography.x509.oid import NameOID

from valis_core.launcher_config import (
    DEFAULT_PATH,
    LauncherConfig,
    LauncherConfigError,
    config_file_problem,
    config_file_remedy,
    parse_launcher_config,
    served_dns_reachability,
)
from valis_core.node_defaults import (
    DEFAULT_PG_PORT,
    DEFAULT_PG_SOCKET_DIR,
    DEFAULT_RUN_ACCOUNT,
    DEFAULT_STATE_DIR,
)
from valis_core.operator_state.dsn import DatabaseHost
from valis_core.operator_state.site_facts import DEVELOPMENT_LISTENER_KEY

PathKind = Literal["dir", "file", "socket", "symlink", "other"]

SELFTEST_ARGUMENT = "selftest"

_MAX_INTERPRETER_DEPTH = 5  # the kernel's own limit on nested #! interpreters is 4

CLAUSE_NAMES: tuple[str, ...] = (
    "network-namespaces",
    "sk-lookup",
    "nftables",
    "privilege-drop",
    "run-account",
    "state-directory",
    "binary-traversable",
    "binary-serving-capable",
    "postgresql-socket",
    "postgresql-tls",
    "launcher-config",
    "no-development-listener",
)


# -- what a probe reports --------------------------------------------------------------


@attrs.frozen
class Account:
    """A run account as the host's user database resolves it."""

    name: str
    uid: int
    gid: int
    groups: frozenset[int] = frozenset()
    """Every group id the account holds: primary and supplementary."""


@attrs.frozen
class PathStat:
    """What ``stat(2)`` says about a path (symlinks followed unless ``kind`` says so)."""

    kind: PathKind
    uid: int
    gid: int
    mode: int
    """Permission bits only (``S_IMODE``)."""


@attrs.frozen
class BpfOutcome:
    """What the kernel said when asked to load BPF: ``ok`` is None when it could not be
    asked (not privileged), and ``reason`` says what it said."""

    ok: bool | None
    reason: str = ""


@attrs.frozen
class SelfTestOutcome:
    """How the binary's serving self-test ended: its exit status (None if it never ran)."""

    exit_status: int | None
    output: str = ""


class HostProbe(Protocol):
    """The read-only questions assessment asks of one host; each answer is a plain value."""

    def network_namespaces_supported(self) -> bool:
        """The kernel gives processes network namespaces."""

    def sk_lookup_supported(self) -> BpfOutcome:
        """The kernel loads an eBPF sk_lookup program (libbpf's own probe; nothing stays)."""

    def bpf_object_loads(self, path: str) -> BpfOutcome:
        """The BPF object at ``path`` opens and loads into the kernel, released at once."""

    def find_program(self, name: str) -> str | None:
        """The absolute path of the program ``name`` in the system paths, or None."""

    def account(self, name: str) -> Account | None:
        """The account called ``name``, or None."""

    def group_id(self, name: str) -> int | None:
        """The id of the group called ``name``, or None."""

    def stat(self, path: str) -> PathStat | None:
        """``stat`` of ``path`` following symlinks, or None if it does not exist."""

    def resolve(self, path: str) -> str:
        """``path`` with every symlink resolved (as far as it exists)."""

    def read_text(self, path: str) -> str | None:
        """The text of the file at ``path``, or None when it is absent or unreadable."""

    def interpreter(self, path: str) -> str | None:
        """The program a ``#!`` line at the start of ``path`` names, or None if it has none."""

    def self_test(self, command: tuple[str, ...]) -> SelfTestOutcome:
        """Run ``command`` (the binary and its ``selftest`` argument) and report how it ended."""

    def unix_socket_accepts(self, path: str) -> bool:
        """A stream ``connect(2)`` to the UNIX socket at ``path`` succeeds (nothing sent)."""

    def tcp_accepts(self, host: str, port: int) -> bool:
        """A TCP connection to ``host`` (name or address) port ``port`` is accepted within a
        few seconds (nothing sent)."""

    def now(self) -> datetime.datetime:
        """The host's wall clock, in UTC (certificates are judged by it)."""


# -- what assessment reports -----------------------------------------------------------


@attrs.frozen
class Clause:
    """One prerequisite's verdict: ``remedy`` is what to do when it fails (None on a pass)."""

    name: str
    ok: bool
    detail: str
    remedy: str | None = None
    warning: str | None = None
    """What a passing clause allows but an operator would not want, with its remedy."""


@attrs.frozen
class Assessment:
    """Every clause, in the order of ``CLAUSE_NAMES``."""

    clauses: tuple[Clause, ...]

    @property
    def ok(self) -> bool:
        return all(clause.ok for clause in self.clauses)

    @property
    def failed(self) -> tuple[Clause, ...]:
        return tuple(clause for clause in self.clauses if not clause.ok)

    @property
    def warnings(self) -> tuple[Clause, ...]:
        return tuple(clause for clause in self.clauses if clause.warning is not None)

    def clause(self, name: str) -> Clause:
        for clause in self.clauses:
            if clause.name == name:
                return clause
        raise KeyError(name)


@attrs.frozen
class AssessConfig:
    """What the host is being assessed for: where the node's pieces are meant to be.

    ``binary`` is the resident command (program and fixed arguments); when None and the
    host is supervised, the launcher config's ``valis-command`` is assessed.
    ``environment_files`` are the files whose settings reach the node (site facts, unit
    files and their drop-ins); the launcher config is searched too when supervised.
    """

    state_dir: str = DEFAULT_STATE_DIR
    run_account: str = DEFAULT_RUN_ACCOUNT
    binary: tuple[str, ...] | None = None
    supervised: bool = True
    launcher_config: str = str(DEFAULT_PATH)
    pg_socket_dir: str = DEFAULT_PG_SOCKET_DIR
    pg_port: int = DEFAULT_PG_PORT
    environment_files: tuple[str, ...] = ()
    database_host: DatabaseHost | None = None
    """Where operator state is when the node's DSN is a certificate DSN; None: this host's
    socket."""
    restoring: frozenset[str] = frozenset()
    """Files a condense is about to restore from a backup set: absent, they are not
    missing (the client certificate of a node evacuated onto this host)."""


def pg_socket_path(config: AssessConfig) -> str:
    """The path of PostgreSQL's local socket for ``config`` (libpq's naming)."""
    return posixpath.join(config.pg_socket_dir, f".s.PGSQL.{config.pg_port}")


# -- the assessment --------------------------------------------------------------------


@attrs.frozen
class _RunAccount:
    """The run account resolved (user, and the group when one is named)."""

    spec: str
    account: Account | None
    problem: str | None

    @property
    def name(self) -> str:
        return self.spec.partition(":")[0]


@attrs.frozen
class _Launcher:
    """The launcher config as read: parsed, or why not."""

    config: LauncherConfig | None
    text: str | None
    problem: str | None
    remedy: str | None


def assess_host(probe: HostProbe, config: AssessConfig) -> Assessment:
    """Judge every host prerequisite over ``probe``; read-only, and never raises for a fact."""
    run = _resolve_run_account(probe, config.run_account)
    launcher = _read_launcher(probe, config)
    command = _binary_command(config, launcher)
    clauses = (
        _network_namespaces(probe),
        _sk_lookup(probe, launcher),
        _nftables(probe),
        _privilege_drop(probe),
        _run_account_clause(run, launcher),
        _state_directory(probe, config, run),
        _binary_traversable(probe, command, run),
        _binary_serving_capable(probe, command),
        _postgresql_socket(probe, config, run),
        _postgresql_tls(probe, config, run),
        _launcher_config_clause(probe, config, launcher),
        _no_development_listener(probe, config),
    )
    return Assessment(clauses)


_FIX_ACCOUNT_FIRST = "fix the run-account clause first"


def _pass(name: str, detail: str) -> Clause:
    return Clause(name, True, detail, None)


def _fail(name: str, detail: str, remedy: str) -> Clause:
    return Clause(name, False, detail, remedy)


def _network_namespaces(probe: HostProbe) -> Clause:
    name = "network-namespaces"
    if not probe.network_namespaces_supported():
        return _fail(
            name,
            "the kernel offers no network namespaces (/proc/self/ns/net is missing)",
            "boot a kernel built with CONFIG_NET_NS=y (every stock Debian kernel is)",
        )
    ip = probe.find_program("ip")
    if ip is None:
        return _fail(
            name,
            "network namespaces are supported but the `ip` program is missing",
            "apt-get install iproute2",
        )
    return _pass(name, f"network namespaces supported; {ip} present")


def _sk_lookup(probe: HostProbe, launcher: _Launcher) -> Clause:
    """The kernel loads sk_lookup programs and, with an edge elected, the steer object loads.

    Both are asked of the kernel the way fulcrum asks it (libbpf loads, then everything
    is released): a kernel symbol can be inlined away while the program type works.
    """
    name = "sk-lookup"
    as_root = "run the assessment as root on the node (loading BPF needs CAP_BPF)"
    support = probe.sk_lookup_supported()
    if support.ok is None:
        return _fail(
            name, f"cannot tell whether the kernel loads eBPF sk_lookup programs: "
            f"{support.reason}", as_root,
        )
    if not support.ok:
        return _fail(
            name,
            f"the kernel cannot load an eBPF sk_lookup program: {support.reason}",
            "install libbpf1 (apt-get install libbpf1) and boot a Linux >= 5.9 kernel "
            "built with CONFIG_BPF_SYSCALL=y and CONFIG_INET=y",
        )
    cfg = launcher.config
    if cfg is None or cfg.edge_port is None:
        why = "no launcher config to read" if cfg is None else "no edge-port is elected"
        return _pass(name, f"eBPF sk_lookup supported; fulcrum loads no steer object ({why})")
    path = cfg.catchall_object_path
    loaded = probe.bpf_object_loads(path)
    if loaded.ok is None:
        return _fail(name, f"cannot tell whether the steer object {path} loads: "
                     f"{loaded.reason}", as_root)
    if not loaded.ok:
        return _fail(
            name,
            f"edge-port {cfg.edge_port} is elected but the steer object {path} "
            f"(catchall-object-path) does not load: {loaded.reason}",
            "stage the delivery (valis apply) and point catchall-object-path at its "
            "lib/sk-lookup-catchall.bpf.o (/opt/valis/current/lib/sk-lookup-catchall.bpf.o)",
        )
    return _pass(name, f"eBPF sk_lookup supported; the steer object {path} loads")


def _nftables(probe: HostProbe) -> Clause:
    name = "nftables"
    nft = probe.find_program("nft")
    if nft is None:
        return _fail(name, "the `nft` program is missing", "apt-get install nftables")
    return _pass(name, f"{nft} present")


def _privilege_drop(probe: HostProbe) -> Clause:
    name = "privilege-drop"
    setpriv = probe.find_program("setpriv")
    if setpriv is None:
        return _fail(
            name,
            "the `setpriv` program the launcher drops privilege with is missing",
            "apt-get install util-linux",
        )
    return _pass(name, f"{setpriv} present")


def _resolve_run_account(probe: HostProbe, spec: str) -> _RunAccount:
    user, _, group = spec.partition(":")
    account = probe.account(user)
    if account is None:
        return _RunAccount(spec, None, f"the run account {user!r} does not exist")
    if group:
        gid = probe.group_id(group)
        if gid is None:
            return _RunAccount(spec, account, f"the run group {group!r} does not exist")
        account = attrs.evolve(account, gid=gid, groups=account.groups | {gid})
    return _RunAccount(spec, account, None)


def _run_account_clause(run: _RunAccount, launcher: _Launcher) -> Clause:
    name = "run-account"
    user, _, group = run.spec.partition(":")
    create = (
        f"useradd --system --user-group --home-dir /nonexistent --shell /usr/sbin/nologin {user}"
    )
    if run.problem is not None:
        remedy = f"groupadd --system {group}" if run.account else create
        return _fail(name, run.problem, remedy)
    account = run.account
    assert account is not None
    if account.uid == 0:
        return _fail(
            name,
            f"the run account {user!r} is root; the resident refuses to run privileged",
            f"name an unprivileged account, e.g. create one: {create.replace(user, 'valis')}",
        )
    cfg = launcher.config
    if cfg is not None:
        for field, pinned, actual in (
            ("valis-uid", cfg.valis_uid, account.uid),
            ("valis-gid", cfg.valis_gid, account.gid),
        ):
            if pinned is not None and pinned != actual:
                return _fail(
                    name,
                    f"the launcher config pins {field} {pinned} but {run.spec!r} resolves "
                    f"to {actual}",
                    f"omit {field} from the launcher config (the account is found by name) "
                    "or pin the id this host resolves",
                )
    return _pass(name, f"{run.spec} is uid {account.uid}, gid {account.gid}")


def _can(account: Account, st: PathStat, bit: int) -> bool:
    """Whether ``account`` holds permission ``bit`` (4 r, 2 w, 1 x) on a path, as the
    kernel decides it: owner bits for the owner, else group bits for a member, else other."""
    if st.uid == account.uid:
        return bool(st.mode & (bit << 6))
    if st.gid == account.gid or st.gid in account.groups:
        return bool(st.mode & (bit << 3))
    return bool(st.mode & bit)


def _ancestors(path: str) -> list[str]:
    """Every directory the kernel walks to reach ``path``: ``/``, ``/a``, ``/a/b``..."""
    parts = [part for part in path.split("/") if part]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def _untraversable(
    probe: HostProbe, path: str, account: Account
) -> tuple[str, PathStat] | tuple[str, None] | None:
    """The first directory on the way to ``path`` the account cannot pass, if any."""
    for directory in _ancestors(path):
        st = probe.stat(directory)
        if st is None or st.kind != "dir":
            return directory, None
        if not _can(account, st, 1):
            return directory, st
    return None


def traversal_problem(probe: HostProbe, path: str, account: Account) -> str | None:
    """Why ``account`` cannot reach ``path``: the first directory on the way that is
    missing or that it may not traverse (the o+x chain check); None when all pass."""
    blocked = _untraversable(probe, path, account)
    if blocked is None:
        return None
    directory, st = blocked
    if st is None:
        return f"{directory} on the way to {path} is missing or not a directory"
    return (
        f"{account.name} cannot traverse {directory} (mode {st.mode:04o}, owner uid "
        f"{st.uid}) on the way to {path}; chmod o+x {directory}"
    )


def _state_directory(probe: HostProbe, config: AssessConfig, run: _RunAccount) -> Clause:
    name = "state-directory"
    path = config.state_dir
    user = run.name
    fix = f"install -d -o {user} -g {user} -m 0700 {path}"
    if not posixpath.isabs(path):
        return _fail(
            name, f"{path!r} is not an absolute path", "give the state directory's full path"
        )
    st = probe.stat(path)
    if st is None:
        return _fail(name, f"{path} does not exist", fix)
    if st.kind != "dir":
        return _fail(name, f"{path} is not a directory", f"move it aside, then {fix}")
    if run.account is None:
        return _fail(name, f"cannot judge {path}: {run.problem}", _FIX_ACCOUNT_FIRST)
    account = run.account
    if st.uid != account.uid:
        return _fail(
            name,
            f"{path} is owned by uid {st.uid}, not by the run account {user} (uid {account.uid})",
            f"chown {user}: {path}",
        )
    if st.mode & 0o700 != 0o700:
        return _fail(
            name,
            f"{path} has mode {st.mode:04o}; its owner {user} cannot read, write and enter it",
            f"chmod u+rwx {path}",
        )
    blocked = _untraversable(probe, path, account)
    if blocked is not None:
        directory, _ = blocked
        return _fail(
            name,
            f"{user} cannot traverse {directory} on the way to {path}",
            f"chmod o+x {directory} (or move the state directory under a traversable path)",
        )
    return _pass(name, f"{path} exists, owned by {user} (uid {account.uid}), mode {st.mode:04o}")


def _binary_command(config: AssessConfig, launcher: _Launcher) -> tuple[str, ...] | None:
    if config.binary is not None:
        return config.binary
    if config.supervised and launcher.config is not None:
        return launcher.config.valis_command
    return None


_NO_BINARY = (
    "no binary to assess: the launcher config is unusable and no --binary was given",
    "pass --binary PATH, or fix the launcher-config clause so its valis-command is read",
)


def _binary_traversable(
    probe: HostProbe, command: tuple[str, ...] | None, run: _RunAccount
) -> Clause:
    name = "binary-traversable"
    if command is None:
        return _fail(name, *_NO_BINARY)
    program = command[0]
    if not posixpath.isabs(program):
        return _fail(
            name, f"{program!r} is not an absolute path", "stage the binary at an absolute path"
        )
    if run.account is None:
        return _fail(name, f"cannot judge {program}: {run.problem}", _FIX_ACCOUNT_FIRST)
    account = run.account
    user = run.name
    # The kernel walks the path as named and every symlink's target, and for a script
    # the interpreter its #! line names (a virtual environment's python, say): check all.
    for path in _exec_chain(probe, program):
        blocked = _untraversable(probe, path, account)
        if blocked is not None:
            directory, st = blocked
            if st is None:
                return _fail(
                    name,
                    f"{directory} on the way to {program} is missing or not a directory",
                    f"stage the binary at {program}",
                )
            return _fail(
                name,
                f"{user} cannot traverse {directory} (mode {st.mode:04o}, owner uid {st.uid}) "
                f"on the way to {program}",
                f"chmod o+x {directory}, or stage the binary under a world-traversable path "
                "such as /opt/valis",
            )
    for path in _exec_chain(probe, program):
        st = probe.stat(path)
        if st is None:
            return _fail(name, f"{path} does not exist", f"stage the serving binary at {program}")
        if st.kind != "file":
            return _fail(
                name, f"{path} is not a regular file", f"stage the serving binary at {program}"
            )
        if not _can(account, st, 1):
            return _fail(
                name,
                f"{user} may not execute {path} (mode {st.mode:04o}, owner uid {st.uid})",
                f"chmod 0755 {path}",
            )
        if probe.interpreter(path) is not None and not _can(account, st, 4):
            return _fail(
                name,
                f"{user} may not read the script {path} (mode {st.mode:04o}, owner uid "
                f"{st.uid})",
                f"chmod 0755 {path}",
            )
    return _pass(name, f"every directory on the way to {program} is traversable by {user}")


def _exec_chain(probe: HostProbe, program: str) -> list[str]:
    """Every path the kernel resolves to execute ``program``: it, its symlink target, and
    the same for each ``#!`` interpreter in turn (as deep as the kernel follows)."""
    chain: list[str] = []
    current: str | None = program
    for _ in range(_MAX_INTERPRETER_DEPTH):
        if current is None or not posixpath.isabs(current) or current in chain:
            break
        resolved = probe.resolve(current)
        chain.extend(path for path in (current, resolved) if path not in chain)
        current = probe.interpreter(resolved)
    return chain


def _binary_serving_capable(probe: HostProbe, command: tuple[str, ...] | None) -> Clause:
    name = "binary-serving-capable"
    if command is None:
        return _fail(name, *_NO_BINARY)
    shown = " ".join((*command, SELFTEST_ARGUMENT))
    outcome = probe.self_test((*command, SELFTEST_ARGUMENT))
    last = _last_line(outcome.output)
    if outcome.exit_status is None:
        return _fail(
            name,
            f"`{shown}` could not run" + (f": {last}" if last else ""),
            "stage the serving-capable binary (the delivery's, not a plain core)",
        )
    if outcome.exit_status != 0:
        return _fail(
            name,
            f"`{shown}` exited {outcome.exit_status}" + (f": {last}" if last else ""),
            "stage the serving-capable binary (the delivery's, not a plain core); a binary "
            "without the serving codec fails closed at boot",
        )
    return _pass(name, f"`{shown}` passed" + (f": {last}" if last else ""))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _postgresql_socket(probe: HostProbe, config: AssessConfig, run: _RunAccount) -> Clause:
    name = "postgresql-socket"
    if config.database_host is not None:
        where = config.database_host
        return _pass(name, f"not used: operator state is on the database host {where.host} "
                     f"port {where.port} (a certificate DSN; see postgresql-tls)")
    path = pg_socket_path(config)
    caveat = (
        f"a precondition only: this does not prove the run account {run.name} can "
        "authenticate; the resident settles that by connecting as itself at boot"
    )
    st = probe.stat(path)
    if st is None or st.kind != "socket":
        what = "does not exist" if st is None else "is not a socket"
        return _fail(
            name,
            f"{path} {what}: PostgreSQL is not listening on its local socket",
            "start PostgreSQL (systemctl start postgresql) with unix_socket_directories "
            f"including {config.pg_socket_dir} and port {config.pg_port}",
        )
    if not probe.unix_socket_accepts(path):
        return _fail(
            name,
            f"{path} exists but refuses connections (a stale socket?)",
            "start or restart PostgreSQL (systemctl restart postgresql)",
        )
    return _pass(name, f"PostgreSQL accepts connections on {path} ({caveat})")


#: a certificate this close to its end passes with a warning
EXPIRY_WARNING = datetime.timedelta(days=30)


def _certificate(probe: HostProbe, path: str, what: str) -> x509.Certificate | str:
    """The PEM certificate at ``path``, or why it cannot be read as one."""
    text = probe.read_text(path)
    if text is None:
        return f"{what} {path} is absent or unreadable"
    try:
        return x509.load_pem_x509_certificate(text.encode("ascii", errors="replace"))
    except ValueError:
        return f"{what} {path} is not a PEM certificate"


def _validity(cert: x509.Certificate, path: str, what: str, now: datetime.datetime
              ) -> tuple[str | None, str | None]:
    """(why it is not valid now, a warning that it soon will not be)."""
    if now < cert.not_valid_before_utc:
        return f"{what} {path} is not valid before {cert.not_valid_before_utc:%Y-%m-%d}", None
    if now > cert.not_valid_after_utc:
        return f"{what} {path} expired on {cert.not_valid_after_utc:%Y-%m-%d}", None
    if cert.not_valid_after_utc - now < EXPIRY_WARNING:
        return None, f"{what} {path} expires on {cert.not_valid_after_utc:%Y-%m-%d}"
    return None, None


def _postgresql_tls(probe: HostProbe, config: AssessConfig, run: _RunAccount) -> Clause:
    name = "postgresql-tls"
    where = config.database_host
    if where is None:
        return _pass(name, "not used: operator state is on this host's socket")
    files = where.files
    remedy = ("issue the node a client bundle on the database host (valis db client-bundle) "
              "and place it with valis provision --database-host; docs/operator-state.md")
    account = run.account
    problems: list[str] = []
    warnings: list[str] = []
    key = probe.stat(files.key)
    if key is None and files.key in config.restoring:
        pass
    elif key is None or key.kind != "file":
        problems.append(f"the client key {files.key} is absent or not a file")
    elif account is not None and (key.uid != account.uid or key.mode & 0o077):
        problems.append(f"the client key {files.key} must be {run.name}'s alone, mode 0600 "
                        f"(it is uid {key.uid}, mode {key.mode:04o}); libpq refuses it else")
    role = where.role or run.name
    now = probe.now()
    for path, what in ((files.root, "the CA certificate"), (files.cert, "the client certificate")):
        if probe.stat(path) is None and path in config.restoring:
            continue
        cert = _certificate(probe, path, what)
        if isinstance(cert, str):
            problems.append(cert)
            continue
        invalid, soon = _validity(cert, path, what, now)
        problems.extend([invalid] if invalid else [])
        warnings.extend([soon] if soon else [])
        if path == files.cert:
            names = [str(attr.value) for attr in
                     cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
            if names != [role]:
                problems.append(f"the client certificate {path} is issued for "
                                f"{', '.join(names) or 'no CN'}, not the role {role}")
    if problems:
        return _fail(name, "; ".join(problems), remedy)
    if not probe.tcp_accepts(where.host, where.port):
        return _fail(name, f"the database host {where.host} port {where.port} does not accept "
                     "TCP from this host", "start PostgreSQL there with listen_addresses "
                     "naming the address nodes dial, and let this host reach it")
    clause = _pass(name, f"{files.cert} (CN {role}) and its key are in place, and "
                   f"{where.host} port {where.port} accepts TCP (a precondition only: the "
                   "resident proves the certificate by connecting as itself)")
    if warnings:
        clause = attrs.evolve(clause, warning="; ".join(warnings) +
                              ": issue a new client bundle before then")
    return clause


def _read_launcher(probe: HostProbe, config: AssessConfig) -> _Launcher:
    path = config.launcher_config
    produce = f"fulcrum config produce --out {path} ..."
    text = probe.read_text(path)
    if text is None:
        missing = probe.stat(path) is None
        problem = f"{path} is missing" if missing else f"{path} is unreadable"
        return _Launcher(None, None, problem, produce if missing else f"chmod 0644 {path}")
    try:
        cfg = parse_launcher_config(text)
    except LauncherConfigError as exc:
        return _Launcher(None, text, f"{path}: {exc}", f"correct it, or re-run {produce}")
    return _Launcher(cfg, text, None, None)


def _launcher_config_clause(probe: HostProbe, config: AssessConfig, launcher: _Launcher) -> Clause:
    name = "launcher-config"
    path = config.launcher_config
    if not config.supervised:
        return _pass(name, "the host is not supervised by fulcrum; no launcher config is needed")
    if launcher.problem is not None:
        assert launcher.remedy is not None
        return _fail(name, launcher.problem, launcher.remedy)
    st = probe.stat(path)
    if st is None or st.kind != "file":
        return _fail(
            name, f"{path} is not a regular file", f"fulcrum config produce --out {path} ..."
        )
    problem = config_file_problem(path, st.uid, st.mode)
    if problem is not None:
        return _fail(name, problem, config_file_remedy(path))
    assert launcher.config is not None
    return Clause(
        name,
        True,
        f"{path} present, valid, root-owned, mode {st.mode:04o}",
        warning=served_dns_reachability(launcher.config).problem,
    )


_DEV_LISTENER_RE = re.compile(rf"\b{DEVELOPMENT_LISTENER_KEY}\b")


def development_listener_mentions(text: str) -> tuple[int, ...]:
    """The line numbers of ``text`` that set the development listener (comments aside)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(("#", ";")):
            continue
        if _DEV_LISTENER_RE.search(stripped):
            found.append(number)
    return tuple(found)


def _no_development_listener(probe: HostProbe, config: AssessConfig) -> Clause:
    name = "no-development-listener"
    paths = list(config.environment_files)
    if config.supervised:
        paths.append(config.launcher_config)
    places: list[str] = []
    for path in dict.fromkeys(paths):
        text = probe.read_text(path)
        if text is None:
            continue
        places.extend(f"{path}:{line}" for line in development_listener_mentions(text))
    if places:
        return _fail(
            name,
            f"{DEVELOPMENT_LISTENER_KEY} reaches the node from {', '.join(places)}",
            f"remove {DEVELOPMENT_LISTENER_KEY} from each of those lines; it is never set on "
            "a node",
        )
    searched = ", ".join(dict.fromkeys(paths)) or "no files"
    return _pass(name, f"{DEVELOPMENT_LISTENER_KEY} set nowhere (searched {searched})")


# -- presenting an assessment ------------------------------------------------------------


def render_table(clauses: Iterable[Clause]) -> str:
    """The assessment for people: one row per clause, each failure's remedy beneath it."""
    rows = list(clauses)
    width = max((len(clause.name) for clause in rows), default=0)
    lines = []
    for clause in rows:
        verdict = "FAIL" if not clause.ok else "warn" if clause.warning else "pass"
        lines.append(f"{verdict}  {clause.name:<{width}}  {clause.detail}")
        if clause.remedy is not None:
            lines.append(f"      {'':<{width}}  remedy: {clause.remedy}")
        if clause.warning is not None:
            lines.append(f"      {'':<{width}}  warning: {clause.warning}")
    return "\n".join(lines) + "\n"


def path_kind(mode: int) -> PathKind:
    """The ``PathKind`` of a full ``st_mode``."""
    kinds: tuple[tuple[Callable[[int], bool], PathKind], ...] = (
        (stat.S_ISDIR, "dir"),
        (stat.S_ISREG, "file"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    return "other"

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

The probe's questions and answers are ``ops.host_probe``; the verdicts, the config and the
table ``ops.assessment``; the PostgreSQL clauses ``ops.database_readiness``. This module
holds the assessment itself and every other clause.
"""

from __future__ import annotations

import posixpath
import re

import attrs

from valis_core.launcher_config import (
    LauncherConfigError,
    config_file_problem,
    config_file_remedy,
    parse_launcher_config,
    served_dns_reachability,
)
from valis_core.operator_state.site_facts import DEVELOPMENT_LISTENER_KEY
from valis_core.ops.assessment import (
    FIX_ACCOUNT_FIRST,
    AssessConfig,
    Assessment,
    Clause,
    LauncherRead,
    RunAccount,
    failed,
    passed,
)
from valis_core.ops.database_readiness import postgresql_socket_clause, postgresql_tls_clause
from valis_core.ops.host_probe import Account, HostProbe, PathStat

SELFTEST_ARGUMENT = "selftest"

_MAX_INTERPRETER_DEPTH = 5  # the kernel's own limit on nested #! interpreters is 4


# -- the assessment --------------------------------------------------------------------


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
        postgresql_socket_clause(probe, config, run),
        postgresql_tls_clause(probe, config, run),
        _launcher_config_clause(probe, config, launcher),
        _no_development_listener(probe, config),
    )
    return Assessment(clauses)


def _network_namespaces(probe: HostProbe) -> Clause:
    name = "network-namespaces"
    if not probe.network_namespaces_supported():
        return failed(
            name,
            "the kernel offers no network namespaces (/proc/self/ns/net is missing)",
            "boot a kernel built with CONFIG_NET_NS=y (every stock Debian kernel is)",
        )
    ip = probe.find_program("ip")
    if ip is None:
        return failed(
            name,
            "network namespaces are supported but the `ip` program is missing",
            "apt-get install iproute2",
        )
    return passed(name, f"network namespaces supported; {ip} present")


def _sk_lookup(probe: HostProbe, launcher: LauncherRead) -> Clause:
    """The kernel loads sk_lookup programs and, with an edge elected, the steer object loads.

    Both are asked of the kernel the way fulcrum asks it (libbpf loads, then everything
    is released): a kernel symbol can be inlined away while the program type works.
    """
    name = "sk-lookup"
    as_root = "run the assessment as root on the node (loading BPF needs CAP_BPF)"
    support = probe.sk_lookup_supported()
    if support.ok is None:
        return failed(
            name, f"cannot tell whether the kernel loads eBPF sk_lookup programs: "
            f"{support.reason}", as_root,
        )
    if not support.ok:
        return failed(
            name,
            f"the kernel cannot load an eBPF sk_lookup program: {support.reason}",
            "install libbpf1 (apt-get install libbpf1) and boot a Linux >= 5.9 kernel "
            "built with CONFIG_BPF_SYSCALL=y and CONFIG_INET=y",
        )
    cfg = launcher.config
    if cfg is None or cfg.edge_port is None:
        why = "no launcher config to read" if cfg is None else "no edge-port is elected"
        return passed(name, f"eBPF sk_lookup supported; fulcrum loads no steer object ({why})")
    path = cfg.catchall_object_path
    loaded = probe.bpf_object_loads(path)
    if loaded.ok is None:
        return failed(name, f"cannot tell whether the steer object {path} loads: "
                     f"{loaded.reason}", as_root)
    if not loaded.ok:
        return failed(
            name,
            f"edge-port {cfg.edge_port} is elected but the steer object {path} "
            f"(catchall-object-path) does not load: {loaded.reason}",
            "stage the delivery (valis apply) and point catchall-object-path at its "
            "lib/sk-lookup-catchall.bpf.o (/opt/valis/current/lib/sk-lookup-catchall.bpf.o)",
        )
    return passed(name, f"eBPF sk_lookup supported; the steer object {path} loads")


def _nftables(probe: HostProbe) -> Clause:
    name = "nftables"
    nft = probe.find_program("nft")
    if nft is None:
        return failed(name, "the `nft` program is missing", "apt-get install nftables")
    return passed(name, f"{nft} present")


def _privilege_drop(probe: HostProbe) -> Clause:
    name = "privilege-drop"
    setpriv = probe.find_program("setpriv")
    if setpriv is None:
        return failed(
            name,
            "the `setpriv` program the launcher drops privilege with is missing",
            "apt-get install util-linux",
        )
    return passed(name, f"{setpriv} present")


def _resolve_run_account(probe: HostProbe, spec: str) -> RunAccount:
    user, _, group = spec.partition(":")
    account = probe.account(user)
    if account is None:
        return RunAccount(spec, None, f"the run account {user!r} does not exist")
    if group:
        gid = probe.group_id(group)
        if gid is None:
            return RunAccount(spec, account, f"the run group {group!r} does not exist")
        account = attrs.evolve(account, gid=gid, groups=account.groups | {gid})
    return RunAccount(spec, account, None)


def _run_account_clause(run: RunAccount, launcher: LauncherRead) -> Clause:
    name = "run-account"
    user, _, group = run.spec.partition(":")
    create = (
        f"useradd --system --user-group --home-dir /nonexistent --shell /usr/sbin/nologin {user}"
    )
    if run.problem is not None:
        remedy = f"groupadd --system {group}" if run.account else create
        return failed(name, run.problem, remedy)
    account = run.account
    assert account is not None
    if account.uid == 0:
        return failed(
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
                return failed(
                    name,
                    f"the launcher config pins {field} {pinned} but {run.spec!r} resolves "
                    f"to {actual}",
                    f"omit {field} from the launcher config (the account is found by name) "
                    "or pin the id this host resolves",
                )
    return passed(name, f"{run.spec} is uid {account.uid}, gid {account.gid}")


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


def _state_directory(probe: HostProbe, config: AssessConfig, run: RunAccount) -> Clause:
    name = "state-directory"
    path = config.state_dir
    user = run.name
    fix = f"install -d -o {user} -g {user} -m 0700 {path}"
    if not posixpath.isabs(path):
        return failed(
            name, f"{path!r} is not an absolute path", "give the state directory's full path"
        )
    st = probe.stat(path)
    if st is None:
        return failed(name, f"{path} does not exist", fix)
    if st.kind != "dir":
        return failed(name, f"{path} is not a directory", f"move it aside, then {fix}")
    if run.account is None:
        return failed(name, f"cannot judge {path}: {run.problem}", FIX_ACCOUNT_FIRST)
    account = run.account
    if st.uid != account.uid:
        return failed(
            name,
            f"{path} is owned by uid {st.uid}, not by the run account {user} (uid {account.uid})",
            f"chown {user}: {path}",
        )
    if st.mode & 0o700 != 0o700:
        return failed(
            name,
            f"{path} has mode {st.mode:04o}; its owner {user} cannot read, write and enter it",
            f"chmod u+rwx {path}",
        )
    blocked = _untraversable(probe, path, account)
    if blocked is not None:
        directory, _ = blocked
        return failed(
            name,
            f"{user} cannot traverse {directory} on the way to {path}",
            f"chmod o+x {directory} (or move the state directory under a traversable path)",
        )
    return passed(name, f"{path} exists, owned by {user} (uid {account.uid}), mode {st.mode:04o}")


def _binary_command(config: AssessConfig, launcher: LauncherRead) -> tuple[str, ...] | None:
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
    probe: HostProbe, command: tuple[str, ...] | None, run: RunAccount
) -> Clause:
    name = "binary-traversable"
    if command is None:
        return failed(name, *_NO_BINARY)
    program = command[0]
    if not posixpath.isabs(program):
        return failed(
            name, f"{program!r} is not an absolute path", "stage the binary at an absolute path"
        )
    if run.account is None:
        return failed(name, f"cannot judge {program}: {run.problem}", FIX_ACCOUNT_FIRST)
    account = run.account
    user = run.name
    # The kernel walks the path as named and every symlink's target, and for a script
    # the interpreter its #! line names (a virtual environment's python, say): check all.
    for path in _exec_chain(probe, program):
        blocked = _untraversable(probe, path, account)
        if blocked is not None:
            directory, st = blocked
            if st is None:
                return failed(
                    name,
                    f"{directory} on the way to {program} is missing or not a directory",
                    f"stage the binary at {program}",
                )
            return failed(
                name,
                f"{user} cannot traverse {directory} (mode {st.mode:04o}, owner uid {st.uid}) "
                f"on the way to {program}",
                f"chmod o+x {directory}, or stage the binary under a world-traversable path "
                "such as /opt/valis",
            )
    for path in _exec_chain(probe, program):
        st = probe.stat(path)
        if st is None:
            return failed(name, f"{path} does not exist", f"stage the serving binary at {program}")
        if st.kind != "file":
            return failed(
                name, f"{path} is not a regular file", f"stage the serving binary at {program}"
            )
        if not _can(account, st, 1):
            return failed(
                name,
                f"{user} may not execute {path} (mode {st.mode:04o}, owner uid {st.uid})",
                f"chmod 0755 {path}",
            )
        if probe.interpreter(path) is not None and not _can(account, st, 4):
            return failed(
                name,
                f"{user} may not read the script {path} (mode {st.mode:04o}, owner uid "
                f"{st.uid})",
                f"chmod 0755 {path}",
            )
    return passed(name, f"every directory on the way to {program} is traversable by {user}")


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
        return failed(name, *_NO_BINARY)
    shown = " ".join((*command, SELFTEST_ARGUMENT))
    outcome = probe.self_test((*command, SELFTEST_ARGUMENT))
    last = _last_line(outcome.output)
    if outcome.exit_status is None:
        return failed(
            name,
            f"`{shown}` could not run" + (f": {last}" if last else ""),
            "stage the serving-capable binary (the delivery's, not a plain core)",
        )
    if outcome.exit_status != 0:
        return failed(
            name,
            f"`{shown}` exited {outcome.exit_status}" + (f": {last}" if last else ""),
            "stage the serving-capable binary (the delivery's, not a plain core); a binary "
            "without the serving codec fails closed at boot",
        )
    return passed(name, f"`{shown}` passed" + (f": {last}" if last else ""))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""




def _read_launcher(probe: HostProbe, config: AssessConfig) -> LauncherRead:
    path = config.launcher_config
    produce = f"fulcrum config produce --out {path} ..."
    text = probe.read_text(path)
    if text is None:
        missing = probe.stat(path) is None
        problem = f"{path} is missing" if missing else f"{path} is unreadable"
        return LauncherRead(None, None, problem, produce if missing else f"chmod 0644 {path}")
    try:
        cfg = parse_launcher_config(text)
    except LauncherConfigError as exc:
        return LauncherRead(None, text, f"{path}: {exc}", f"correct it, or re-run {produce}")
    return LauncherRead(cfg, text, None, None)


def _launcher_config_clause(
    probe: HostProbe, config: AssessConfig, launcher: LauncherRead
) -> Clause:
    name = "launcher-config"
    path = config.launcher_config
    if not config.supervised:
        return passed(name, "the host is not supervised by fulcrum; no launcher config is needed")
    if launcher.problem is not None:
        assert launcher.remedy is not None
        return failed(name, launcher.problem, launcher.remedy)
    st = probe.stat(path)
    if st is None or st.kind != "file":
        return failed(
            name, f"{path} is not a regular file", f"fulcrum config produce --out {path} ..."
        )
    problem = config_file_problem(path, st.uid, st.mode)
    if problem is not None:
        return failed(name, problem, config_file_remedy(path))
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
        return failed(
            name,
            f"{DEVELOPMENT_LISTENER_KEY} reaches the node from {', '.join(places)}",
            f"remove {DEVELOPMENT_LISTENER_KEY} from each of those lines; it is never set on "
            "a node",
        )
    searched = ", ".join(dict.fromkeys(paths)) or "no files"
    return passed(name, f"{DEVELOPMENT_LISTENER_KEY} set nowhere (searched {searched})")

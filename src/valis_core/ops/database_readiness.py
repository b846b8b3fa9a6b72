"""Host assessment's PostgreSQL clauses: ``postgresql-socket`` (this host's server on its
local socket) and ``postgresql-tls`` (a database host reached with a client
certificate). Both are preconditions only (see ``ops.host_readiness``): neither
connects as the run account."""

from __future__ import annotations

import datetime

import attrs
from cryptography import x509
from cryptography.x509.oid import NameOID

from valis_core.ops.assessment import (
    AssessConfig,
    Clause,
    RunAccount,
    failed,
    passed,
    pg_socket_path,
)
from valis_core.ops.host_probe import HostProbe


def postgresql_socket_clause(probe: HostProbe, config: AssessConfig, run: RunAccount) -> Clause:
    name = "postgresql-socket"
    if config.database_host is not None:
        where = config.database_host
        return passed(name, f"not used: operator state is on the database host {where.host} "
                     f"port {where.port} (a certificate DSN; see postgresql-tls)")
    path = pg_socket_path(config)
    caveat = (
        f"a precondition only: this does not prove the run account {run.name} can "
        "authenticate; the resident settles that by connecting as itself at boot"
    )
    st = probe.stat(path)
    if st is None or st.kind != "socket":
        what = "does not exist" if st is None else "is not a socket"
        return failed(
            name,
            f"{path} {what}: PostgreSQL is not listening on its local socket",
            "start PostgreSQL (systemctl start postgresql) with unix_socket_directories "
            f"including {config.pg_socket_dir} and port {config.pg_port}",
        )
    if not probe.unix_socket_accepts(path):
        return failed(
            name,
            f"{path} exists but refuses connections (a stale socket?)",
            "start or restart PostgreSQL (systemctl restart postgresql)",
        )
    return passed(name, f"PostgreSQL accepts connections on {path} ({caveat})")


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


def postgresql_tls_clause(probe: HostProbe, config: AssessConfig, run: RunAccount) -> Clause:
    name = "postgresql-tls"
    where = config.database_host
    if where is None:
        return passed(name, "not used: operator state is on this host's socket")
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
        return failed(name, "; ".join(problems), remedy)
    if not probe.tcp_accepts(where.host, where.port):
        return failed(name, f"the database host {where.host} port {where.port} does not accept "
                     "TCP from this host", "start PostgreSQL there with listen_addresses "
                     "naming the address nodes dial, and let this host reach it")
    clause = passed(name, f"{files.cert} (CN {role}) and its key are in place, and "
                   f"{where.host} port {where.port} accepts TCP (a precondition only: the "
                   "resident proves the certificate by connecting as itself)")
    if warnings:
        clause = attrs.evolve(clause, warning="; ".join(warnings) +
                              ": issue a new client bundle before then")
    return clause


"""The operator-state DSN: a UNIX socket under peer authentication, or a database host
over TLS under client-certificate authentication, and nothing else.

The contract's seam to PostgreSQL is the server's local socket, where the role is reached
only by running as the OS account mapped to it. One node on one host needs nothing more.
Evacuation needs two hosts to write to one fence, so the one supported way between hosts
is a **certificate DSN** (docs/operator-state.md, "Two hosts"): a TCP host reached with
``sslmode=verify-full`` (the server proves its name against a pinned CA) and a client
certificate and key (``sslcert``, ``sslkey``, ``sslrootcert``: absolute paths, kept in the
node's state directory and so in its backup set), which ``cert`` in the server's
``pg_hba.conf`` maps to the role. Still no password anywhere.

Everything else is refused wherever a DSN enters (site facts, the configuration store,
``--dsn``, ``$VALIS_OPERATOR_STATE_DSN``, and every connection made): a password
(``password``, ``passfile``, ``sslpassword``, ``user:secret@``), a TCP host or address
without the whole certificate shape, a ``service`` entry (it reads host and password from
a file this check cannot see), and a host list that mixes a socket with TCP.
``valis provision`` also refuses libpq's environment twins of these (``PGPASSWORD``,
``PGPASSFILE``, ``PGSERVICE``) and of the host (``PGHOST``, ``PGHOSTADDR``):
``check_environment``.

``dsn_problem`` judges libpq's own reading of the DSN (a mapping of keywords, as
``psycopg.conninfo.conninfo_to_dict`` gives it: the URI authority, a percent-encoded
socket path and the query all land in ``host``); ``check_operator_dsn`` parses and
judges; ``certificate_files`` says which files a certificate DSN names. A ``host`` is a
socket directory when it is an absolute path; left out or empty, libpq uses its default
socket.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from valis_core.errors import ValisError

EXAMPLE_DSN = "postgresql://valis@/valis_state?host=/var/run/postgresql"
EXAMPLE_TLS_DSN = (
    "postgresql://valis@db.example:5432/valis_state?sslmode=verify-full"
    "&sslrootcert=/var/lib/valis-dns/operator-state-tls/ca.crt"
    "&sslcert=/var/lib/valis-dns/operator-state-tls/client.crt"
    "&sslkey=/var/lib/valis-dns/operator-state-tls/client.key"
)

_PASSWORD_KEYS = ("password", "passfile", "sslpassword")
CONNECT_TIMEOUT_S = 10
#: the files a certificate DSN must name, libpq's keywords in the order they are checked
CERTIFICATE_KEYS = ("sslrootcert", "sslcert", "sslkey")
REMEDY = (
    "the operator-state seam is the UNIX socket with peer authentication (a DSN such as "
    f"{EXAMPLE_DSN}) or, between hosts, a database host over TLS with a client "
    "certificate (sslmode=verify-full with sslrootcert, sslcert and sslkey: "
    "docs/operator-state.md)"
)


#: libpq's environment variables that change where, or with what secret, a connection
#: goes: the twins of the keywords ``dsn_problem`` refuses (``password``, ``passfile``,
#: ``service``), and the host, which the verb's own flags name. ``PGPASSFILE`` is one of
#: them because the DSN's ``passfile`` is refused: a password file is a password.
LIBPQ_ENVIRONMENT = (
    ("PGPASSWORD", "a password (libpq's password)"),
    ("PGPASSFILE", "a password file (libpq's passfile)"),
    ("PGSERVICE", "a service entry (libpq's service), whose host and password this check "
                  "cannot see"),
    ("PGHOST", "a database host (libpq's host), which the DSN's own host overrides"),
    ("PGHOSTADDR", "a database address (libpq's hostaddr), which the DSN's own host "
                   "overrides"),
)


class DsnRefused(ValisError):
    """A DSN that carries a password, reaches TCP without a client certificate, or cannot
    be read at all."""


@attrs.frozen
class CertificateFiles:
    """What a certificate DSN names: the CA that proves the server, the client's
    certificate and its private key (absolute paths)."""

    root: str
    cert: str
    key: str

    @property
    def all(self) -> tuple[str, str, str]:
        return (self.root, self.cert, self.key)


def _tcp_hosts(params: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(TCP hosts, socket directories) of the DSN's host list."""
    hosts = [host for host in params.get("host", "").split(",") if host]
    return ([host for host in hosts if not host.startswith("/")],
            [host for host in hosts if host.startswith("/")])


def _certificate_problem(params: Mapping[str, str], reaches: str) -> str | None:
    """Why a DSN that ``reaches`` TCP is not a certificate DSN; None if it is."""
    mode = params.get("sslmode", "")
    if mode != "verify-full":
        shown = f"sslmode={mode}" if mode else "no sslmode"
        return (f"it {reaches} with {shown}; over TCP only sslmode=verify-full with a "
                "client certificate is accepted")
    for key in CERTIFICATE_KEYS:
        value = params.get(key, "")
        if not value:
            return f"it {reaches} without {key}; a client certificate needs all of " \
                   f"{', '.join(CERTIFICATE_KEYS)}"
        if not value.startswith("/"):
            return f"it {reaches} with {key}={value!r}, not an absolute path"
    return None


def dsn_problem(params: Mapping[str, str]) -> str | None:
    """Why the parsed DSN ``params`` is neither a peer-authenticated socket DSN nor a
    certificate DSN; None if it is one of them."""
    for key in _PASSWORD_KEYS:
        if key in params:
            return f"it carries a password ({key}); peer and certificate authentication need none"
    if "service" in params:
        return (
            f"it names the service {params['service']!r}, whose host and password this "
            "check cannot see"
        )
    tcp, sockets = _tcp_hosts(params)
    if tcp and sockets:
        return (f"it names the TCP host {tcp[0]!r} beside the socket directory "
                f"{sockets[0]!r}; name one seam, not both")
    if "hostaddr" in params:
        return _certificate_problem(params, f"names the TCP address hostaddr={params['hostaddr']}")
    if tcp:
        return _certificate_problem(params, f"names the TCP host {tcp[0]!r}")
    return None


@attrs.frozen
class DatabaseHost:
    """Where a certificate DSN reaches operator state: the host (or address) dialled, the
    port, the role the client certificate must name (None: libpq's default, the OS
    account connecting), and the certificate files."""

    host: str
    port: int
    role: str | None
    files: CertificateFiles


def database_host(params: Mapping[str, str]) -> DatabaseHost | None:
    """The database host a certificate DSN (one ``dsn_problem`` accepts) reaches; None
    for a socket DSN. The first host of a list is the one named (libpq tries them in
    order)."""
    files = certificate_files(params)
    if files is None:
        return None
    tcp, _ = _tcp_hosts(params)
    host = tcp[0] if tcp else params["hostaddr"].split(",")[0]
    port_text = params.get("port", "").split(",")[0]
    return DatabaseHost(host, int(port_text) if port_text.isdigit() else 5432,
                        params.get("user") or None, files)


def certificate_files(params: Mapping[str, str]) -> CertificateFiles | None:
    """The files of a certificate DSN (one ``dsn_problem`` accepts); None for a socket DSN."""
    tcp, _ = _tcp_hosts(params)
    if not tcp and "hostaddr" not in params:
        return None
    return CertificateFiles(*(params[key] for key in CERTIFICATE_KEYS))


def render_certificate_dsn(host: str, port: int, files: CertificateFiles, *,
                           role: str = "valis", database: str = "valis_state") -> str:
    """The certificate DSN for ``role`` on ``database`` at ``host``:``port`` with
    ``files``: what ``valis provision --database-host`` writes into the site facts. A
    connection attempt gives up after ``connect_timeout`` seconds (libpq's default is to
    wait as long as TCP does, minutes, on a host that drops packets)."""
    from urllib.parse import quote

    authority = f"[{host}]" if ":" in host else host
    query = "&".join(f"{key}={quote(value, safe='/')}" for key, value in (
        ("sslmode", "verify-full"), *zip(CERTIFICATE_KEYS, files.all, strict=True),
        ("connect_timeout", str(CONNECT_TIMEOUT_S))))
    return (f"postgresql://{quote(role, safe='')}@{authority}:{port}/"
            f"{quote(database, safe='')}?{query}")


def environment_problem(environ: Mapping[str, str]) -> str | None:
    """Why ``environ`` would change what a verb's DSN says (a libpq variable of
    ``LIBPQ_ENVIRONMENT`` set, even empty); None if it names none of them."""
    held = [(name, what) for name, what in LIBPQ_ENVIRONMENT if name in environ]
    if not held:
        return None
    names = ", ".join(name for name, _ in held)
    return (f"the environment sets {names}: {'; '.join(what for _, what in held)}; peer "
            "and certificate authentication need no password, and the DSN names where "
            f"operator state is, so unset {names}")


def check_environment(environ: Mapping[str, str], *, source: str) -> None:
    """``DsnRefused`` naming ``source`` when ``environ`` sets a libpq variable that would
    carry a password or move a connection (``environment_problem``), as a DSN carrying
    one is refused."""
    problem = environment_problem(environ)
    if problem is not None:
        raise DsnRefused(f"{source}: DSN refused: {problem}; {REMEDY}")


def parse_dsn(dsn: str, *, source: str) -> dict[str, str]:
    """libpq's reading of ``dsn``; ``DsnRefused`` naming ``source`` when it cannot be read."""
    import psycopg

    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        detail = " ".join(str(exc).split())
        raise DsnRefused(f"{source}: the DSN is malformed ({detail}); {REMEDY}") from None
    return {key: str(value) for key, value in params.items()}


def check_operator_dsn(dsn: str, *, source: str) -> str:
    """``dsn`` if it reaches PostgreSQL over its socket by peer authentication, or over
    TLS by client certificate; otherwise ``DsnRefused`` naming ``source`` (where the DSN
    came from) and the remedy."""
    dsn_certificate_files(dsn, source=source)
    return dsn


def dsn_certificate_files(dsn: str, *, source: str) -> CertificateFiles | None:
    """The files ``dsn`` names if it is a certificate DSN (checked); None for a socket."""
    params = parse_dsn(dsn, source=source)
    problem = dsn_problem(params)
    if problem is not None:
        raise DsnRefused(f"{source}: DSN refused: {problem}; {REMEDY}")
    return certificate_files(params)

"""The operator-state DSN: a UNIX socket under peer authentication, and nothing else.

The contract's seam to PostgreSQL is the server's local socket, where the role is reached
only by running as the OS account mapped to it. A DSN that names a TCP host
(``host=db.example``, ``hostaddr=``, an address in the URI authority) or carries a
password (``password``, ``passfile``, ``user:secret@``) would open a second way in, one
that no assessment or backup of the node accounts for, so it is refused wherever a DSN
enters: site facts, the configuration store, ``--dsn``, ``$VALIS_OPERATOR_STATE_DSN``,
and every connection made.

``socket_dsn_problem`` judges libpq's own reading of the DSN (a mapping of keywords, as
``psycopg.conninfo.conninfo_to_dict`` gives it: the URI authority, a percent-encoded
socket path and the query all land in ``host``); ``check_socket_dsn`` parses and judges.
A ``host`` is a socket directory when it is an absolute path; left out or empty, libpq
uses its default socket. A ``service`` entry is refused too: it reads host and password
from a file this check cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping

from valis_core.errors import ValisError

EXAMPLE_DSN = "postgresql://valis@/valis_state?host=/var/run/postgresql"

_PASSWORD_KEYS = ("password", "passfile")


class DsnRefused(ValisError):
    """A DSN that names a TCP host or carries a password, or cannot be read at all."""


def socket_dsn_problem(params: Mapping[str, str]) -> str | None:
    """Why the parsed DSN ``params`` is not a peer-authenticated socket DSN; None if it is."""
    for key in _PASSWORD_KEYS:
        if key in params:
            return f"it carries a password ({key}); peer authentication needs none"
    if "hostaddr" in params:
        return f"it names the TCP address hostaddr={params['hostaddr']}"
    if "service" in params:
        return (
            f"it names the service {params['service']!r}, whose host and password this "
            "check cannot see"
        )
    for host in params.get("host", "").split(","):
        if host and not host.startswith("/"):
            return f"it names the TCP host {host!r}, not a socket directory (an absolute path)"
    return None


def check_socket_dsn(dsn: str, *, source: str) -> str:
    """``dsn`` if it reaches PostgreSQL only over its socket by peer authentication;
    otherwise ``DsnRefused`` naming ``source`` (where the DSN came from) and the remedy."""
    import psycopg

    remedy = (
        "the operator-state seam is the UNIX socket with peer authentication; give a DSN "
        f"such as {EXAMPLE_DSN}"
    )
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        detail = " ".join(str(exc).split())
        raise DsnRefused(f"{source}: the DSN is malformed ({detail}); {remedy}") from None
    problem = socket_dsn_problem({key: str(value) for key, value in params.items()})
    if problem is not None:
        raise DsnRefused(f"{source}: DSN refused: {problem}; {remedy}")
    return dsn

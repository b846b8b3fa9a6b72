"""Certificate access for the two-host topology: the server settings and the
``pg_hba.conf`` line that let nodes on other hosts reach the operator-state role over TLS
by client certificate, and nothing else.

PostgreSQL's ``cert`` method admits a connection only over TLS (``hostssl``) whose client
certificate chains to ``ssl_ca_file`` and whose subject CN is the role; the node's libpq,
under ``sslmode=verify-full``, admits the server only when its certificate chains to the
node's ``sslrootcert`` and names the host dialled. So both ends prove themselves and no
password exists. Pure text in, text out: ``LocalCluster`` (tests, the demo) and the
database host's verb write the same settings and the same line.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

import attrs

from valis_core.errors import ValisError
from valis_core.operator_state.peer_access import (
    DEFAULT_DATABASE,
    DEFAULT_ROLE,
    Matcher,
    admits_first,
    identifier_problem,
    list_may_hold,
    with_line_first,
)

HBA_COMMENT = "# valis: nodes on other hosts, by client certificate over TLS only"


class TlsAccessError(ValisError):
    """A role, database, client network or address that cannot be written into
    PostgreSQL's files."""


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise TlsAccessError(
            f"tls access: {value!r} is not a client network (an address or CIDR, such as "
            "198.51.100.0/24)"
        ) from None


@attrs.frozen
class TlsAccess:
    """Nodes connecting from ``clients`` log in as ``role`` to ``database`` by a client
    certificate whose CN is ``role``."""

    clients: str = attrs.field(converter=_network)
    role: str = DEFAULT_ROLE
    database: str = DEFAULT_DATABASE

    def __attrs_post_init__(self) -> None:
        for kind, name in (("role", self.role), ("database", self.database)):
            problem = identifier_problem(name)
            if problem is not None:
                raise TlsAccessError(f"tls access: {kind} {problem}")

    @property
    def hba_line(self) -> str:
        return f"hostssl  {self.database}  {self.role}  {self.clients}  cert"


_HOST_KINDS = frozenset({"host", "hostssl", "hostnossl", "hostgssenc", "hostnogssenc"})


def _matches(access: TlsAccess) -> Matcher:
    """Whether an active TCP line could match a node's connection (its address is not
    judged: any TCP line for the database and role is taken as a match, to be safe)."""
    def matches(fields: list[str]) -> bool:
        return (
            len(fields) >= 4
            and fields[0] in _HOST_KINDS
            and list_may_hold(fields[1], access.database, database=True)
            and list_may_hold(fields[2], access.role, database=False)
        )
    return matches


def hba_admits(text: str, access: TlsAccess) -> bool:
    """Whether ``text`` admits nodes by certificate with its own line, ahead of any other
    TCP line for the database and role (which PostgreSQL would take first)."""
    return admits_first(text, access.hba_line, _matches(access))


def with_hba_line(text: str, access: TlsAccess) -> str:
    """``text`` with the certificate line ahead of every TCP line that could match first;
    unchanged when it already is."""
    return with_line_first(text, access.hba_line, HBA_COMMENT, _matches(access))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def tls_settings(*, listen: str, cert_file: str, key_file: str, ca_file: str
                 ) -> Mapping[str, str]:
    """The server settings (name to SQL literal) for a TLS listener on ``listen``
    (addresses, comma-separated) presenting ``cert_file`` and trusting clients of
    ``ca_file``; TLS 1.2 at least."""
    for address in (part.strip() for part in listen.split(",")):
        if address not in ("*", "localhost"):
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise TlsAccessError(
                    f"tls access: listen address {address!r} is not an IP address"
                ) from None
    return {
        "listen_addresses": _literal(listen),
        "ssl": "on",
        "ssl_cert_file": _literal(cert_file),
        "ssl_key_file": _literal(key_file),
        "ssl_ca_file": _literal(ca_file),
        "ssl_min_protocol_version": "'TLSv1.2'",
    }

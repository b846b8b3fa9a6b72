"""Peer access for the run account: the ``pg_hba.conf`` line and ident map that let exactly
one OS account reach the operator-state role over the local socket, and nothing else.

Pure text in, text out. PostgreSQL takes the first ``pg_hba.conf`` line that matches a
connection, so the node's line goes before any ``local`` line that would also match its
database and role (a broader line, such as Debian's ``local all all peer``); lines that
cannot match it stay where they are. Editing is idempotent: a file that already lets
the account in, ahead of every broader line, is returned unchanged. The same values
give the SQL and the lines a DBA runs by hand when the server is on another host.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from valis_core.errors import ValisError

DEFAULT_ROLE = "valis"
DEFAULT_DATABASE = "valis_state"
IDENT_MAP = "valis"
HBA_COMMENT = "# valis: the run account, by peer authentication over the socket only"
IDENT_COMMENT = "# valis: the run account may log in as the operator-state role"
_IDENTIFIER_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_ACCOUNT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


class PeerAccessError(ValisError):
    """A role, database or account name that cannot be written into PostgreSQL's files."""


def identifier_problem(name: str) -> str | None:
    """Why ``name`` cannot stand unquoted as a PostgreSQL role or database name in the
    SQL and the two access files (None: it can): a lower-case letter or ``_``, then
    lower-case letters, digits and ``_``, 63 bytes at most (PostgreSQL's NAMEDATALEN)."""
    if _IDENTIFIER_RE.fullmatch(name):
        return None
    return (f"{name!r} is not a plain lower-case PostgreSQL identifier (a lower-case "
            "letter or _, then lower-case letters, digits and _, at most 63)")


@attrs.frozen
class PeerAccess:
    """Who may reach what: OS ``account`` logs in as ``role`` to ``database``, by peer."""

    account: str
    role: str = DEFAULT_ROLE
    database: str = DEFAULT_DATABASE
    ident_map: str = IDENT_MAP

    def __attrs_post_init__(self) -> None:
        for kind, name in (("role", self.role), ("database", self.database),
                           ("ident map", self.ident_map)):
            problem = identifier_problem(name)
            if problem is not None:
                raise PeerAccessError(f"peer access: {kind} {problem}")
        if not _ACCOUNT_RE.fullmatch(self.account):
            raise PeerAccessError(f"peer access: {self.account!r} is not an account name")

    @property
    def hba_line(self) -> str:
        return f"local  {self.database}  {self.role}  peer  map={self.ident_map}"

    @property
    def ident_line(self) -> str:
        return f"{self.ident_map}  {self.account}  {self.role}"

    @property
    def create_role_sql(self) -> str:
        return f"CREATE ROLE {self.role} LOGIN;"

    @property
    def create_database_sql(self) -> str:
        return f"CREATE DATABASE {self.database} OWNER {self.role};"


def hba_fields(line: str) -> list[str]:
    """A ``pg_hba.conf`` line's fields, its comment left out."""
    return line.split("#", 1)[0].split()


def list_may_hold(field: str, name: str, *, database: bool) -> bool:
    """Whether a pg_hba database or user field could match ``name``: ``all``, the name, a
    group (``+``) or a file (``@``) we cannot see into, or a quoted or regular-expression
    form taken as a match to be safe."""
    for item in field.split(","):
        if item in ("all", name) or item[:1] in ("+", "@", '"', "/"):
            return True
        if database and item in ("sameuser", "samerole", "samegroup"):
            return True
    return False


Matcher = Callable[[list[str]], bool]
"""Whether a pg_hba line's fields would match the connections a line is written for."""


def admits_first(text: str, line: str, matches: Matcher) -> bool:
    """Whether ``text`` holds ``line`` ahead of every other line ``matches`` finds."""
    ours = hba_fields(line)
    for held in text.splitlines():
        fields = hba_fields(held)
        if fields == ours:
            return True
        if matches(fields):
            return False
    return False


def with_line_first(text: str, line: str, comment: str, matches: Matcher) -> str:
    """``text`` with ``comment`` and ``line`` before the first line ``matches`` finds (an
    out-of-place copy of the line moves there); unchanged when it already comes first."""
    if admits_first(text, line, matches):
        return text
    ours = hba_fields(line)
    lines = [held for held in text.splitlines()
             if hba_fields(held) != ours and held != comment]
    at = next((index for index, held in enumerate(lines) if matches(hba_fields(held))),
              len(lines))
    lines[at:at] = [comment, line]
    return "\n".join(lines) + "\n"


def _matches(access: PeerAccess) -> Matcher:
    """Whether an active ``local`` line would match the node's connections."""
    def matches(fields: list[str]) -> bool:
        return (
            len(fields) >= 4
            and fields[0] == "local"
            and list_may_hold(fields[1], access.database, database=True)
            and list_may_hold(fields[2], access.role, database=False)
        )
    return matches


def hba_admits(text: str, access: PeerAccess) -> bool:
    """Whether ``text`` lets the account in by its own line, ahead of any broader line."""
    return admits_first(text, access.hba_line, _matches(access))


def with_hba_line(text: str, access: PeerAccess) -> str:
    """``text`` with the node's line before the first line that would match it first
    (an out-of-place copy of the line moves there); unchanged when it already admits."""
    return with_line_first(text, access.hba_line, HBA_COMMENT, _matches(access))


def ident_maps(text: str, access: PeerAccess) -> bool:
    """Whether ``text``'s ident map takes the account to the role."""
    return any(hba_fields(line) == hba_fields(access.ident_line) for line in text.splitlines())


def with_ident_line(text: str, access: PeerAccess) -> str:
    """``text`` with the map line appended; unchanged when it is already there."""
    if ident_maps(text, access):
        return text
    body = text if not text or text.endswith("\n") else text + "\n"
    return f"{body}{IDENT_COMMENT}\n{access.ident_line}\n"


def dba_instructions(access: PeerAccess, socket_dir: str) -> str:
    """What a DBA does by hand for a server this host cannot administer: the SQL, then
    the two lines, then a reload; the node then reaches it over ``socket_dir``."""
    return "\n".join([
        "As the PostgreSQL superuser (e.g. sudo -u postgres psql):",
        f"    {access.create_role_sql}",
        f"    {access.create_database_sql}",
        "In pg_hba.conf, before any broader `local` line:",
        f"    {access.hba_line}",
        "In pg_ident.conf:",
        f"    {access.ident_line}",
        "Then reload the server (SELECT pg_reload_conf();). Peer authentication needs the "
        f"server's socket on this host, in {socket_dir}: no password, no TCP.",
    ])

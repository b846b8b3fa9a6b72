"""Which operator-state database a verb talks to, when ``--dsn`` does not say.

On a node the answer is already written down: ``VALIS_OPERATOR_STATE_DSN`` in the
environment, else the node's site facts (``--state-dir``'s configuration store when that
is given, else ``/etc/valis/site-facts.env``, then the default state directory's store).
Failing all of them, a terminal is asked; anything else is told what to give. Whichever
way it came, a DSN that names a TCP host or carries a password is refused, naming where it
came from (``valis_core.operator_state.dsn``).

Run as root, a verb connects as the node's run account (``operator_connection``): peer
authentication maps that account, never root, to the DSN's role, so root takes the
account's effective ids for the connect only (``acting_as``, as restore does) and keeps
its own for everything else (reading a zone file only root may read, say). The account
is the one the launcher config pins (``valis-uid``/``valis-gid``), else the owner of the
state directory, else ``valis`` by name; when there is none, the refusal says in one
line to run the verb as the run account.
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from valis_core.errors import ValisError
from valis_core.node_defaults import (
    DEFAULT_LAUNCHER_CONFIG,
    DEFAULT_RUN_ACCOUNT,
    DEFAULT_SITE_FACTS,
    DEFAULT_STATE_DIR,
)
from valis_core.operator_state.site_facts import DSN_KEY
from valis_core.state_layout import config_store_path

if TYPE_CHECKING:
    import psycopg

_MAX_FILE = 1 << 20


class DsnNotFound(ValisError):
    """No DSN was given and none could be found on this host."""


def add_dsn_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dsn`` and ``--state-dir``, the two ways a verb is told its database."""
    parser.add_argument(
        "--dsn",
        help=f"libpq URI of the operator-state database (default: ${DSN_KEY}, else the "
        f"node's site facts: --state-dir's, else {DEFAULT_SITE_FACTS})",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the node's state directory, whose site facts name the database",
    )


def site_facts_files(state_dir: Path | None) -> tuple[Path, ...]:
    """Where the node's site facts are looked for, in order."""
    if state_dir is not None:
        return (config_store_path(state_dir),)
    return (Path(DEFAULT_SITE_FACTS), config_store_path(Path(DEFAULT_STATE_DIR)))


def dsn_from_site_facts(path: Path) -> str | None:
    """The DSN a site-facts file names; None when there is no such file."""
    from valis_core.operator_state.site_facts import SiteFactsError, parse_site_facts

    try:
        with path.open("rb") as stream:
            text = stream.read(_MAX_FILE).decode("utf-8")
    except FileNotFoundError:
        return None
    except PermissionError:
        raise DsnNotFound(
            f"cannot read the site facts {path}: run as root or the run account, or give "
            "--dsn"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DsnNotFound(f"cannot read the site facts {path}: {exc}; give --dsn") from None
    try:
        facts = parse_site_facts(text)
    except SiteFactsError as exc:
        raise DsnNotFound(f"{path}: {exc}; fix the file or give --dsn") from None
    return facts.get(DSN_KEY)


def find_dsn(
    given: str | None,
    environ: Mapping[str, str],
    files: Sequence[Path],
) -> str | None:
    """The DSN from ``--dsn``, the environment or the first site-facts file naming one;
    refused (``DsnRefused``) unless it is a socket DSN under peer authentication."""
    from valis_core.operator_state.dsn import check_operator_dsn

    if given is not None:
        return check_operator_dsn(given, source="--dsn")
    if environ.get(DSN_KEY):
        return check_operator_dsn(environ[DSN_KEY], source=f"${DSN_KEY}")
    for path in files:
        found = dsn_from_site_facts(path)
        if found:
            return check_operator_dsn(found, source=f"{DSN_KEY} in the site facts {path}")
    return None


def operator_dsn(args: argparse.Namespace) -> str:
    """The DSN this invocation means; asked for on a terminal when nothing names it."""
    files = site_facts_files(args.state_dir)
    dsn = find_dsn(args.dsn, os.environ, files)
    if dsn is not None:
        return dsn
    where = ", ".join(str(path) for path in files)
    if sys.stdin.isatty():
        try:
            answer = input(f"operator-state DSN (none in ${DSN_KEY} or {where}): ").strip()
        except EOFError:
            answer = ""
        if answer:
            from valis_core.operator_state.dsn import check_operator_dsn

            return check_operator_dsn(answer, source="the DSN given")
    raise DsnNotFound(
        f"no operator-state DSN: give --dsn, set ${DSN_KEY}, or run on a node whose site "
        f"facts name it ({where}, or --state-dir DIR)"
    )


def node_run_account(
    launcher_config: Path = DEFAULT_LAUNCHER_CONFIG,
    state_dir: Path = Path(DEFAULT_STATE_DIR),
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
) -> tuple[int, int] | None:
    """(uid, gid) of this node's run account: the launcher config's pinned ids, else the
    state directory's owner (never root), else ``valis`` by name; ``None`` when none is
    found. Only what is there is read: a missing or unreadable file is passed over."""
    from valis_core.launcher_config import LauncherConfigError, parse_launcher_config

    try:
        cfg = parse_launcher_config(launcher_config.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, LauncherConfigError):
        cfg = None
    if cfg is not None and cfg.valis_uid is not None and cfg.valis_gid is not None:
        return cfg.valis_uid, cfg.valis_gid
    try:
        held = state_dir.stat()
    except OSError:
        held = None
    if held is not None and held.st_uid != 0:
        return held.st_uid, held.st_gid
    try:
        account = lookup(DEFAULT_RUN_ACCOUNT)
    except KeyError:
        return None
    return account.pw_uid, account.pw_gid


def operator_connection(
    args: argparse.Namespace, *, require_schema: bool = True
) -> psycopg.Connection[Any]:
    """The connection to the database this invocation means (``operator_dsn``), made
    as the node's run account when this is root (``node_run_account``)."""
    from valis_core.acting_as import acting_as
    from valis_core.operator_state.connection import OperatorStateError, connect
    from valis_core.operator_state.schema import connect_current

    open_connection = connect_current if require_schema else connect
    dsn = operator_dsn(args)
    if os.geteuid() != 0:
        return open_connection(dsn)
    state_dir = args.state_dir if args.state_dir is not None else Path(DEFAULT_STATE_DIR)
    account = node_run_account(state_dir=state_dir)
    if account is None:
        raise OperatorStateError(
            f"operator state: run as root, this verb connects as the node's run account, "
            f"and this host has none (no {DEFAULT_RUN_ACCOUNT!r} account, no pinned ids in "
            f"{DEFAULT_LAUNCHER_CONFIG}); run it as the account the DSN's role maps to "
            "(setpriv --reuid=ACCOUNT --regid=ACCOUNT --init-groups -- valis ...)"
        )
    try:
        with acting_as(account):
            return open_connection(dsn)
    except OperatorStateError as exc:
        raise OperatorStateError(
            f"{exc} (run as root, this verb connected as the run account "
            f"{_account_name(account[0])}: the launcher config's valis-uid, else the owner "
            f"of {state_dir}, else {DEFAULT_RUN_ACCOUNT!r})"
        ) from exc


def _account_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


"""Which operator-state database a verb talks to, when ``--dsn`` does not say.

On a node the answer is already written down: ``VALIS_OPERATOR_STATE_DSN`` in the
environment, else the node's site facts (``--state-dir``'s configuration store when that
is given, else ``/etc/valis/site-facts.env``, then the default state directory's store).
Failing all of them, a terminal is asked; anything else is told what to give. Whichever
way it came, a DSN that names a TCP host or carries a password is refused, naming where it
came from (``valis_core.operator_state.dsn``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from valis_core.errors import ValisError
from valis_core.node_defaults import DEFAULT_SITE_FACTS, DEFAULT_STATE_DIR
from valis_core.operator_state.site_facts import DSN_KEY
from valis_core.state_layout import config_store_path

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

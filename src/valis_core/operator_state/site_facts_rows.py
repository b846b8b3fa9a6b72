"""Each node's site facts as rows of the operator-state database.

The rows are the source the first-boot environment file is rendered from
(``render_node_site_facts``); rendering goes through ``valis_core.operator_state.site_facts``,
which refuses a partial or unrenderable set before anything touches the disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.dsn import check_operator_dsn
from valis_core.operator_state.site_facts import DSN_KEY, SiteFactsError
from valis_core.operator_state.site_facts_file import write_site_facts


def set_site_facts(
    conn: psycopg.Connection[Any],
    node: str,
    facts: Mapping[str, str],
    *,
    replace: bool = False,
) -> None:
    """Store ``facts`` for ``node`` in one transaction (upserting each key).

    With ``replace`` the node's other keys are removed, so its rows become exactly
    ``facts``. The database refuses a key outside ``VALIS_*``, the development listener
    key, and empty or multi-line values; an operator-state DSN that is not a socket under
    peer authentication is refused before anything is stored.
    """
    if DSN_KEY in facts:
        check_operator_dsn(facts[DSN_KEY], source=f"site facts for node {node!r}: {DSN_KEY}")
    try:
        with conn.transaction(), conn.cursor() as cur:
            if replace:
                cur.execute("DELETE FROM site_facts WHERE node = %s", (node,))
            cur.executemany(
                "INSERT INTO site_facts (node, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (node, key) DO UPDATE SET value = EXCLUDED.value",
                [(node, key, value) for key, value in sorted(facts.items())],
            )
    except psycopg.errors.IntegrityError as exc:
        raise OperatorStateError(
            f"site facts for node {node!r} refused by the database: "
            f"{' '.join(str(exc).split())} (nothing was stored)"
        ) from exc


def record_served_zones(
    conn: psycopg.Connection[Any], node: str, zones: tuple[str, ...]
) -> None:
    """Store ``node``'s ``VALIS_SERVED_ZONES`` row (the one key; the node's others are
    left as they are), so ``valis zone list`` names the node under SERVED BY and
    ``valis zone delete`` refuses its zones without ``--force``."""
    set_site_facts(conn, node, {"VALIS_SERVED_ZONES": ",".join(zones)})


def read_site_facts(conn: psycopg.Connection[Any], node: str) -> dict[str, str]:
    """The node's facts as stored (possibly partial, possibly empty)."""
    rows = conn.execute("SELECT key, value FROM site_facts WHERE node = %s", (node,))
    return {str(key): str(value) for key, value in rows.fetchall()}


def render_node_site_facts(conn: psycopg.Connection[Any], node: str, out: Path) -> None:
    """Write ``node``'s environment file to ``out`` atomically; refuse a partial set and
    leave nothing behind."""
    facts = read_site_facts(conn, node)
    if not facts:
        raise SiteFactsError(
            f"site facts: node {node!r} has no facts in the database; store them first "
            "(nothing was written)"
        )
    write_site_facts(out, facts)

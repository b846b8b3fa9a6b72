"""``valis site-facts``: a node's site facts in operator state, and in its store.

``render`` writes a node's first-boot environment file from its rows. ``set`` changes
rows and, given the node's ``--state-dir``, its configuration store with them: the store
is checked complete and written (atomically) inside the rows' transaction, so a refused
change leaves both as they were. The running node applies it on a reload
(``systemctl reload fulcrum-valis``, i.e. SIGHUP); a new served zone is served only once
the node has proved it servable. ``show`` prints the rows (and the store, when given).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from valis_cli.operator_dsn import add_dsn_arguments, operator_connection
from valis_core.errors import ValisError


class SiteFactsArgumentError(ValisError):
    """A ``KEY=VALUE`` argument that is not one."""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("site-facts", help="a node's site facts: render, set, show")
    actions = parser.add_subparsers(dest="site_facts_command", metavar="ACTION", required=True)
    render = actions.add_parser(
        "render",
        help="render a node's site facts to an environment file",
        description=(
            "Render NODE's site facts from the operator-state database to FILE, atomically. "
            "A partial set is refused and nothing is written."
        ),
    )
    add_dsn_arguments(render)
    render.add_argument("--node", required=True, help="the node's name")
    render.add_argument("--out", required=True, type=Path, help="the file to write")
    render.set_defaults(handler=_render)

    set_ = actions.add_parser(
        "set",
        help="change a node's site facts (rows, and its store with --state-dir)",
        description=(
            "Store KEY=VALUE facts for NODE in operator state and, with --state-dir, in the "
            "node's configuration store (the one --state-dir names), in one step: a refused "
            "change leaves both as they "
            "were. Then reload the node (systemctl reload fulcrum-valis) to apply it; e.g. "
            "VALIS_SERVED_ZONES=example.org.,example.net. adds a served zone."
        ),
    )
    add_dsn_arguments(set_)
    set_.add_argument("node", help="the node's name")
    set_.add_argument("facts", nargs="+", metavar="KEY=VALUE", help="the facts to store")
    set_.set_defaults(handler=_set)

    show = actions.add_parser(
        "show",
        help="print a node's site facts",
        description="Print NODE's site-facts rows; with --state-dir, mark where the "
        "node's configuration store differs.",
    )
    add_dsn_arguments(show)
    show.add_argument("node", help="the node's name")
    show.set_defaults(handler=_show)


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` arguments as facts; a key given twice or without ``=`` is refused."""
    facts: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SiteFactsArgumentError(f"site-facts set: expected KEY=VALUE, got {item!r}")
        if key in facts:
            raise SiteFactsArgumentError(f"site-facts set: {key} is given twice")
        facts[key] = value
    return facts


def _render(args: argparse.Namespace) -> int:
    from valis_core.operator_state.site_facts_rows import render_node_site_facts

    with operator_connection(args) as conn:
        render_node_site_facts(conn, args.node, args.out)
    print(f"wrote site facts for node {args.node} to {args.out}")
    return 0


def _set(args: argparse.Namespace) -> int:
    from valis_core.config_store import read_config_store, write_config_store
    from valis_core.operator_state.site_facts import (
        DNS_WORKERS_KEY,
        check_site_facts,
        served_zones,
        serves_every_zone,
    )
    from valis_core.operator_state.site_facts_rows import set_site_facts
    from valis_core.operator_state.zones import absent_zones

    changes = parse_assignments(args.facts)
    store_facts: dict[str, str] | None = None
    if args.state_dir is not None:
        store_facts = {**read_config_store(args.state_dir).facts, **changes}
        if store_facts.get("VALIS_NODE_NAME") != args.node:
            raise SiteFactsArgumentError(
                f"site-facts set: {args.state_dir} is node "
                f"{store_facts.get('VALIS_NODE_NAME')!r}'s store, not {args.node!r}"
            )
        check_site_facts(store_facts)
    with operator_connection(args) as conn, conn.transaction():
        if "VALIS_SERVED_ZONES" in changes and not serves_every_zone(served_zones(changes)):
            absent = absent_zones(conn, served_zones(changes))
            if absent:
                raise SiteFactsArgumentError(
                    f"site-facts set: VALIS_SERVED_ZONES names {', '.join(absent)}, which "
                    "the operator-state database does not hold; import each first "
                    "(valis zone import FILE), then serve it (nothing was stored)"
                )
        set_site_facts(conn, args.node, changes)
        if store_facts is not None:
            # Inside the rows' transaction: a store that cannot be written rolls them back.
            path = write_config_store(args.state_dir, store_facts)
    shown = ", ".join(sorted(changes))
    print(f"stored {shown} for node {args.node}")
    if DNS_WORKERS_KEY in changes:
        print(f"{DNS_WORKERS_KEY} is fulcrum's, read from /etc/valis/site-facts.env when it "
              "starts: render the facts there (valis site-facts render) and `systemctl "
              "restart fulcrum-valis`; a reload does not change the DNS workers")
    if store_facts is not None:
        print(f"updated the configuration store {path}; apply it with "
              "`systemctl reload fulcrum-valis` (SIGHUP to the resident)")
    else:
        print("the node's store is unchanged (no --state-dir); run this on the node with "
              "--state-dir to change what it runs with")
    return 0


def _show(args: argparse.Namespace) -> int:
    from valis_core.config_store import read_config_store
    from valis_core.operator_state.site_facts_rows import read_site_facts

    with operator_connection(args) as conn:
        rows = read_site_facts(conn, args.node)
    store = None if args.state_dir is None else dict(read_config_store(args.state_dir).facts)
    if not rows and store is None:
        print(f"node {args.node} has no site facts in operator state")
        return 1
    for key in sorted(rows.keys() | (store or {}).keys()):
        row = rows.get(key)
        line = f"{key}={row if row is not None else '(no row)'}"
        if store is not None and store.get(key) != row:
            line += f"  [store: {store.get(key, '(absent)')}]"
        print(line)
    return 0

"""``valis site-facts render``: a node's first-boot environment file from its rows."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from valis_cli.operator_dsn import add_dsn_arguments, operator_dsn


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("site-facts", help="a node's first-boot environment file")
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


def _render(args: argparse.Namespace) -> int:
    from valis_core.operator_state.connection import connect
    from valis_core.operator_state.site_facts_rows import render_node_site_facts

    with connect(operator_dsn(args), require_schema=True) as conn:
        render_node_site_facts(conn, args.node, args.out)
    print(f"wrote site facts for node {args.node} to {args.out}")
    return 0

"""``valis zone catalog create|add|move|remove|list``: catalog zones (RFC 9432), so that adding
a zone to the database reaches every secondary that consumes the catalog with no
secondary's configuration touched (``valis_core.operator_state.catalogs``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from valis_cli.operator_dsn import add_dsn_arguments, operator_connection
from valis_core.clock import wall


def register(actions: argparse._SubParsersAction[Any]) -> None:
    parser = actions.add_parser(
        "catalog",
        help="catalog zones (RFC 9432): the zones a consuming secondary serves",
        description=(
            "A catalog is a zone of its own listing member zones; a secondary consuming "
            "it (Knot's catalog-role: interpret, BIND's catalog-zones) transfers the "
            "catalog, then serves every member it lists. The catalog's secondaries "
            "(valis zone secondary add CATALOG ...) may transfer its members too."
        ),
    )
    verbs = parser.add_subparsers(dest="catalog_command", metavar="ACTION", required=True)

    run = verbs.add_parser("create", help="make a new, empty catalog zone")
    add_dsn_arguments(run)
    run.add_argument("catalog", metavar="CATALOG", help="the catalog zone's name")
    run.set_defaults(handler=_create)

    run = verbs.add_parser(
        "add", help="list a zone in a catalog (or change its group)",
        description="A new member is given a unique ID, which it keeps while it stays.",
    )
    add_dsn_arguments(run)
    run.add_argument("catalog", metavar="CATALOG")
    run.add_argument("member", metavar="MEMBER", help="a zone of the operator-state database")
    run.add_argument(
        "--group", metavar="GROUP",
        help="the member's group property: which configuration the consumers give it "
        "(a Knot catalog-template, a BIND catalog-zones group)",
    )
    run.set_defaults(handler=_add)

    run = verbs.add_parser(
        "move", help="move a member to another catalog (RFC 9432 coo), in two steps",
        description=(
            "First run: the member's entry in this catalog names the other (the coo "
            "property). Once the consumers have applied that, run it again: the member "
            "joins the other catalog (under its unique ID when that one is free there), "
            "and a secondary consuming both takes it over without dropping it. Then "
            "remove it from this catalog. --to this catalog withdraws a move."
        ),
    )
    add_dsn_arguments(run)
    run.add_argument("catalog", metavar="CATALOG")
    run.add_argument("member", metavar="MEMBER")
    run.add_argument("--to", required=True, metavar="CATALOG",
                     help="the catalog the member moves to")
    run.set_defaults(handler=_move)

    run = verbs.add_parser("remove", help="take a zone out of a catalog")
    add_dsn_arguments(run)
    run.add_argument("catalog", metavar="CATALOG")
    run.add_argument("member", metavar="MEMBER")
    run.set_defaults(handler=_remove)

    run = verbs.add_parser("list", help="list the catalogs, or one, with their members")
    add_dsn_arguments(run)
    run.add_argument("catalog", metavar="CATALOG", nargs="?")
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.set_defaults(handler=_list)


def _create(args: argparse.Namespace) -> int:
    from valis_core.operator_state.catalogs import create_catalog
    from valis_core.operator_state.zones import canonical_zone_name

    name = canonical_zone_name(args.catalog)
    with operator_connection(args) as conn:
        new = create_catalog(conn, name, now=wall())
    print(f"catalog {name} {'created' if new else 'exists already'}")
    return 0


def _add(args: argparse.Namespace) -> int:
    from valis_core.dns.zone.catalog import group_text
    from valis_core.operator_state.catalogs import add_member
    from valis_core.operator_state.zones import canonical_zone_name

    name, zone = canonical_zone_name(args.catalog), canonical_zone_name(args.member)
    group = None if args.group is None else group_text(args.group)
    with operator_connection(args) as conn:
        member, joined = add_member(conn, name, zone, group)
    shown = "" if member.group is None else f", group {member.group}"
    print(f"catalog {name}: member {zone} {joined.value} (unique ID {member.unique_id}{shown})")
    return 0


def _move(args: argparse.Namespace) -> int:
    from valis_core.operator_state.catalogs import Moved, move_member
    from valis_core.operator_state.zones import canonical_zone_name

    name, zone = canonical_zone_name(args.catalog), canonical_zone_name(args.member)
    target = canonical_zone_name(args.to)
    with operator_connection(args) as conn:
        step, joined = move_member(conn, name, zone, target)
    if step is Moved.STAYS:
        print(f"catalog {name}: member {zone} stays (no move)")
    elif step is Moved.MARKED:
        print(f"catalog {name}: member {zone} marked moving to {target} (coo); once its "
              f"consumers have applied this version of {name}, run this again to list it "
              f"in {target}")
    else:
        assert joined is not None
        print(f"catalog {target}: member {zone} {step.value} (unique ID {joined.unique_id});"
              f" once its consumers have taken it over: valis zone catalog remove {name} "
              f"{zone}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from valis_core.dns.zone.catalog import CatalogError
    from valis_core.operator_state.catalogs import remove_member
    from valis_core.operator_state.zones import canonical_zone_name

    name, zone = canonical_zone_name(args.catalog), canonical_zone_name(args.member)
    with operator_connection(args) as conn:
        if not remove_member(conn, name, zone):
            raise CatalogError(
                f"zone {zone} is not a member of catalog {name} (valis zone catalog list "
                f"{name} shows its members)"
            )
    print(f"catalog {name}: member {zone} removed")
    return 0


def _list(args: argparse.Namespace) -> int:
    from valis_core.operator_state.catalogs import list_catalogs

    with operator_connection(args) as conn:
        found = list_catalogs(conn, args.catalog)
    if args.json:
        from valis_cli.commands import listings

        sys.stdout.write(listings.CATALOGS.render(tuple(
            listings.CatalogListing(one.name, tuple(
                listings.CatalogMemberListing(m.zone, m.unique_id, m.group, m.coo)
                for m in one.members
            ))
            for one in found
        )).decode("ascii"))
        return 0
    print("CATALOG\tMEMBER\tUNIQUE ID\tGROUP\tMOVING TO")
    for catalog in found:
        if not catalog.members:
            print(f"{catalog.name}\t-\t-\t-\t-")
        for m in catalog.members:
            print(f"{catalog.name}\t{m.zone}\t{m.unique_id}\t{m.group or '-'}\t{m.coo or '-'}")
    return 0

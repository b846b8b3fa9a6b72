"""An operator keeps catalog zones (RFC 9432) in operator state: ``valis zone catalog
create`` makes one, ``add`` and ``remove`` change its members, and each change is the
catalog zone's records changed in the same transaction, journalled, with its serial
raised; deleting a member's zone takes it out of its catalogs; a member may be
transferred by its catalog's secondaries."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.scenario.operator_state_helpers import import_zone
from tests.scenario.pg import PgCluster, valis
from valis_core.operator_state.catalogs import list_catalogs
from valis_core.operator_state.secondaries import Secondary, add_secondary, serving_secondaries
from valis_core.operator_state.zones import fetch_zone_rows

CATALOG = "catalog.invalid."


def catalog_rows(pg: PgCluster, dsn: str) -> set[tuple[str, str, str]]:
    with pg.connect(dsn) as conn:
        rows = fetch_zone_rows(conn, [CATALOG])[0][CATALOG]
    return {(r.owner, r.rtype, r.rdata) for r in rows if r.rtype != "SOA"}


def catalog_serial(pg: PgCluster, dsn: str) -> int:
    with pg.connect(dsn) as conn:
        return catalog_serial_of(conn, CATALOG)


def catalog_serial_of(conn: Any, catalog: str) -> int:
    found = conn.execute(
        "SELECT valis_soa_serial(rdata) FROM records WHERE zone = %s AND rtype = 'SOA'",
        (catalog,),
    ).fetchone()
    assert found is not None
    return int(found[0])


def journalled_serials(pg: PgCluster, dsn: str) -> list[tuple[int, int]]:
    with pg.connect(dsn) as conn:
        return [(int(a), int(b)) for a, b in conn.execute(
            "SELECT old_serial, new_serial FROM zone_journal WHERE zone = %s ORDER BY id",
            (CATALOG,),
        )]


def test_an_operator_makes_a_catalog_and_changes_its_members(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    for zone in ("a.test.", "b.test."):
        import_zone(pg_cluster, state_dsn, zone)
    status, _, err = valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "a.test")
    assert status == 1
    assert err.startswith(f"valis: {CATALOG} is not a catalog")

    status, out, err = valis("zone", "catalog", "create", "--dsn", state_dsn, "Catalog.Invalid")
    assert (status, out, err) == (0, f"catalog {CATALOG} created\n", "")
    assert valis("zone", "catalog", "create", "--dsn", state_dsn, CATALOG)[1] == (
        f"catalog {CATALOG} exists already\n")
    status, _, err = valis("zone", "catalog", "create", "--dsn", state_dsn, "a.test.")
    assert status == 1
    assert "exists and is not a catalog" in err
    assert catalog_rows(pg_cluster, state_dsn) == {
        (CATALOG, "NS", "invalid."), (f"version.{CATALOG}", "TXT", '"2"'),
    }
    assert catalog_serial(pg_cluster, state_dsn) == 1
    # Its records are the catalog verbs' to write: an import of it is refused.
    text = f"$ORIGIN {CATALOG}\n@ 0 IN SOA invalid. invalid. 9 1 1 1 0\n@ 0 IN NS invalid.\n"
    status, _, err = valis("zone", "import", "--dsn", state_dsn, "-", input_text=text)
    assert status == 1
    assert f"zone {CATALOG} is a catalog" in err

    status, out, _ = valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "a.test")
    assert status == 0
    a_id = out.split("unique ID ")[1].rstrip(")\n")
    assert out == f"catalog {CATALOG}: member a.test. added (unique ID {a_id})\n"
    status, out, _ = valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "b.test.",
                           "--group", "signed")
    b_id = out.split("unique ID ")[1].split(",")[0]
    assert out == f"catalog {CATALOG}: member b.test. added (unique ID {b_id}, group signed)\n"
    assert a_id != b_id
    assert catalog_rows(pg_cluster, state_dsn) == {
        (CATALOG, "NS", "invalid."), (f"version.{CATALOG}", "TXT", '"2"'),
        (f"{a_id}.zones.{CATALOG}", "PTR", "a.test."),
        (f"{b_id}.zones.{CATALOG}", "PTR", "b.test."),
        (f"group.{b_id}.zones.{CATALOG}", "TXT", '"signed"'),
    }
    # Each membership change is one journalled version of the catalog, serial raised.
    assert catalog_serial(pg_cluster, state_dsn) == 3
    assert journalled_serials(pg_cluster, state_dsn)[-2:] == [(1, 2), (2, 3)]

    # Added again: unchanged, nothing written; a new group keeps the unique ID.
    status, out, _ = valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "a.test.")
    assert out == f"catalog {CATALOG}: member a.test. unchanged (unique ID {a_id})\n"
    assert catalog_serial(pg_cluster, state_dsn) == 3
    status, out, _ = valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "b.test.")
    assert out == f"catalog {CATALOG}: member b.test. group changed (unique ID {b_id})\n"
    assert (f"group.{b_id}.zones.{CATALOG}", "TXT", '"signed"') not in catalog_rows(
        pg_cluster, state_dsn)
    assert catalog_serial(pg_cluster, state_dsn) == 4

    for wrong, said in (
        (("add", CATALOG, "absent.test."), "zone absent.test. is not in the operator-state"),
        (("add", CATALOG, CATALOG), "cannot list itself as a member"),
        (("add", CATALOG, "a.test.", "--group", 'say "hi"'), "is not 1 to 255 printable"),
        (("remove", CATALOG, "absent.test."), "is not a member of catalog"),
        (("list", "a.test."), "a.test. is not a catalog"),
    ):
        status, out, err = valis("zone", "catalog", wrong[0], "--dsn", state_dsn, *wrong[1:])
        assert (status, out) == (1, "")
        assert said in err
        assert len(err.splitlines()) == 1

    status, out, _ = valis("zone", "catalog", "list", "--dsn", state_dsn, "--json")
    assert json.loads(out) == [{"catalog": CATALOG, "members": [
        {"zone": "a.test.", "unique_id": a_id, "group": None, "coo": None},
        {"zone": "b.test.", "unique_id": b_id, "group": None, "coo": None},
    ]}]

    # Removed: its records go, the other member keeps its unique ID.
    status, out, _ = valis("zone", "catalog", "remove", "--dsn", state_dsn, CATALOG, "a.test.")
    assert (status, out) == (0, f"catalog {CATALOG}: member a.test. removed\n")
    assert catalog_rows(pg_cluster, state_dsn) == {
        (CATALOG, "NS", "invalid."), (f"version.{CATALOG}", "TXT", '"2"'),
        (f"{b_id}.zones.{CATALOG}", "PTR", "b.test."),
    }
    assert catalog_serial(pg_cluster, state_dsn) == 5
    status, out, _ = valis("zone", "catalog", "list", "--dsn", state_dsn, CATALOG)
    assert out.splitlines() == [
        "CATALOG\tMEMBER\tUNIQUE ID\tGROUP\tMOVING TO", f"{CATALOG}\tb.test.\t{b_id}\t-\t-",
    ]

    # A member's zone deleted leaves the catalog in that transaction.
    assert valis("zone", "delete", "--dsn", state_dsn, "b.test.")[0] == 0
    assert f"{b_id}.zones.{CATALOG}" not in {o for o, _, _ in catalog_rows(pg_cluster,
                                                                             state_dsn)}
    assert catalog_serial(pg_cluster, state_dsn) == 6
    with pg_cluster.connect(state_dsn) as conn:
        assert list_catalogs(conn)[0].members == ()


OTHER = "other.invalid."


def test_a_member_moves_to_another_catalog_by_change_of_ownership(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """RFC 9432 section 4.4.1, in two steps: ``move`` names the other catalog in the
    member's coo property (that catalog alone changing), ``move`` again lists the member
    there under its unique ID (that one alone changing); ``remove`` then takes the
    member and its coo out of the old catalog. ``--to`` the same catalog withdraws it."""
    import_zone(pg_cluster, state_dsn, "a.test.")
    for catalog in (CATALOG, OTHER):
        assert valis("zone", "catalog", "create", "--dsn", state_dsn, catalog)[0] == 0
    assert valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "a.test.",
                 "--group", "g1")[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        (a_id,) = [m.unique_id for m in list_catalogs(conn, CATALOG)[0].members]

    def state() -> tuple[dict[str, set[tuple[str, str, str]]], dict[str, int]]:
        with pg_cluster.connect(state_dsn) as conn:
            rows = {c: {(r.owner, r.rtype, r.rdata)
                        for r in fetch_zone_rows(conn, [c])[0][c] if r.rtype != "SOA"}
                    for c in (CATALOG, OTHER)}
            return rows, {c: catalog_serial_of(conn, c) for c in (CATALOG, OTHER)}

    def move(to: str) -> str:
        status, out, err = valis("zone", "catalog", "move", "--dsn", state_dsn, CATALOG,
                                 "A.test", "--to", to)
        assert (status, err) == (0, "")
        return out

    rows, serials = state()
    assert move(OTHER) == (
        f"catalog {CATALOG}: member a.test. marked moving to {OTHER} (coo); once its "
        f"consumers have applied this version of {CATALOG}, run this again to list it in "
        f"{OTHER}\n")
    marked, marked_serials = state()
    assert marked[CATALOG] == rows[CATALOG] | {(f"coo.{a_id}.zones.{CATALOG}", "PTR", OTHER)}
    assert (marked[OTHER], marked_serials[OTHER]) == (rows[OTHER], serials[OTHER])
    assert marked_serials[CATALOG] == serials[CATALOG] + 1

    listed_line = (f"once its consumers have taken it over: valis zone catalog remove "
                   f"{CATALOG} a.test.\n")
    assert move(OTHER) == (
        f"catalog {OTHER}: member a.test. listed (unique ID {a_id}); {listed_line}")
    listed, listed_serials = state()
    assert listed[OTHER] == rows[OTHER] | {(f"{a_id}.zones.{OTHER}", "PTR", "a.test."),
                                           (f"group.{a_id}.zones.{OTHER}", "TXT", '"g1"')}
    assert (listed[CATALOG], listed_serials[CATALOG]) == (marked[CATALOG],
                                                         marked_serials[CATALOG])
    assert listed_serials[OTHER] == serials[OTHER] + 1
    assert move(OTHER) == (
        f"catalog {OTHER}: member a.test. listed already (unique ID {a_id}); {listed_line}")
    assert state() == (listed, listed_serials)
    status, out, _ = valis("zone", "catalog", "list", "--dsn", state_dsn)
    assert out.splitlines()[1:] == [f"{CATALOG}\ta.test.\t{a_id}\tg1\t{OTHER}",
                                    f"{OTHER}\ta.test.\t{a_id}\tg1\t-"]

    # Withdrawn: the coo goes (the member stays listed in the other catalog).
    assert move(CATALOG) == f"catalog {CATALOG}: member a.test. stays (no move)\n"
    assert state()[0][CATALOG] == rows[CATALOG]
    assert move(OTHER).startswith(f"catalog {CATALOG}: member a.test. marked moving")

    # The move completed: out of the old catalog, its coo with it.
    assert valis("zone", "catalog", "remove", "--dsn", state_dsn, CATALOG, "a.test.")[0] == 0
    assert not any(a_id in owner for owner, _, _ in catalog_rows(pg_cluster, state_dsn))
    with pg_cluster.connect(state_dsn) as conn:
        assert [(m.zone, m.coo) for m in list_catalogs(conn, OTHER)[0].members] == [
            ("a.test.", None)]

    for wrong, said in (
        (("move", CATALOG, "a.test.", "--to", OTHER), "is not a member of catalog"),
        (("move", OTHER, "a.test.", "--to", "a.test."), "a.test. is not a catalog"),
    ):
        status, out, err = valis("zone", "catalog", wrong[0], "--dsn", state_dsn, *wrong[1:])
        assert (status, out) == (1, "")
        assert said in err
        assert len(err.splitlines()) == 1


def test_a_member_may_be_transferred_by_its_catalogs_secondaries(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    for zone in ("a.test.", "b.test."):
        import_zone(pg_cluster, state_dsn, zone)
    assert valis("zone", "catalog", "create", "--dsn", state_dsn, CATALOG)[0] == 0
    catalog_key = Secondary(CATALOG, "192.0.2.2", "cat.", "hmac-sha256", bytes(range(32)))
    own_key = Secondary("b.test.", "192.0.2.2", "own.", "hmac-sha256", bytes(range(1, 33)))
    with pg_cluster.connect(state_dsn) as conn:
        add_secondary(conn, catalog_key)
        add_secondary(conn, own_key)
    for zone in ("a.test.", "b.test."):
        assert valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, zone)[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        found = {(s.zone, s.address, s.key_name) for s in serving_secondaries(conn)}
    # a.test. by the catalog's key; b.test. lists the address itself, so its own key.
    assert found == {(CATALOG, "192.0.2.2", "cat."), ("a.test.", "192.0.2.2", "cat."),
                     ("b.test.", "192.0.2.2", "own.")}
    assert valis("zone", "catalog", "remove", "--dsn", state_dsn, CATALOG, "a.test.")[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        assert "a.test." not in {s.zone for s in serving_secondaries(conn)}


def test_secondary_list_shows_a_members_secondaries_from_its_catalogs(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """What the node serves, not only the rows a zone lists: a member's secondaries from
    its catalog are listed under it with the catalog (VIA), and removing one from the
    member names the catalog it comes from."""
    for zone in ("a.test.", "b.test."):
        import_zone(pg_cluster, state_dsn, zone)
    assert valis("zone", "catalog", "create", "--dsn", state_dsn, CATALOG)[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        add_secondary(conn, Secondary(CATALOG, "192.0.2.2", "cat.", "hmac-sha256",
                                      bytes(range(32)), notify_port=5300))
        add_secondary(conn, Secondary("b.test.", "192.0.2.2", "own.", "hmac-sha256",
                                      bytes(range(1, 33))))
    for zone in ("a.test.", "b.test."):
        assert valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, zone)[0] == 0

    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn)
    assert status == 0
    assert out.splitlines() == [
        "ZONE\tADDRESS\tKEY\tALGORITHM\tVIA",
        "a.test.\t192.0.2.2:5300\tcat.\thmac-sha256\t" + CATALOG,
        "b.test.\t192.0.2.2\town.\thmac-sha256\t-",  # its own key wins at its address
        CATALOG + "\t192.0.2.2:5300\tcat.\thmac-sha256\t-",
    ]
    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn, "a.test",
                           "--json")
    assert status == 0
    assert json.loads(out) == [{"zone": "a.test.", "address": "192.0.2.2", "key_name": "cat.",
                                "algorithm": "hmac-sha256", "notify_port": 5300,
                                "catalog": CATALOG}]

    status, out, err = valis("zone", "secondary", "remove", "--dsn", state_dsn, "a.test.",
                             "192.0.2.2")
    assert (status, out) == (1, "")
    assert err.strip().endswith(
        f"zone a.test. has its secondary at 192.0.2.2 from its catalog {CATALOG}: remove it"
        f" there (valis zone secondary remove {CATALOG} 192.0.2.2), or the zone from the"
        " catalog"
    ), err
    assert valis("zone", "catalog", "remove", "--dsn", state_dsn, CATALOG, "a.test.")[0] == 0
    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn, "a.test.")
    assert (status, out.splitlines()[1:]) == (0, [])


def test_nsd_takes_its_zone_list_from_the_node_members_of_its_catalogs_included(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """NSD has no catalog zones: ``valis zone secondary nsd-conf`` prints its keys and one
    zone stanza for every zone it transfers, its own and its catalogs' members."""
    for zone in ("a.test.", "b.test.", "c.test."):
        import_zone(pg_cluster, state_dsn, zone)
    assert valis("zone", "catalog", "create", "--dsn", state_dsn, CATALOG)[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        add_secondary(conn, Secondary(CATALOG, "192.0.2.2", "cat.", "hmac-sha256",
                                      bytes(range(32))))
        add_secondary(conn, Secondary("c.test.", "192.0.2.2", "cat.", "hmac-sha256",
                                      bytes(range(32))))
        add_secondary(conn, Secondary("b.test.", "192.0.2.3", "own.", "hmac-sha256",
                                      bytes(range(1, 33))))
    assert valis("zone", "catalog", "add", "--dsn", state_dsn, CATALOG, "a.test.")[0] == 0
    status, out, err = valis("zone", "secondary", "nsd-conf", "--dsn", state_dsn, "192.0.2.2",
                             "--primary", "192.0.2.1")
    assert status == 0, err
    assert re.findall(r'^    name: "([^"]+)"', out, re.MULTILINE) == [
        "cat.", "a.test.", "c.test.", CATALOG]
    assert out.count("request-xfr: 192.0.2.1 cat.") == 3
    status, _, err = valis("zone", "secondary", "nsd-conf", "--dsn", state_dsn, "192.0.2.9",
                           "--primary", "192.0.2.1")
    assert status != 0
    assert "no zone lists a secondary at 192.0.2.9" in err

"""An operator changes zones safely: ``valis zone check`` and ``import`` judge a file
alike and name every fault with its line, an import keeps serial discipline, ``diff`` and
``import --dry-run`` show the change first, and a zone a node serves is not deleted by
accident; all against the real operator-state database, as the run account."""

from __future__ import annotations

import json
from pathlib import Path

from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import PgCluster, valis
from valis_core.operator_state.site_facts_rows import set_site_facts
from valis_core.operator_state.zones import export_zone_text, list_zones

ZONE = "example.net."


def zone_file(directory: Path, text: str, name: str = "example.net.zone") -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(0o644)
    return path


def test_check_and_import_both_refuse_an_empty_zone_named_by_its_file(
    state_dsn: str, run_account_dir: Path
) -> None:
    empty = zone_file(run_account_dir, "")
    status, out, err = valis("zone", "check", str(empty))
    assert (status, out) == (1, "")
    assert f"{empty}: no SOA record at the apex; add one\n" in err
    status, out, err = valis("zone", "import", "--dsn", state_dsn, str(empty))
    assert (status, out) == (1, "")
    assert f"{empty}: no SOA record at the apex; add one\n" in err
    assert err.endswith(f"valis: zone {ZONE}: 1 error in {empty}; nothing was written "
                        "(correct them and run again)\n")  # fmt: skip


def test_check_reports_every_error_with_its_line_in_one_run(run_account_dir: Path) -> None:
    body = (
        "www 3OO IN A 192.0.2.1\n"  # line 6
        "w2 IN A 192.0.2.256\n"
        "txt IN TXT ( \"never closed\"\n"
        "w3 IN A 192.0.2.3\n"
    )
    path = zone_file(run_account_dir, soa_zone(ZONE, extra=body))
    status, out, err = valis("zone", "check", str(path))
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        f"{path}:6: bad TTL '3OO': write seconds (3600) or units (1h, 30m, 1d)",
        f"{path}:7: A address 192.0.2.256 is out of range: 256 is more than 255",
        f"{path}:8: a parenthesis opened on this line is never closed; close it with ')' "
        "after the record's last field",
        f"valis: zone {ZONE}: 3 errors in {path} (correct them and run again)",
    ]


def test_warnings_are_printed_and_the_check_passes(run_account_dir: Path) -> None:
    body = "child IN NS ns.child\nwww IN CNAME host.example.org\n"
    path = zone_file(run_account_dir, soa_zone(ZONE, extra=body))
    status, out, err = valis("zone", "check", str(path))
    assert (status, out) == (0, f"zone {ZONE}: 5 records, servable\n")
    assert f"{path}:6: warning: delegation child.{ZONE} NS ns.child.{ZONE} has no glue" in err
    assert f"{path}:7: warning: host.example.org.{ZONE} looks like a relative name" in err


def test_an_import_that_changes_data_without_a_higher_serial_is_refused(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path
) -> None:
    first = zone_file(run_account_dir, soa_zone(ZONE, serial=5, extra="www IN A 192.0.2.1\n"))
    assert valis("zone", "import", "--dsn", state_dsn, str(first))[0] == 0
    changed = zone_file(run_account_dir, soa_zone(ZONE, serial=5, extra="www IN A 192.0.2.2\n"))
    status, out, err = valis("zone", "import", "--dsn", state_dsn, str(changed))
    assert (status, out) == (1, "")
    assert err == (
        f"valis: zone {ZONE}: the data changed but serial 5 is equal to the stored serial 5; "
        "raise the SOA serial above 5, or choose a serial policy "
        "(--serial-policy increment|unixtime|dateserial|keep)\n"
    )
    with pg_cluster.connect(state_dsn) as conn:
        assert "192.0.2.1" in export_zone_text(conn, ZONE)

    status, out, err = valis(
        "zone", "import", "--dsn", state_dsn, "--serial-policy", "increment", str(changed)
    )
    assert (status, out) == (0, f"imported zone {ZONE}: 4 records, serial 6\n"), err

    assert valis("zone", "policy", "--dsn", state_dsn, ZONE, "increment")[0] == 0
    again = zone_file(run_account_dir, soa_zone(ZONE, serial=5, extra="www IN A 192.0.2.3\n"))
    status, out, _ = valis("zone", "import", "--dsn", state_dsn, str(again))
    assert (status, out) == (0, f"imported zone {ZONE}: 4 records, serial 7\n")

    status, out, _ = valis("zone", "import", "--dsn", state_dsn, str(again))
    assert (status, out) == (0, f"zone {ZONE} unchanged: serial 7, nothing written\n")


def test_diff_and_a_dry_run_show_the_change_and_write_nothing(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path
) -> None:
    old = zone_file(run_account_dir, soa_zone(ZONE, serial=1, extra="www IN A 192.0.2.1\n"))
    assert valis("zone", "import", "--dsn", state_dsn, str(old))[0] == 0
    new = zone_file(run_account_dir, soa_zone(ZONE, serial=2, extra="ftp IN A 192.0.2.9\n"))
    status, shown, err = valis("zone", "diff", "--dsn", state_dsn, str(new))
    assert status == 0, err
    soa = "ns1.example.net. hostmaster.example.net. {} 7200 3600 1209600 300"
    assert shown.splitlines() == [
        f"- {ZONE}\t300\tIN\tSOA\t{soa.format(1)}",
        f"- www.{ZONE}\t300\tIN\tA\t192.0.2.1",
        f"+ {ZONE}\t300\tIN\tSOA\t{soa.format(2)}",
        f"+ ftp.{ZONE}\t300\tIN\tA\t192.0.2.9",
        "serial 1 -> 2",
    ]
    status, out, _ = valis("zone", "import", "--dry-run", "--dsn", state_dsn, str(new))
    assert (status, out) == (0, shown + f"dry run: zone {ZONE} not written\n")
    with pg_cluster.connect(state_dsn) as conn:
        assert [(z.name, z.serial) for z in list_zones(conn)] == [(ZONE, 1)]


def test_a_served_zone_is_deleted_only_with_force_and_list_marks_it(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path
) -> None:
    for zone in (ZONE, "example.org."):
        path = zone_file(run_account_dir, soa_zone(zone, serial=3), f"{zone}zone")
        assert valis("zone", "import", "--dsn", state_dsn, str(path))[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        set_site_facts(conn, "origin-1", {"VALIS_SERVED_ZONES": "example.net,example.com."})

    status, out, _ = valis("zone", "list", "--dsn", state_dsn)
    assert out.splitlines() == [
        "ZONE\tRECORDS\tSERIAL\tSERVED BY\tSERIAL POLICY",
        f"{ZONE}\t3\t3\torigin-1\t-",
        "example.org.\t3\t3\t-\t-",
    ]
    status, out, _ = valis("zone", "list", "--json", "--dsn", state_dsn)
    assert json.loads(out)[0] == {
        "zone": ZONE, "records": 3, "serial": 3, "served_by": ["origin-1"],
        "serial_policy": None,
    }  # fmt: skip

    status, out, err = valis("zone", "delete", "--dsn", state_dsn, "example.net")
    assert (status, out) == (1, "")
    assert err.startswith(f"valis: zone {ZONE} is served by node(s) origin-1; remove it")
    assert valis("zone", "delete", "--dsn", state_dsn, "example.org")[1] == (
        "deleted zone example.org.\n"
    )
    assert valis("zone", "delete", "--dsn", state_dsn, "--force", ZONE)[0] == 0
    with pg_cluster.connect(state_dsn) as conn:
        assert list_zones(conn) == ()

"""Operator state against the private cluster: the schema migrates once however often
it is run, the database refuses what a zone could not serve, zones round-trip through
the operator CLI run as the ``valis`` account, and site facts render whole or not at all."""

from __future__ import annotations

import contextlib
import os
import pty
import pwd
import shutil
import subprocess
from pathlib import Path

import dns.rdataclass
import dns.rdatatype
import dns.zone
import psycopg
import pytest
import trio

from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import PgCluster, run_as, runtime_bin, valis
from valis_core.dns.zone.build import parse_zone_text
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.schema import MIGRATION_LOCK_KEY, migrate, shipped_migrations
from valis_core.operator_state.site_facts import parse_site_facts
from valis_core.operator_state.site_facts_rows import set_site_facts
from valis_core.operator_state.zones import list_zones, replace_zone

DATA = Path(__file__).parent / "data"
EXAMPLE_ORG = DATA / "example.org.zone"


@pytest.fixture
def example_org(run_account_dir: Path) -> Path:
    """The example zone where the run account can read it (this checkout may be under a
    directory it cannot enter)."""
    copy = run_account_dir / EXAMPLE_ORG.name
    shutil.copyfile(EXAMPLE_ORG, copy)
    copy.chmod(0o644)
    return copy

FULL_FACTS = {
    "VALIS_NODE_NAME": "origin-1",
    "VALIS_LOCATION": "fra1",
    "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
    "VALIS_SERVED_ZONES": "example.org.,example.net.",
    "VALIS_LOG_LEVEL": "info",
}


def recorded_versions(pg_cluster: PgCluster, dsn: str) -> list[int]:
    with pg_cluster.connect(dsn) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


# -- migrations --------------------------------------------------------------------------


def test_migrating_twice_applies_each_migration_once(pg_cluster: PgCluster) -> None:
    dsn = pg_cluster.new_database("mig")
    with pg_cluster.connect(dsn) as conn:
        first = migrate(conn)
        second = migrate(conn)
    assert first == tuple(m.version for m in shipped_migrations())
    assert second == ()
    assert recorded_versions(pg_cluster, dsn) == list(first)


def test_db_migrate_command_is_idempotent(pg_cluster: PgCluster) -> None:
    dsn = pg_cluster.new_database("mig")
    status, out, err = valis("db", "migrate", "--dsn", dsn)
    assert status == 0, err
    assert "applied migration(s) 1" in out
    status, out, err = valis("db", "migrate", "--dsn", dsn)
    assert status == 0, err
    assert "nothing to do" in out


async def test_concurrent_migrations_apply_each_migration_once(pg_cluster: PgCluster) -> None:
    dsn = pg_cluster.new_database("mig")
    blocker = pg_cluster.connect(dsn)
    racers = [pg_cluster.connect(dsn) for _ in range(2)]
    results: list[tuple[int, ...]] = []
    try:
        # Hold the migration lock so both migrations queue on it, then let them race.
        blocker.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))

        async def run(conn: psycopg.Connection[tuple[object, ...]]) -> None:
            results.append(await trio.to_thread.run_sync(migrate, conn))

        async with trio.open_nursery() as nursery:
            for conn in racers:
                nursery.start_soon(run, conn)
            with trio.fail_after(30):
                while True:
                    waiting = blocker.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND NOT granted"
                    ).fetchone()
                    if waiting == (2,):
                        break
                    await trio.sleep(0.01)
            blocker.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    finally:
        blocker.close()
        for conn in racers:
            conn.close()
    assert sorted(results) == [(), tuple(m.version for m in shipped_migrations())]
    assert recorded_versions(pg_cluster, dsn) == [m.version for m in shipped_migrations()]


def test_migrate_refuses_a_database_from_a_newer_valis(pg_cluster: PgCluster) -> None:
    dsn = pg_cluster.new_database("mig")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
        with conn.transaction():
            conn.execute("INSERT INTO schema_migrations VALUES (9999, '9999_future.sql', 'x')")
        with pytest.raises(OperatorStateError, match=r"schema version\(s\) \[9999\]"):
            migrate(conn)


# -- constraints -------------------------------------------------------------------------


def _insert(conn: psycopg.Connection[tuple[object, ...]], *rows: tuple[str, str, int, str]) -> None:
    with conn.transaction():
        for owner, rtype, ttl, rdata in rows:
            conn.execute(
                "INSERT INTO records (zone, owner, rtype, ttl, rdata) "
                "VALUES ('example.org.', %s, %s, %s, %s)",
                (owner, rtype, ttl, rdata),
            )


SOA = "ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 300"


@pytest.mark.parametrize(
    ("rows", "constraint"),
    [
        ([("www.example.net.", "A", 300, "192.0.2.1")], "record_owner_in_zone"),
        ([("wwwexample.org.", "A", 300, "192.0.2.1")], "record_owner_in_zone"),
        ([("www.example.org", "A", 300, "192.0.2.1")], "record_owner_absolute"),
        ([("www.example.org.", "A", -1, "192.0.2.1")], "record_ttl_range"),
        ([("www.example.org.", "ANY", 300, "192.0.2.1")], "record_type_servable"),
        ([("www.example.org.", "OPT", 300, "")], "record_type_servable"),
        ([("www.example.org.", "TYPE200", 300, "")], "record_type_servable"),
        ([("www.example.org.", "SOA", 300, SOA)], "record_soa_at_apex"),
        ([("example.org.", "SOA", 300, SOA), ("EXAMPLE.org.", "SOA", 60, SOA + "1")],
         "records_one_soa_per_zone"),
    ],
)  # fmt: skip
def test_the_database_refuses_what_a_zone_cannot_serve(
    pg_cluster: PgCluster, state_dsn: str, rows: list[tuple[str, str, int, str]], constraint: str
) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        conn.execute("INSERT INTO zones (name) VALUES ('example.org.')")
        conn.commit()
        with pytest.raises(psycopg.errors.IntegrityError) as refused:
            _insert(conn, *rows)
        assert refused.value.diag.constraint_name == constraint
        count = conn.execute("SELECT count(*) FROM records").fetchone()
    assert count == (0,)


def test_the_database_accepts_every_type_the_index_serves_and_no_other(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    numbers = [*range(300), 32768, 65280, 65535]
    mnemonics = {dns.rdatatype.to_text(dns.rdatatype.RdataType.make(n)) for n in numbers}
    mnemonics |= {dns.rdatatype.to_text(t) for t in dns.rdatatype.RdataType}
    served = {
        name
        for name in mnemonics
        if (code := dns.rdatatype.from_text(name)) not in (0, 41)
        and not dns.rdatatype.is_metatype(code)
    }
    with pg_cluster.connect(state_dsn) as conn:
        accepted = {
            name
            for (name,) in conn.execute(
                "SELECT t FROM unnest(%s::text[]) AS t WHERE valis_servable_rtype(t)",
                (sorted(mnemonics),),
            )
        }
    assert accepted == served


def test_site_facts_rows_refuse_the_development_listener(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        with pytest.raises(OperatorStateError, match="site_facts_key"):
            set_site_facts(conn, "origin-1", {**FULL_FACTS, "VALIS_REPL_PORT": "4005"})
        stored = conn.execute("SELECT count(*) FROM site_facts").fetchone()
    assert stored == (0,)


# -- zones through the operator CLI ------------------------------------------------------


def _zone(text: str, origin: str) -> dns.zone.Zone:
    return dns.zone.from_text(text, origin=origin, relativize=False, check_origin=True)


def _rrsets(zone: dns.zone.Zone) -> dict[tuple[str, str], tuple[int, frozenset[str]]]:
    return {
        (name.to_text().lower(), dns.rdatatype.to_text(rdataset.rdtype)): (
            rdataset.ttl,
            frozenset(rdata.to_text() for rdata in rdataset),
        )
        for name, node in zone.nodes.items()
        for rdataset in node.rdatasets
        if rdataset.rdclass == dns.rdataclass.IN
    }


def test_import_then_export_keeps_every_rrset(state_dsn: str, example_org: Path) -> None:
    status, out, err = valis("zone", "import", "--dsn", state_dsn, str(example_org))
    assert status == 0, err
    assert "imported zone example.org.: 24 records, serial 2024061501" in out
    assert err == ""  # stderr is not a terminal here: no progress output

    status, exported, err = valis("zone", "export", "--dsn", state_dsn, "example.org")
    assert status == 0, err
    original = _rrsets(_zone(EXAMPLE_ORG.read_text(), "example.org."))
    assert _rrsets(_zone(exported, "example.org.")) == original
    assert len(original) == 21


def test_a_long_import_shows_progress_when_stderr_is_a_terminal(
    state_dsn: str, run_account_dir: Path
) -> None:
    big = run_account_dir / "big.zone"
    big.write_text(soa_zone("big.example.", extra="".join(
        f"h{i} IN A 10.0.{i >> 8}.{i & 255}\n" for i in range(12000)
    )))  # fmt: skip
    controller, terminal = pty.openpty()
    try:
        account = pwd.getpwnam("valis")
        result = subprocess.run(
            ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
             "--init-groups", "--", str(runtime_bin() / "valis"),
             "zone", "import", "--dsn", state_dsn, str(big)],
            stdout=subprocess.PIPE, stderr=terminal, text=True, timeout=120, check=False,
        )  # fmt: skip
        os.close(terminal)
        shown = b""
        with contextlib.suppress(OSError):  # EIO once everything written has been read
            while chunk := os.read(controller, 65536):
                shown += chunk
    finally:
        os.close(controller)
    assert result.returncode == 0
    assert "imported zone big.example.: 12003 records" in result.stdout
    assert b"writing records: 5000/12003" in shown
    assert b"writing records: 12003/12003" in shown


def test_exporting_an_unknown_zone_says_so(state_dsn: str) -> None:
    status, out, err = valis("zone", "export", "--dsn", state_dsn, "nowhere.example")
    assert (status, out) == (1, "")
    assert err == (
        "valis: zone nowhere.example. is not in the operator-state database "
        "(valis zone list shows the zones it holds)\n"
    )


def test_zone_list_shows_records_and_serial(state_dsn: str, example_org: Path) -> None:
    assert valis("zone", "import", "--dsn", state_dsn, str(example_org))[0] == 0
    zone_text = soa_zone("example.net.", serial=7)
    status, _, err = valis("zone", "import", "--dsn", state_dsn, "-", input_text=zone_text)
    assert status == 0, err
    status, out, err = valis("zone", "list", "--dsn", state_dsn)
    assert status == 0, err
    assert out.splitlines() == [
        "ZONE\tRECORDS\tSERIAL\tSERVED BY\tSERIAL POLICY",
        "example.net.\t3\t7\t-\t-",
        "example.org.\t24\t2024061501\t-\t-",
    ]


def test_an_invalid_zone_import_writes_nothing(
    pg_cluster: PgCluster, state_dsn: str, example_org: Path
) -> None:
    assert valis("zone", "import", "--dsn", state_dsn, str(example_org))[0] == 0
    before = valis("zone", "export", "--dsn", state_dsn, "example.org.")[1]

    broken = EXAMPLE_ORG.read_text() + "ftp IN A 192.0.2.21\n"  # CNAME beside other data
    status, out, err = valis("zone", "import", "--dsn", state_dsn, "-", input_text=broken)
    assert status == 1
    assert err.startswith("-:35: ftp.example.org.: CNAME beside other data (A)")
    assert err.endswith("valis: zone example.org.: 1 error in -; nothing was written "
                        "(correct them and run again)\n")  # fmt: skip
    assert out == ""
    assert valis("zone", "export", "--dsn", state_dsn, "example.org.")[1] == before

    unservable_new = soa_zone("example.net.").replace("@ IN NS ns1.example.net.\n", "")
    status, _, err = valis("zone", "import", "--dsn", state_dsn, "-", input_text=unservable_new)
    assert status == 1
    assert "no NS records at the apex" in err
    with pg_cluster.connect(state_dsn) as conn:
        assert [z.name for z in list_zones(conn)] == ["example.org."]


def test_import_replaces_the_whole_zone(pg_cluster: PgCluster, state_dsn: str) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        replace_zone(conn, parse_zone_text(soa_zone("example.net.", extra="old IN A 192.0.2.1\n")))
        replace_zone(conn, parse_zone_text(soa_zone("example.net.", extra="new IN A 192.0.2.2\n")))
        owners = {o for (o,) in conn.execute("SELECT owner FROM records WHERE rtype = 'A'")}
    assert owners == {"ns1.example.net.", "new.example.net."}


def test_zone_check_judges_a_file_without_a_database(run_account_dir: Path) -> None:
    good = run_account_dir / "good.zone"
    good.write_text(soa_zone("example.net."))
    bad = run_account_dir / "bad.zone"
    bad.write_text(soa_zone("example.net.", extra="@ IN SOA a. b. 2 1 1 1 1\n"))
    status, out, _ = valis("zone", "check", str(good))
    assert (status, out) == (0, "zone example.net.: 3 records, servable\n")
    status, _, err = valis("zone", "check", str(bad))
    assert status == 1
    assert "more than one SOA" in err


def test_zone_commands_as_another_account_are_refused(state_dsn: str) -> None:
    result = run_as("nobody", [str(runtime_bin() / "valis"), "zone", "list", "--dsn", state_dsn])
    assert result.returncode == 1
    assert "Peer authentication failed" in result.stderr
    assert "is this the OS account its role maps to?" in result.stderr


# -- site facts --------------------------------------------------------------------------


def test_site_facts_render_writes_the_nodes_environment_file(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path
) -> None:
    with pg_cluster.connect(state_dsn) as conn:
        set_site_facts(conn, "origin-1", FULL_FACTS)
        set_site_facts(conn, "origin-2", {**FULL_FACTS, "VALIS_NODE_NAME": "origin-2"})
    out = run_account_dir / "site-facts.env"
    status, _, err = valis(
        "site-facts", "render", "--dsn", state_dsn, "--node", "origin-1", "--out", str(out)
    )
    assert status == 0, err
    assert parse_site_facts(out.read_text()) == FULL_FACTS
    assert out.stat().st_mode & 0o777 == 0o640


def test_site_facts_render_refuses_a_partial_set_and_leaves_nothing(
    pg_cluster: PgCluster, state_dsn: str, run_account_dir: Path
) -> None:
    partial = {k: v for k, v in FULL_FACTS.items() if k != "VALIS_SERVED_ZONES"}
    with pg_cluster.connect(state_dsn) as conn:
        set_site_facts(conn, "origin-1", partial)
    out = run_account_dir / "site-facts.env"
    for node, missing in (("origin-1", "VALIS_SERVED_ZONES"), ("nowhere", "no facts")):
        status, _, err = valis(
            "site-facts", "render", "--dsn", state_dsn, "--node", node, "--out", str(out)
        )
        assert status == 1
        assert missing in err
        assert "nothing was written" in err
        assert list(run_account_dir.iterdir()) == []

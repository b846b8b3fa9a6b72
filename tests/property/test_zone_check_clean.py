"""``valis zone check`` proves most files clean in C (``clean.clean_count``) without the
owner tables and notes its findings need; the check's loop stays the reference. Over
zones as operators write them, each drawn clean or with one fault that brings a finding
(or that C leaves to the loop: a name server only a wildcard answers for), the check
says the same with and without the compiled proof, and the proof holds for every clean
one drawn."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import skip_here_fail_in_ci
from tests.hypothesis_profiles import scaled
from tests.property.master_lines import master_files
from valis_core.dns.wire import MasterFileError, master
from valis_core.dns.zone import clean
from valis_core.dns.zone.check import check_zone_text

ORIGIN = "example.com."
TABLE_RECORD = "=qqqiiii"
"""_record_table.h's TableRecord: owner and rdata offsets, TTL, lengths, type, line."""

FAULTS = (
    "dup",  # a record stated twice
    "ttl",  # a TTL differing within an RRset
    "cname-beside",  # a CNAME beside other data
    "two-cnames",
    "no-glue",  # a delegation's in-bailiwick server without an address
    "no-address",  # an apex name server in the zone without an address
    "wildcard-address",  # a name server answered only by a wildcard (no finding; C doubts)
    "ds-apex",
    "soa-below",
    "undotted-target",
    "undotted-owner",
    "outside",
    "dname",  # data beneath a DNAME
    "ttl-range",
    "upper-dup",  # the same record under an owner spelt in capitals
    "no-ns",
    "two-soas",
)


@st.composite
def zones(draw: st.DrawFn) -> tuple[str, str | None]:
    """A zone's master file and the fault put in it (None: clean)."""
    fault = draw(st.one_of(st.none(), st.sampled_from(FAULTS)))
    lines = [f"$ORIGIN {ORIGIN}", "$TTL 3600", "@ SOA ns1 hostmaster 1 7200 900 1209600 300"]
    if fault != "no-ns":
        lines += ["@ NS ns1", "@ NS ns2.example.net."]
    lines.append("ns1 A 192.0.2.53" if fault != "no-address" else "ns1 TXT no-address")
    for n in range(draw(st.integers(1, 8))):
        host = f"host{n}"
        kinds = draw(st.lists(st.sampled_from(
            ["A", "AAAA", "MX", "TXT", "CNAME", "SRV", "DELEGATION", "AWAY", "WILDCARD", "CAA"]
        ), min_size=1, max_size=5, unique=True))
        ttl = draw(st.sampled_from(["", "300 ", "60 IN "]))
        for kind in kinds:
            lines += {
                "A": [f"{host} {ttl}A 192.0.2.{n + 1}", f"{host} {ttl}A 198.51.100.{n + 1}"],
                "AAAA": [f"{host} {ttl}AAAA 2001:db8::{n + 1}"],
                "MX": [f"{host} {ttl}MX 10 mail.{host}", f"mail.{host} A 203.0.113.{n + 1}"],
                "TXT": [f'{host} {ttl}TXT "v=spf1 -all"', f"{host} {ttl}TXT word"],
                "CNAME": [f"alias{n} CNAME {host}", f"away{n} CNAME www.example.net."],
                "SRV": [f"_sip._tcp.{host} SRV 0 5 5060 {host}"],
                "DELEGATION": [f"sub{n} NS ns.sub{n}", f"sub{n} NS ns.example.net.",
                               f"ns.sub{n} A 192.0.2.{n + 100}", f"ns.sub{n} AAAA 2001:db8::53"],
                "AWAY": [f"out{n} NS ns1.example.org.", f"out{n} DS 1 13 2 {'ab' * 32}"],
                "WILDCARD": [f"*.w{n} A 192.0.2.9", f"w{n} TXT parent"],
                "CAA": [f'{host} CAA 0 issue "ca.example.net"'],
            }[kind]
    faulty = {
        "dup": ["host0 A 192.0.2.77", "host0 A 192.0.2.77"],
        "ttl": ["host0 60 A 192.0.2.78", "host0 61 A 192.0.2.79"],
        "cname-beside": ["both CNAME host0", "both TXT x"],
        "two-cnames": ["twice CNAME host0", "twice CNAME host1"],
        "no-glue": ["bare NS ns.bare"],
        "wildcard-address": ["@ NS ns.wild", "*.wild A 192.0.2.8", "wild TXT here"],
        "ds-apex": [f"@ DS 1 13 2 {'cd' * 32}"],
        "soa-below": ["low SOA ns1 hostmaster 1 2 3 4 5"],
        "undotted-target": ["point CNAME www.example.net"],
        "undotted-owner": ["www.example.com A 192.0.2.10"],
        "outside": ["stray.example.org. A 192.0.2.11"],
        "dname": ["moved DNAME example.net.", "x.moved A 192.0.2.14"],
        "ttl-range": ["huge 2147483648 A 192.0.2.12"],
        "upper-dup": ["host0 A 192.0.2.13", "HOST0 A 192.0.2.13"],
        "two-soas": ["@ SOA ns1 other 2 7200 900 1209600 300"],
    }.get(fault or "", [])
    for line in faulty:
        lines.insert(draw(st.integers(3, len(lines))), line)
    return "\n".join(lines) + "\n", fault


@pytest.fixture
def compiled_check() -> None:
    if clean._clean_count is None or master.RecordTable is None:
        skip_here_fail_in_ci(
            "this test needs the compiled zone check (valis_core.dns.zone._check), not "
            "built in this tree: `make venv` (or `pip install -e .`) builds it")


pytestmark = pytest.mark.usefixtures("compiled_check")


@settings(max_examples=scaled(1.0), deadline=None)
@given(zones(), st.sampled_from([ORIGIN, None]))
def test_the_compiled_proof_changes_no_finding(zone: tuple[str, str | None],
                                               origin: str | None) -> None:
    text, fault = zone
    proved = check_zone_text(text, origin)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(clean, "_clean_count", None)
        looped = check_zone_text(text, origin)
    assert proved == looped
    proof = clean.clean_count(text, ORIGIN)
    if fault is None:
        assert looped.ok
        assert not looped.warnings
        assert proof == (looped.zone, looped.records)
        assert looped.records > 0
    elif fault != "wildcard-address":
        assert looped.errors or looped.warnings  # the fault brings a finding ...
        assert proof is None  # ... so C proves nothing


def test_a_table_holds_the_records_read() -> None:
    """The records C writes to a table are the ones the reader emits, in order."""
    text = "\n".join([f"$ORIGIN {ORIGIN}", "$TTL 300", "@ SOA ns1 hm 1 2 3 4 5", "@ NS ns1",
                      "ns1 A 192.0.2.1", "   AAAA 2001:db8::1", "WWW 60 IN TXT a \"b c\"",
                      "x MX 10 ns1", "y HINFO a b", "z A ( 192.0.2.9", "  ) ; late"]) + "\n"
    records: list[tuple[bytes, int, int, bytes]] = []
    positions: list[int] = []
    master.read_master(text, ORIGIN, records.append, positions=positions)
    assert master.RecordTable is not None
    table = master.RecordTable()
    master.read_master(text, ORIGIN, table.append, positions=master.TableLines(table))
    assert len(table) == len(records) == 8
    assert table.rows() == (records, positions)
    width = struct.calcsize(TABLE_RECORD)
    for n, (owner, rtype, ttl, rdata) in enumerate(records):
        at, data, held_ttl, owner_len, data_len, held_type, line = struct.unpack_from(
            TABLE_RECORD, table.records, n * width)
        assert (held_type, held_ttl, line) == (rtype, ttl, positions[n])
        assert table.arena[at : at + owner_len] == owner
        assert table.arena[data : data + data_len] == rdata


_PROBE = """\
import sys
from valis_cli.main import run
status = run(["zone", "check", sys.argv[1], "--origin", "example.com"])
print(status, " ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("fault", [None, "dup"])
def test_a_clean_file_is_checked_without_the_loop_attrs_or_dnspython(
    tmp_path: Path, fault: str | None
) -> None:
    """``valis zone check`` of a clean plain zone starts without attrs, dnspython or the
    check's loop (most of its time on a small file); a file with a finding loads them and
    reports it."""
    text = "\n".join([
        "$TTL 300", "@ SOA ns1 hostmaster 1 7200 900 1209600 300", "@ NS ns1",
        "ns1 A 192.0.2.1", "www A 192.0.2.2", "www AAAA 2001:db8::2", "mail MX 10 www",
        *(["www A 192.0.2.2"] if fault else []),
    ]) + "\n"
    path = tmp_path / "zone.txt"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                          text=True, timeout=60, check=True)
    status, modules = done.stdout.splitlines()[-1].split(" ", 1)
    loaded = set(modules.split())
    assert status == "0"
    assert done.stdout.splitlines()[0] == "zone example.com.: 6 records, servable"  # dup: once
    heavy = {"attr", "attrs", "dns", "valis_core.dns.zone.check"}
    if fault is None:
        assert not loaded & heavy
    else:
        assert heavy - {"attr"} <= loaded
        assert "duplicate www.example.com. A record" in done.stderr


@settings(max_examples=scaled(1.0), deadline=None)
@given(master_files(), st.sampled_from([ORIGIN, None]))
def test_a_table_reads_any_file_as_the_reader_emits_it(text: str, origin: str | None) -> None:
    """Records, lines and faults alike, hostile files among them."""
    records: list[tuple[bytes, int, int, bytes]] = []
    positions: list[int] = []
    problems: list[MasterFileError] = []
    master.read_master(text, origin, records.append, problems=problems, positions=positions)
    assert master.RecordTable is not None
    table = master.RecordTable()
    faults: list[MasterFileError] = []
    master.read_master(text, origin, table.append, problems=faults,
                       positions=master.TableLines(table))
    assert table.rows() == (records, positions)
    assert [(f.line, f.reason) for f in faults] == [(f.line, f.reason) for f in problems]

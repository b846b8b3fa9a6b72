"""The zone index: what it refuses (naming zone, owner and reason), what it imports from
master files, and how it finds the zone that answers a name."""

from __future__ import annotations

import dns.name
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns import wire
from valis_core.dns.wire.records import RecordRow, ZoneError, decode_node
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.build import parse_zone_text
from valis_core.errors import ValisError

Z = "example.com."
SOA = RecordRow(Z, Z, "SOA", 3600, f"ns1.{Z} hostmaster.{Z} 1 7200 3600 1209600 300")
APEX_NS = RecordRow(Z, Z, "NS", 3600, f"ns1.{Z}")
BASE = [SOA, APEX_NS]


def key(name: str) -> bytes:
    return wire.from_text(name).lower()


def refusal(rows: list[RecordRow]) -> ZoneError:
    with pytest.raises(ZoneError) as caught:
        ZoneIndex.from_records(rows)
    return caught.value


@pytest.mark.parametrize(
    ("rows", "owner", "reason"),
    [
        ([APEX_NS], Z, "no SOA record at the apex"),
        ([SOA], Z, "no NS records at the apex"),
        (
            [*BASE, RecordRow(Z, Z, "SOA", 3600, f"ns2.{Z} h.{Z} 2 1 1 1 1")],
            Z,
            "more than one SOA",
        ),
        (
            [*BASE, RecordRow(Z, f"sub.{Z}", "SOA", 3600, f"ns1.{Z} h.{Z} 1 1 1 1 1")],
            f"sub.{Z}",
            "SOA record below the apex",
        ),
        (
            [
                *BASE,
                RecordRow(Z, f"www.{Z}", "CNAME", 300, f"web.{Z}"),
                RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.1"),
            ],
            f"www.{Z}",
            "CNAME beside other data (A)",
        ),
        ([*BASE, RecordRow(Z, Z, "CNAME", 300, f"web.{Z}")], Z, "CNAME beside other data"),
        (
            [
                *BASE,
                RecordRow(Z, f"www.{Z}", "CNAME", 300, f"a.{Z}"),
                RecordRow(Z, f"www.{Z}", "CNAME", 300, f"b.{Z}"),
            ],
            f"www.{Z}",
            "more than one CNAME",
        ),
        (
            [
                *BASE,
                RecordRow(Z, f"d.{Z}", "DNAME", 300, "a.example."),
                RecordRow(Z, f"d.{Z}", "DNAME", 300, "b.example."),
            ],
            f"d.{Z}",
            "more than one DNAME",
        ),
        (
            [
                *BASE,
                RecordRow(Z, f"d.{Z}", "DNAME", 300, "example.net."),
                RecordRow(Z, f"x.d.{Z}", "A", 300, "192.0.2.1"),
            ],
            f"x.d.{Z}",
            "beneath the DNAME at d.example.com.",
        ),
        ([*BASE, RecordRow(Z, "www.example.net.", "A", 300, "192.0.2.1")], "www.example.net.",
         "data outside the zone"),
        ([*BASE, RecordRow(Z, "example.com.evil.", "A", 300, "192.0.2.1")],
         "example.com.evil.", "data outside the zone"),
        ([*BASE, RecordRow(Z, "www", "A", 300, "192.0.2.1")], "www", "not absolute"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.300")], f"www.{Z}",
         "cannot parse A rdata '192.0.2.300'"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "MX", 300, "10")], f"www.{Z}", "cannot parse MX"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "CNAME", 300, "web")], f"www.{Z}",
         "names in rdata must be absolute"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "ANY", 300, "")], f"www.{Z}",
         "type ANY is a query or transport type"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "OPT", 300, "")], f"www.{Z}",
         "type OPT is a query or transport type"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "BOGUS", 300, "x")], f"www.{Z}",
         "unknown record type 'BOGUS'"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "A", 2**31, "192.0.2.1")], f"www.{Z}",
         "TTL 2147483648 is outside"),
        ([*BASE, RecordRow(Z, f"www.{Z}", "A", -1, "192.0.2.1")], f"www.{Z}", "TTL -1"),
    ],
)
def test_a_zone_that_cannot_be_served_is_refused_naming_zone_owner_and_reason(
    rows: list[RecordRow], owner: str, reason: str
) -> None:
    error = refusal(rows)
    assert isinstance(error, ValisError)
    assert error.zone == Z
    assert error.owner == owner
    assert reason in error.reason
    assert str(error).startswith(f"zone {Z} cannot be served: {owner}: ")


def test_one_bad_zone_refuses_the_whole_index_even_beside_good_ones() -> None:
    other = "example.org."
    good = [
        RecordRow(other, other, "SOA", 60, f"ns.{other} h.{other} 1 1 1 1 1"),
        RecordRow(other, other, "NS", 60, f"ns.{other}"),
    ]
    error = refusal([*good, SOA])
    assert error.zone == Z


MASTER = """\
$ORIGIN example.com.
$TTL 3600
@       IN SOA ns1 hostmaster (
            2024010101 ; serial
            7200 3600 1209600 300 )
        NS    ns1
        NS    ns2.example.net.
        MX    10 mail
        TXT   "v=spf1 -all"
ns1     A     192.0.2.1
        AAAA  2001:db8::1
mail    A     192.0.2.2
www 300 CNAME @
_sip._tcp SRV 0 5 5060 sip
sip     A     192.0.2.5
*.wild  TXT   "wildcard"
a.b.c   A     192.0.2.3
sub     NS    ns.sub
ns.sub  A     192.0.2.4
mail    A     192.0.2.2 ; a duplicate, served once
$GENERATE 1-3 host$ A 198.51.100.$
"""


def test_a_realistic_master_file_imports_with_relative_names_made_absolute() -> None:
    rows = parse_zone_text(MASTER, "example.com")
    assert {row.zone for row in rows} == {Z}
    assert all(row.owner.endswith(Z) for row in rows)
    assert RecordRow(Z, Z, "MX", 3600, f"10 mail.{Z}") in rows
    assert RecordRow(Z, f"www.{Z}", "CNAME", 300, Z) in rows
    assert RecordRow(Z, f"host2.{Z}", "A", 3600, "198.51.100.2") in rows
    assert RecordRow(Z, f"_sip._tcp.{Z}", "SRV", 3600, f"0 5 5060 sip.{Z}") in rows
    index = ZoneIndex.from_zone_text(MASTER, "example.com.")
    assert index.zones == (Z,)
    assert index.record_count == len(rows) - 1  # the duplicate counts once


def test_rows_and_master_file_build_the_same_index() -> None:
    from_text = ZoneIndex.from_zone_text(MASTER, Z)
    from_rows = ZoneIndex.from_records(parse_zone_text(MASTER, Z))
    zone_a = from_text.zone_for(key(Z))
    zone_b = from_rows.zone_for(key(Z))
    assert zone_a is not None
    assert zone_b is not None
    assert dict(zone_a.nodes) == dict(zone_b.nodes)
    assert zone_a.empty_nonterminals == zone_b.empty_nonterminals == {
        key(f"b.c.{Z}"),
        key(f"c.{Z}"),
        key(f"wild.{Z}"),
        key(f"_tcp.{Z}"),
    }
    assert zone_a.cuts == {key(f"sub.{Z}")}
    assert zone_a.has_wildcard
    assert zone_a.negative_ttl == 300


def test_without_an_origin_the_zone_is_named_by_its_soa() -> None:
    text = MASTER.replace("$ORIGIN example.com.\n", "").replace("@ ", "example.com. ", 1)
    text = "$ORIGIN example.com.\n" + text
    index = ZoneIndex.from_zone_text(text)
    assert index.zones == (Z,)


def test_a_master_file_without_soa_or_origin_is_refused() -> None:
    with pytest.raises(ZoneError, match="needs exactly one SOA record"):
        ZoneIndex.from_zone_text("$ORIGIN example.com.\nwww 60 A 192.0.2.1\n")


def test_include_is_refused_with_a_remedy() -> None:
    with pytest.raises(ZoneError) as caught:
        ZoneIndex.from_zone_text(MASTER + "$INCLUDE /etc/passwd\n", Z)
    assert "$INCLUDE is not supported" in caught.value.reason
    assert caught.value.owner == f"line {MASTER.count(chr(10)) + 1}"


def test_a_record_of_another_class_is_refused() -> None:
    with pytest.raises(ZoneError, match="class"):
        ZoneIndex.from_zone_text(MASTER + "version CH TXT \"1\"\n", Z)


def test_a_syntax_error_names_the_line() -> None:
    with pytest.raises(ZoneError) as caught:
        ZoneIndex.from_zone_text(MASTER + "bad A not-an-address\n", Z)
    assert caught.value.owner == f"line {MASTER.count(chr(10)) + 1}"
    assert "does not parse" in caught.value.reason


def test_master_file_data_outside_its_origin_is_refused() -> None:
    with pytest.raises(ZoneError, match="data outside the zone"):
        ZoneIndex.from_zone_text(MASTER + "www.example.org. A 192.0.2.9\n", Z)


def test_duplicates_collapse_and_an_rrset_takes_its_lowest_ttl() -> None:
    rows = [
        *BASE,
        RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.1"),
        RecordRow(Z, f"WWW.{Z.upper()}", "A", 60, "192.0.2.2"),
        RecordRow(Z, f"www.{Z}", "A", 900, "192.0.2.1"),
    ]
    index = ZoneIndex.from_records(rows)
    assert index.record_count == 4
    zone = index.zone_for(key(f"www.{Z}"))
    assert zone is not None
    ttl, rdatas = decode_node(zone.nodes[key(f"www.{Z}")])[1]
    assert ttl == 60
    assert rdatas == (bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2]))


def nested() -> ZoneIndex:
    child = "sub.example.com."
    return ZoneIndex.from_records(
        [
            *BASE,
            RecordRow(Z, child, "NS", 3600, f"ns.{child}"),
            RecordRow(Z, f"ns.{child}", "A", 3600, "192.0.2.4"),
            RecordRow(child, child, "SOA", 3600, f"ns.{child} h.{child} 1 1 1 1 1"),
            RecordRow(child, child, "NS", 3600, f"ns.{child}"),
            RecordRow(child, f"ns.{child}", "A", 3600, "192.0.2.4"),
        ]
    )


def test_nested_zones_resolve_to_the_deepest_served_zone() -> None:
    index = nested()
    assert index.zones == (Z, "sub.example.com.")
    for name, origin in [
        (Z, Z),
        (f"www.{Z}", Z),
        ("sub.example.com.", "sub.example.com."),
        ("a.b.sub.example.com.", "sub.example.com."),
        ("xsub.example.com.", Z),
    ]:
        zone = index.zone_for(key(name))
        assert zone is not None
        assert zone.origin == origin
    assert index.zone_for(key("example.org.")) is None
    assert index.zone_for(key("com.")) is None
    child = index.zone_for(key("sub.example.com."))
    assert child is not None
    parent = index.parent_of(child)
    assert parent is not None
    assert parent.origin == Z


def test_an_index_may_serve_no_zone_at_all() -> None:
    index = ZoneIndex.from_records([])
    assert index.zones == ()
    assert index.record_count == 0
    assert index.zone_for(key(Z)) is None


LABEL = st.text(
    alphabet=st.characters(codec="ascii", exclude_characters="\\."), min_size=1, max_size=63
)


@given(st.lists(LABEL, min_size=0, max_size=4))
def test_names_are_encoded_as_dnspython_encodes_them(labels: list[str]) -> None:
    text = ".".join(labels) + "."
    try:
        expected = dns.name.from_text(text).to_wire()
    except dns.exception.DNSException:
        with pytest.raises(wire.BadName):
            wire.from_text(text)
        return
    assert wire.from_text(text) == expected
    assert dns.name.from_text(wire.to_text(wire.from_text(text))).to_wire() == expected

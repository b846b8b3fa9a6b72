"""``valis zone check`` judges a file exactly as an import does, reports every faulty
line at once with a message naming the real fault, and warns about what serves but is
probably a mistake; the serial rules and the import diff are plain values."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from valis_core.dns.wire import MasterFileError
from valis_core.dns.wire.master import read_master
from valis_core.dns.wire.origin import ZoneFileError, origin_of
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.build import parse_zone_text
from valis_core.dns.zone.check import check_zone_text
from valis_core.dns.zone.diff import diff_zone, rrsets
from valis_core.dns.zone.serial import (
    POLICIES,
    SerialNotRaised,
    choose_serial,
    next_serial,
    serial_gt,
)
from valis_core.operator_state.zones import checked_zone

ZONE = "example.com."
HEAD = [
    "$TTL 300",
    "@ SOA ns1 hostmaster ( 1 7200 3600",
    "  1209600 300 )",
    "@ NS ns1",
    "ns1 A 192.0.2.1",
]
GOOD = (
    "www A 192.0.2.10",
    "www AAAA 2001:db8::10",
    "mail 600 MX 10 mail.example.com.",
    'txt TXT "hello world"',
    "alias CNAME www",
    "sub NS ns.sub",
    "ns.sub A 192.0.2.53",
    "*.w A 198.51.100.1",
)
BAD = {
    "www 3OO A 192.0.2.1": "bad TTL '3OO'",
    "w2 A 192.0.2.256": "192.0.2.256 is out of range: 256 is more than 255",
    "w3 AAAA 192.0.2.1": "is an IPv4 address; put it in an A record",
    "w4 A 2001:db8::1": "is an IPv6 address; put it in an AAAA record",
    "w5 99999999999 A 192.0.2.1": "TTL 99999999999 is larger than 2147483647",
    "w6 FOO bar": "unknown record type 'FOO'",
    "outside.example.org. A 192.0.2.1": "data outside the zone",
    "ns1 CNAME www": "CNAME beside other data",
    'w7 TXT "open': "newline in quoted string",
}


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


@settings(deadline=None)
@given(st.lists(st.sampled_from((*GOOD, *BAD)), max_size=12))
def test_check_passes_a_file_exactly_when_the_build_takes_it(body: list[str]) -> None:
    text = _text(HEAD + body)
    result = check_zone_text(text, ZONE)
    try:
        ZoneIndex.from_zone_text(text, ZONE)
    except ZoneError:
        built = False
    else:
        built = True
    assert result.ok is built


@settings(deadline=None)
@given(st.lists(st.sampled_from(GOOD), max_size=8), st.lists(st.sampled_from(sorted(BAD))))
def test_every_faulty_line_is_reported_with_its_line_and_reason(
    good: list[str], bad: list[str]
) -> None:
    # Bad lines go after the good ones, so a CNAME clash is always blamed on its own line.
    lines = HEAD + good + bad
    result = check_zone_text(_text(lines), ZONE)
    blamed = {finding.line: finding.message for finding in result.errors}
    first = len(HEAD) + len(good) + 1
    for number, line in enumerate(bad, first):
        if line in lines[: number - 1] and BAD[line] == "CNAME beside other data":
            continue  # a repeated clash is one owner's fault, blamed once
        assert number in blamed, (line, result.errors)
        assert BAD[line] in blamed[number]
    assert set(blamed) <= set(range(first, len(lines) + 1))


def test_a_parenthesis_never_closed_is_blamed_on_the_line_that_opened_it() -> None:
    text = _text([*HEAD, "www A 192.0.2.1", 'txt TXT ( "a"', '  "b"', "w2 A 192.0.2.2"])
    result = check_zone_text(text, ZONE)
    assert [(f.line, f.message.split(";")[0]) for f in result.errors] == [
        (7, "a parenthesis opened on this line is never closed")
    ]


def test_an_empty_file_is_refused_by_check_as_by_import() -> None:
    result = check_zone_text("", ZONE)
    assert not result.ok
    assert result.errors[0].message == "no SOA record at the apex; add one"
    with pytest.raises(ZoneError, match="a zone needs at least SOA and NS"):
        checked_zone(parse_zone_text("", ZONE))


def test_without_an_origin_the_soa_owner_names_the_zone() -> None:
    text = _text(["$ORIGIN example.com.", *HEAD])
    assert check_zone_text(text, None).zone == ZONE
    assert not check_zone_text(_text(list(GOOD[:1])), None).ok


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_files_origin_is_its_first_record_or_its_name(newline: str) -> None:
    """``valis zone check FILE`` (and ``serve``) name a zone from a leading ``$ORIGIN``,
    an SOA first record written absolute, else the file's name; only the lines before the
    first record are read."""
    soa = "example.org. 3600 SOA ns1.example.org. h.example.org. 1 2 3 4 5"
    cases = {
        "; a comment\n\n$ORIGIN example.net.\n@ SOA ns1 h 1 2 3 4 5": "example.net.",
        "$TTL 300\n" + soa + "\nwww A 192.0.2.1": "example.org.",
        "www.example.org. A 192.0.2.1\n" + soa: "example.com.",  # the file's name
        "  A 192.0.2.1\n$ORIGIN example.net.": "example.com.",
        "$ORIGIN relative": "example.com.",
    }
    for text, origin in cases.items():
        assert origin_of("/srv/zones/example.com.zone", text.replace("\n", newline)) == origin
    assert origin_of("db.example.com", "") == "example.com."
    with pytest.raises(ZoneFileError, match="cannot tell the origin"):
        origin_of("/srv/zones/.zone", "www A 192.0.2.1")


def test_warnings_name_the_probable_mistake_and_pass_the_check() -> None:
    body = [
        "www A 192.0.2.10",
        "www 600 A 192.0.2.11",
        "www A 192.0.2.10",
        "child NS ns.child",
        "mail MX 10 mail.example.net",
    ]
    result = check_zone_text(_text(HEAD + body), ZONE)
    assert result.ok
    found = {f.line: f.message for f in result.warnings}
    assert "TTL 600 differs from TTL 300" in found[7]
    assert "duplicate www.example.com. A record (also on line 6)" in found[8]
    assert "has no glue; add an A or AAAA record for ns.child.example.com." in found[9]
    assert "mail.example.net.example.com. looks like a relative name missing its" in found[10]
    assert len(result.warnings) == 4


def test_name_servers_without_an_address_are_warned_of_where_a_resolver_needs_one() -> None:
    """An NS target inside the zone needs an address: glue when it lies at or beneath
    the delegation naming it (a referral carries no wildcard's), else an address record
    or its wildcard's; one beneath another delegation is that delegation's concern."""
    head = ["$TTL 300", "@ SOA ns1 hostmaster 1 7200 3600 1209600 300"]
    cases = {
        # the apex's own name servers, the apex itself among them
        ("@ NS ns1", "@ NS ns2", "@ NS @", "ns1 A 192.0.2.1"): [
            (3, "name server example.com. of example.com. has no address in the zone"),
            (3, "name server ns2.example.com. of example.com. has no address in the zone"),
        ],
        # a delegation to a sibling name, and to a name beneath itself
        ("@ NS ns1", "ns1 A 192.0.2.1", "d NS ns2", "e NS ns.e"): [
            (5, "name server ns2.example.com. of d.example.com. has no address in the zone"),
            (6, "delegation e.example.com. NS ns.e.example.com. has no glue"),
        ],
        # answered by a wildcard: reachable; beneath another delegation: not checked here;
        # an empty non-terminal holds no address
        ("@ NS ns1", "@ NS ns.example.net.", "ns1 A 192.0.2.1", "*.w AAAA 2001:db8::1",
         "d NS a.w", "x NS ns.d", "x NS d", "d NS ns.d", "ns.d A 192.0.2.2",
         "y NS ent", "deep.ent A 192.0.2.3"): [
            (12, "name server ent.example.com. of y.example.com. has no address in the zone"),
        ],
    }
    for body, expected in cases.items():
        result = check_zone_text(_text([*head, *body]), ZONE)
        assert result.ok, result.errors
        assert [(f.line, f.message.split(";")[0]) for f in result.warnings] == expected, body


def test_a_ds_at_the_apex_and_a_dname_at_a_delegation_are_warned_of() -> None:
    body = ["@ DS 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118", "d NS ns1",
            "d DNAME elsewhere.example.net."]
    result = check_zone_text(_text(HEAD + body), ZONE)
    assert result.ok
    assert [(f.line, f.message.split(":")[0]) for f in result.warnings] == [
        (6, "DS at the apex of example.com."), (8, "DNAME at the delegation d.example.com."),
    ]


def test_collecting_reads_on_after_a_fault_and_places_every_record() -> None:
    problems: list[MasterFileError] = []
    positions: list[int] = []
    records: list[tuple[bytes, int, int, bytes]] = []
    text = '$TTL 60\na A 192.0.2.1\nb A 1.2.3\nc TXT "x"\nd 1x A 192.0.2.4\ne A 192.0.2.5\n'
    read_master(
        text,
        ZONE,
        records.append,
        problems=problems,
        positions=positions,
    )
    assert [p.line for p in problems] == [3, 5]
    assert positions == [2, 4, 6]
    assert len(records) == 3


# -- serials -----------------------------------------------------------------------------

SERIALS = st.integers(0, 2**32 - 1)


@given(SERIALS, SERIALS, st.booleans())
def test_without_a_policy_changed_data_needs_a_higher_serial(
    stored: int, offered: int, changed: bool
) -> None:
    if changed and not serial_gt(offered, stored):
        with pytest.raises(SerialNotRaised) as refused:
            choose_serial(ZONE, None, stored, offered, changed=changed, now=0)
        assert f"serial {offered} is" in str(refused.value)
        assert f"stored serial {stored}" in str(refused.value)
    else:
        serial = choose_serial(ZONE, None, stored, offered, changed=changed, now=0)
        assert serial == (offered if serial_gt(offered, stored) else stored)


@given(st.sampled_from(("increment", "unixtime", "dateserial")), SERIALS, SERIALS,
       st.floats(0, 4e9))  # fmt: skip
def test_a_choosing_policy_always_raises_the_serial_of_changed_data(
    policy: str, stored: int, offered: int, now: float
) -> None:
    serial = choose_serial(ZONE, policy, stored, offered, changed=True, now=now)
    assert serial_gt(serial, stored)


def test_the_policies_pick_the_serial_their_names_say() -> None:
    noon = 1_780_000_000.0  # 2026-05-28 UTC
    assert choose_serial(ZONE, "increment", 41, 7, changed=True, now=noon) == 42
    assert choose_serial(ZONE, "unixtime", 41, 7, changed=True, now=noon) == 1_780_000_000
    assert choose_serial(ZONE, "dateserial", 41, 7, changed=True, now=noon) == 2026052800
    assert choose_serial(ZONE, "dateserial", 2026052805, 7, changed=True, now=noon) == 2026052806
    assert choose_serial(ZONE, "keep", 41, 7, changed=True, now=noon) == 7
    assert choose_serial(ZONE, "increment", 41, 50, changed=True, now=noon) == 50
    assert choose_serial(ZONE, "increment", None, 7, changed=True, now=noon) == 7
    assert next_serial(2**32 - 1) == 1
    assert set(POLICIES) == {"increment", "unixtime", "dateserial", "keep"}


# -- the import diff ---------------------------------------------------------------------

ROWS = st.lists(
    st.builds(
        RecordRow,
        st.just(ZONE),
        st.sampled_from(("a.example.com.", "b.example.com.", "A.example.com.")),
        st.sampled_from(("A", "TXT")),
        st.sampled_from((60, 300)),
        st.sampled_from(("192.0.2.1", "192.0.2.2", '"x"')),
    ),
    max_size=8,
)


@given(ROWS, ROWS)
def test_the_diff_turns_the_old_rrsets_into_the_new(
    old: list[RecordRow], new: list[RecordRow]
) -> None:
    diff = diff_zone(ZONE, old, new)
    after = dict(rrsets(old))
    for key in rrsets(diff.removed):
        del after[key]
    after.update(rrsets(diff.added))
    assert after == rrsets(new)
    assert diff.changed is (rrsets(old) != rrsets(new))


def test_a_serial_alone_is_not_a_change_of_data() -> None:
    soa = "ns1.example.com. hostmaster.example.com. {} 7200 3600 1209600 300"
    old = [RecordRow(ZONE, ZONE, "SOA", 300, soa.format(1))]
    new = [RecordRow(ZONE, ZONE, "SOA", 300, soa.format(2))]
    diff = diff_zone(ZONE, old, new)
    assert not diff.changed
    assert (diff.old_serial, diff.new_serial) == (1, 2)
    assert diff.lines()[-1] == "serial 1 -> 2"


def test_a_name_written_with_its_trailing_dot_is_not_taken_for_one_missing_it() -> None:
    """A name below the apex whose last relative label looks like a top-level domain
    (``mail.uk.example.com.``, ``srv.de.example.com.``) is warned about only when it was
    written relative, not when it was written whole with its dot."""
    body = [
        "mail.uk.example.com. A 192.0.2.20",
        "alias CNAME srv.de.example.com.",
        "mx MX 10 (",
        "   relay.io.example.com. )",
        "Web.Co.Example.Com. A 192.0.2.21",
        "shop.fr A 192.0.2.22",
        "alias2 CNAME srv.de",
    ]
    result = check_zone_text(_text(HEAD + body), ZONE)
    assert result.ok
    undotted = {f.line: f.message for f in result.warnings
                if "trailing dot" in f.message and f.line is not None}
    assert sorted(undotted) == [11, 12], undotted
    assert "shop.fr.example.com. looks like a relative name" in undotted[11]
    assert "srv.de.example.com. looks like a relative name" in undotted[12]

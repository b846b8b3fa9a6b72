"""Rows take a short way into the zone index (``Builder.add_fields``: plain owners inside
their zone, rdata ``row_rdata`` reads); the long way (``add_fields_general``: every name
and rdata through ``wire.from_text`` and dnspython) is the reference. Whatever the rows,
hostile ones included, both ways must give the same zones, byte for byte, or the same
refusal, word for word."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.dns.wire import master
from valis_core.dns.wire.records import MAX_TTL, RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex
from valis_core.dns.zone.build import Builder, rdata_wire


def mostly(good: tuple[str, ...], bad: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Good text most of the time (so zones get built and compared whole), bad text
    often enough that every refusal is compared too."""
    return st.integers(0, 5).flatmap(lambda n: st.sampled_from(bad if n == 0 else good))


HOSTILE = st.text(alphabet=' \t;()"\\.@0123456789abcdefABCDEF:xé\n\x0b\x00#', max_size=24)
ZONES = mostly(("example.com.", "Example.COM.", "sub.example.com."),
               (".", "ex\\.ample.org.", "example.com", "a..b.", "é.example."))
LONG = f"{'a' * 63}.{'b' * 63}.{'c' * 63}"
RELATIVE = mostly(
    ("", "www.", "WWW.", "*.", "a.b.", "Mail.Host.", "ns1.", "_sip._tcp.", f"{'l' * 63}."),
    (f"{'l' * 64}.", "a..", ".", "\\065.", "w\\.x.", "é.", "a b.", "a;b.",
     f"{LONG}.{'d' * 48}.", f"{LONG}.{'d' * 49}.", f"{LONG}.{'d' * 50}."),
)
OTHER_OWNERS = st.sampled_from(("x.example.net.", "www", "", ".", "example.com..", "com."))
TARGETS = mostly(("ns1.example.com.", "Target.Example.NET.", ".", "a-b.c."),
                 ("ns1", "@", "a..b.", "t\\.x.", '"t".', "é.", f"{LONG}.{'d' * 60}.example."))
NUMBERS = mostly(("0", "10", "65535", "4294967295"), ("65536", "4294967296", "010", "1h", "-1"))


@st.composite
def rdata_for(draw: st.DrawFn, rtype: str) -> str:
    kind = rtype.strip().upper()
    if draw(st.integers(0, 9)) == 0:
        return draw(HOSTILE)
    if kind in ("A", "TYPE1"):
        return draw(mostly(("192.0.2.1", "10.0.0.255", "0.0.0.0"),
                           ("192.0.2.300", "01.2.3.4", "1.2.3", " 1.2.3.4", "1.2.3.4\n",
                            "1.2.3.٤", "\\# 4 c0000201", "1.2.3.4.")))
    if kind == "AAAA":
        return draw(mostly(("2001:db8::1", "::1", "::ffff:192.0.2.1"),
                           ("2001:db8::g", "1.2.3.4", " ::1", "1::2::3")))
    if kind in ("NS", "CNAME", "PTR"):
        return draw(TARGETS.map(lambda t: t if draw(st.booleans()) else f" {t} "))
    if kind == "MX":
        return f"{draw(NUMBERS)} {draw(TARGETS)}"
    if kind == "SRV":
        return f"{draw(NUMBERS)} {draw(NUMBERS)} {draw(NUMBERS)} {draw(TARGETS)}"
    if kind == "SOA":
        numbers = " ".join(draw(NUMBERS) for _ in range(draw(st.sampled_from((5, 5, 4, 6)))))
        return f"{draw(TARGETS)} {draw(TARGETS)} {numbers}"
    return draw(mostly(('"text"', "bare", "\\# 2 abcd"), ('"open', "a;b", "")))


TYPES = mostly(("A", "A", "A", "AAAA", "NS", "CNAME", "MX", "SOA", "SRV", "PTR", "TXT",
                "a", "Mx", "TYPE1"),
               ("TYPE65280", "BOGUS", "ANY", "OPT", " A", "ns ", ""))
TTLS = st.sampled_from((300, 0, 3600, MAX_TTL, MAX_TTL + 1, -1))


@st.composite
def rows(draw: st.DrawFn) -> list[RecordRow]:
    """A zone's apex records, then rows of the zone (or beside it) of every kind."""
    found = []
    for _ in range(draw(st.integers(1, 2))):
        zone = draw(ZONES)
        apex = zone.lower() if zone.endswith(".") else zone.lower() + "."
        if draw(st.integers(0, 9)):
            found.append(RecordRow(zone, apex, "SOA", 3600,
                                   f"ns1.{apex} h.{apex} 1 7200 3600 1209600 300"))
            found.append(RecordRow(zone, apex, "NS", 3600, f"ns1.{apex}"))
        for _ in range(draw(st.integers(0, 12))):
            if draw(st.integers(0, 7)):
                owner = draw(RELATIVE) + draw(st.sampled_from((zone, apex, apex.upper())))
            else:
                owner = draw(OTHER_OWNERS)
            rtype = draw(TYPES)
            found.append(RecordRow(zone, owner, rtype, draw(TTLS), draw(rdata_for(rtype))))
    return found


Outcome = tuple[list[str], list[tuple[object, ...]] | str]


def built(records: list[RecordRow], *, general: bool) -> Outcome:
    """Each row's refusal (empty when added), then the frozen zones or the refusal."""
    builder = Builder()
    refusals = []
    for row in records:
        add = builder.add_fields_general if general else builder.add_fields
        try:
            add(row.zone, row.owner, row.rtype, row.ttl, row.rdata)
        except ZoneError as exc:
            refusals.append(str(exc))
        else:
            refusals.append("")
    try:
        zones, count = builder.finish()
    except ZoneError as exc:
        return refusals, str(exc)
    return refusals, [(count,), *(_fields(zone) for zone in zones)]


def _fields(zone: ServedZone) -> tuple[object, ...]:
    return (zone.origin, zone.apex, list(zone.nodes.items()), zone.empty_nonterminals,
            zone.cuts, zone.dnames, zone.soa, zone.negative_ttl,
            sorted(zone.children.items()), zone.wildcards, zone.record_count)


@settings(max_examples=scaled(1.0))
@given(rows())
def test_rows_build_the_same_zones_the_short_way_and_the_long_way(
    records: list[RecordRow],
) -> None:
    assert built(records, general=False) == built(records, general=True)


@settings(max_examples=scaled(1.0))
@given(rows())
def test_an_index_from_rows_is_the_one_the_long_way_builds(records: list[RecordRow]) -> None:
    """``ZoneIndex.from_records`` (the short way) refuses exactly what the long way
    refuses first, and otherwise serves the same zones."""
    reference = Builder()
    try:
        for row in records:
            reference.add_fields_general(row.zone, row.owner, row.rtype, row.ttl, row.rdata)
        expected: object = [_fields(zone) for zone in reference.finish()[0]]
    except ZoneError as exc:
        expected = (exc.zone, exc.owner, exc.reason)
    try:
        got: object = [_fields(zone) for zone in ZoneIndex.from_records(records).served()]
    except ZoneError as exc:
        got = (exc.zone, exc.owner, exc.reason)
    assert got == expected


@settings(max_examples=scaled(1.0))
@given(st.sampled_from(("A", "NS", "CNAME", "PTR", "MX", "SOA", "SRV", "AAAA", "TXT")).flatmap(
    lambda rtype: st.tuples(st.just(rtype), st.one_of(rdata_for(rtype), HOSTILE))))
def test_rdata_the_short_way_reads_is_what_dnspython_reads(case: tuple[str, str]) -> None:
    rtype, text = case
    code = {"A": 1, "NS": 2, "CNAME": 5, "PTR": 12, "MX": 15, "SOA": 6, "SRV": 33,
            "AAAA": 28, "TXT": 16}[rtype]
    short = master.row_rdata(code, text)
    if short is not None:
        assert rdata_wire("z.", "o.", code, text) == short


def test_the_rows_of_a_large_zone_take_the_short_way() -> None:
    """A plain zone's common rows reach the long way only to learn each type once."""
    builder = Builder()
    general = builder.add_fields_general
    long_way: list[str] = []

    def counted(zone: str, owner: str, rtype: str, ttl: int, rdata: str) -> None:
        long_way.append(owner)
        general(zone, owner, rtype, ttl, rdata)

    builder.add_fields_general = counted  # type: ignore[method-assign]
    kinds = [("SOA", "ns1.example.com. h.example.com. 1 2 3 4 5"), ("NS", "ns1.example.com."),
             ("A", "192.0.2.7"), ("MX", "10 mail.example.net."), ("CNAME", "t.example.com."),
             ("SRV", "0 5 5060 sip.example.com.")]
    for number in range(20):
        rtype, rdata = kinds[number % len(kinds)]
        owner = "Example.com." if rtype in ("SOA", "NS") else f"h{number}.EXAMPLE.com."
        builder.add_fields("example.com.", owner, rtype, 300, rdata)
    assert len(long_way) == len(kinds)

"""Rows take a short way into the zone index (``Builder.add_fields``: plain owners inside
their zone, rdata ``row_rdata`` reads); the long way (``add_fields_general``: every name
and rdata through ``wire.from_text`` and dnspython) is the reference. Whatever the rows,
hostile ones included, both ways must give the same zones, byte for byte, or the same
refusal, word for word."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.property.drawn_rows import HOSTILE, rdata_for, rows
from valis_core.dns import wire
from valis_core.dns.wire import master
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex, build
from valis_core.dns.zone.build import Builder, rdata_wire

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


@settings(max_examples=scaled(0.5))
@given(rows())
def test_rows_build_the_same_zones_whatever_zone_names_builders_read_before(
    records: list[RecordRow],
) -> None:
    """The zone names remembered across builders (``build.zone_shape``) change nothing:
    a builder that finds none remembered, and one that finds every one, give the same
    zones or the same refusals."""
    build._ZONE_SHAPES.clear()
    first = built(records, general=False)
    assert {row.zone for row in records if _is_name(row.zone)} <= build._ZONE_SHAPES.keys()
    assert built(records, general=False) == first


def _is_name(zone: str) -> bool:
    try:
        wire.from_text(zone if zone.endswith(".") else zone + ".")
    except wire.BadName:
        return False
    return True


def test_the_zone_names_remembered_across_builders_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(build, "ZONES_REMEMBERED", 8)
    build._ZONE_SHAPES.clear()
    for n in range(50):
        builder = Builder()
        builder.add_fields(f"z{n}.example.", f"z{n}.example.", "NS", 300, "ns.example.")
        assert 0 < len(build._ZONE_SHAPES) <= 8


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


KINDS = [("SOA", "ns1.example.com. h.example.com. 1 2 3 4 5"), ("NS", "ns1.example.com."),
         ("A", "192.0.2.7"), ("MX", "10 mail.example.net."), ("CNAME", "t.example.com."),
         ("SRV", "0 5 5060 sip.example.com.")]


def long_way_taken(rows: int) -> list[str]:
    """The owners a fresh builder sends the long way among ``rows`` rows of ``KINDS``."""
    builder = Builder()
    general = builder.add_fields_general
    long_way: list[str] = []

    def counted(zone: str, owner: str, rtype: str, ttl: int, rdata: str) -> None:
        long_way.append(owner)
        general(zone, owner, rtype, ttl, rdata)

    builder.add_fields_general = counted  # type: ignore[method-assign]
    for number in range(rows):
        rtype, rdata = KINDS[number % len(KINDS)]
        owner = "Example.com." if rtype in ("SOA", "NS") else f"h{number}.EXAMPLE.com."
        builder.add_fields("example.com.", owner, rtype, 300, rdata)
    return long_way


def test_the_rows_of_a_large_zone_take_the_short_way() -> None:
    """A plain zone's common rows reach the long way only to learn each type once."""
    assert len(long_way_taken(20)) <= len(KINDS)


def test_a_builder_knows_the_types_another_learnt_and_takes_the_short_way_at_once() -> None:
    """The types one builder learnt, every later builder knows: a patch's builder (a
    few rows, a type each) takes the short way from its first row."""
    long_way_taken(len(KINDS))
    assert long_way_taken(len(KINDS)) == []

"""A bulk load's rows take the compiled way into the zones' builders (``dns.zone.rows``,
``_rows.c``: lines of COPY's text format added in C) when it is built; the Python way
(``zone_load.copy_fields``, then ``Builder.add_fields``) is the reference. Whatever the
lines hold (rows of every kind, what COPY escapes, and lines PostgreSQL never sends:
NULLs, stray escapes, fields too many or too few, bytes that are not UTF-8), both ways
give the same zones byte for byte, the same refusals word for word, or the same error,
raised at the same line. The compiled tree of a zone's owners and the compiled shards
of an owner table are the Python ones, order and all."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import skip_here_fail_in_ci
from tests.hypothesis_profiles import scaled
from tests.property.drawn_rows import rows, servable_rows
from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import RR_HEAD, RecordRow, merge_node
from valis_core.dns.zone import ServedZone
from valis_core.dns.zone import rows as compiled_rows
from valis_core.dns.zone import tree as zone_tree
from valis_core.dns.zone.owners import OwnerMap
from valis_core.operator_state.connection import OperatorStateError
from valis_core.operator_state.zone_load import ZoneRows

_ESCAPES = {"\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\v": "\\v"}


def copy_field(text: str) -> str:
    """A field as PostgreSQL's ``COPY ... TO`` writes it in text format."""
    return "".join(_ESCAPES.get(char, char) for char in text)


def copy_line(row: RecordRow) -> bytes:
    fields = (row.zone, row.owner, row.rtype, str(row.ttl), row.rdata)
    return ("\t".join(copy_field(field) for field in fields) + "\n").encode()


def require_rows_compiled() -> None:
    if not compiled_rows.COMPILED:
        skip_here_fail_in_ci(
            "this test needs the compiled row reader (valis_core.dns.zone._rows), not built "
            "in this tree: `make venv` (or `pip install -e .`) builds it")


BROKEN_FIELDS = st.sampled_from(
    ("\\N", "", "\\", "a\\", "\\x41", "\\101", "\\N\\N", "1h", "٣", " 7", "+7", "-0", "\\\\N"))


@st.composite
def broken(draw: st.DrawFn, line: bytes) -> bytes:
    """``line`` broken as PostgreSQL never breaks it."""
    body = line[:-1]
    fields = body.split(b"\t")
    how = draw(st.integers(0, 6))
    if how == 0:
        fields[draw(st.integers(0, len(fields) - 1))] = draw(BROKEN_FIELDS).encode()
    elif how == 1:
        return body
    elif how == 2:
        fields.insert(draw(st.integers(0, len(fields))), draw(BROKEN_FIELDS).encode())
    elif how == 3:
        del fields[draw(st.integers(0, len(fields) - 1))]
    elif how == 4:
        at = draw(st.integers(0, len(body)))
        return body[:at] + draw(st.sampled_from((b"\xff", b"\xc3", b"\n", b"\r", b"\x00"))) + (
            body[at:] + b"\n")
    elif how == 5:
        fields[0] = draw(st.sampled_from((b"other.example.", b"", b"EXAMPLE.COM.")))
    else:
        return draw(st.binary(max_size=40))
    return b"\t".join(fields) + b"\n"


@st.composite
def copy_lines(draw: st.DrawFn) -> tuple[list[str], list[bytes]]:
    """The zones of a load (those of the rows, and sometimes one without a row) and its
    lines, a few of them broken."""
    drawn = [row for _ in range(draw(st.integers(1, 2))) for row in draw(servable_rows())]
    if draw(st.booleans()):
        drawn += draw(rows())
    zones = list(dict.fromkeys(row.zone for row in drawn))
    if draw(st.booleans()):
        zones.append("empty.example.")
    lines = [copy_line(row) for row in drawn]
    if draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] = draw(broken(lines[at]))
    return draw(st.permutations(zones)), lines


def _fields(zone: ServedZone) -> tuple[object, ...]:
    return (zone.origin, zone.apex, list(zone.nodes.items()), zone.empty_nonterminals,
            zone.cuts, zone.dnames, zone.soa, zone.negative_ttl,
            list(zone.children.items()), zone.wildcards, zone.record_count)


def loaded(zones: list[str], lines: list[bytes], *, compiled: bool) -> object:
    """What a load of ``lines`` makes of ``zones``: the first error and its line, or
    the zones built and refused and the zones not written plainly."""
    load = ZoneRows(zones, "utf-8", compiled=compiled)
    assert load.compiled == compiled
    for number, line in enumerate(lines):
        if "zone" not in load.columns:  # a load of one zone reads its lines without it
            line = line.split(b"\t", 1)[-1]  # noqa: PLW2901 - the line as it would come
        try:
            load.add_line(line)
        except OperatorStateError as exc:
            return number, str(exc)
    built, refused = load.finish()
    return (load.records,
            {zone: [_fields(served) for served in index.served()] for zone, index in built.items()},
            {zone: str(exc) for zone, exc in refused.items()}, sorted(load.unplain))


@settings(max_examples=scaled(1.0))
@given(copy_lines())
def test_lines_build_the_same_zones_the_compiled_way_and_the_python_way(
    drawn: tuple[list[str], list[bytes]],
) -> None:
    require_rows_compiled()
    zones, lines = drawn
    assert loaded(zones, lines, compiled=True) == loaded(zones, lines, compiled=False)


GOOD = b"example.com.\twww.example.com.\tA\t300\t192.0.2.1\n"
BROKEN = {
    b"example.com.\twww.example.com.\tA\t\\N\t192.0.2.1\n": "its ttl is NULL",
    b"example.com.\twww.example.com.\tA\t300\n": "it has 4 fields, not 5",
    GOOD[:-1]: "it does not end with a newline",
    b"example.com.\twww.example.com.\tA\t3\xff0\t192.0.2.1\n": "it is not utf-8 text",
    b"example.com.\twww.example.com.\tA\t1h\t192.0.2.1\n": "its TTL '1h' is not a number",
    b"other.example.\twww.example.com.\tA\t300\t192.0.2.1\n":
        "its zone 'other.example.' is not one of those asked for",
}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("line", "why"), BROKEN.items())
def test_a_broken_line_is_an_error_naming_what_is_wrong(
    compiled: bool, line: bytes, why: str
) -> None:
    if compiled:
        require_rows_compiled()
    load = ZoneRows(["example.com.", "example.net."], "utf-8", compiled=compiled)
    load.add_line(GOOD)
    with pytest.raises(OperatorStateError) as raised:
        load.add_line(line)
    assert str(raised.value).startswith("operator state: a row of the records table")
    assert why in str(raised.value)


def test_one_zones_lines_leave_the_zone_out() -> None:
    zone = "example.com."
    load = ZoneRows([zone], "utf-8")
    assert load.columns == ("owner", "rtype", "ttl", "rdata")
    load.add_line(b"example.com.\tSOA\t300\tns.example.com. h.example.com. 1 2 3 4 5\n")
    load.add_line(b"example.com.\tNS\t300\tns.example.com.\n")
    assert load.reader is None or load.reader.line(b"www.example.com.\tA\t300\t192.0.2.1\n")
    with pytest.raises(OperatorStateError, match="it has 5 fields, not 4"):
        load.add_line(b"example.com.\twww.example.com.\tA\t300\t192.0.2.1\n")


def test_the_plain_lines_of_a_zone_take_the_compiled_way() -> None:
    """Only a zone's first line, and the lines the short way does not read, go the
    Python way."""
    require_rows_compiled()
    zone = "example.com."
    load = ZoneRows([zone, "example.net."], "utf-8")
    lines = [copy_line(RecordRow(zone, zone, "SOA", 3600,
                                 "ns1.example.com. h.example.com. 1 2 3 4 5"))]
    lines += [copy_line(RecordRow(zone, f"h{n}.Example.com.", rtype, 300, rdata))
              for n in range(40)
              for rtype, rdata in (("A", f"10.0.0.{n}"), ("mx", "10 mail.example.net."),
                                   ("NS", "ns.example.net."), ("SRV", "0 5 5060 sip.example."),
                                   ("CNAME", "t.example."), ("PTR", "p.example."))]
    lines.append(copy_line(RecordRow(zone, "t.example.com.", "TXT", 300, '"text"')))
    load.add_line(lines[0])  # the zone's first line makes its parts, and arms the reader
    assert load.reader is not None
    taken = [load.reader.line(line) for line in lines[1:]]
    assert taken == [True] * (len(lines) - 2) + [False]


OWNER_LABELS = st.sampled_from((b"\x01*", b"\x01a", b"\x01b", b"\x03www", b"\x02ns"))


@st.composite
def owner_tables(draw: st.DrawFn) -> tuple[bytes, dict[bytes, bytes]]:
    apex = draw(st.sampled_from((b"\x07example\x03com\x00", b"\x00")))
    owners = draw(st.lists(st.lists(OWNER_LABELS, max_size=4), max_size=30))
    nodes = dict.fromkeys([b"".join(labels) + apex for labels in owners], b"x")
    if draw(st.booleans()):
        nodes[apex] = b"apex"
    return apex, nodes


@settings(max_examples=scaled(1.0))
@given(owner_tables())
def test_the_compiled_tree_is_the_python_tree(table: tuple[bytes, dict[bytes, bytes]]) -> None:
    require_rows_compiled()
    from valis_core.dns.zone._rows import tree

    apex, nodes = table
    empty, children, wildcards = tree(apex, nodes)
    want_empty, want_children, want_wildcards = zone_tree.tree(apex, nodes)
    assert (list(empty), list(children.items()), wildcards) == (
        list(want_empty), list(want_children.items()), want_wildcards)


def test_the_compiled_tree_refuses_an_owner_outside_the_apex() -> None:
    require_rows_compiled()
    from valis_core.dns.zone._rows import tree

    outside = wire.from_text("www.example.net.")
    for nodes in ({outside: b"x"}, {b"\x05short": b"x"}):
        with pytest.raises(ValueError, match="not at or below the apex"):
            tree(wire.from_text("example.com."), nodes)


@st.composite
def owner_records(draw: st.DrawFn) -> bytes:
    """An owner's records as the builder joins them: few types and rdatas, so the same
    record is often stated twice and a type's records often disagree on their TTL."""
    records = draw(st.lists(
        st.tuples(st.sampled_from((1, 2, 5, 6, 16, 28, 46, 65280)), st.integers(0, 3),
                  st.sampled_from((b"", b"a", b"ab", b"b", b"\x00" * 300))),
        max_size=40))
    return b"".join(RR_HEAD.pack(rtype, 1, ttl, len(rdata)) + rdata
                    for rtype, ttl, rdata in records)


@settings(max_examples=scaled(1.0))
@given(owner_records(), st.booleans())
def test_the_compiled_merge_is_the_python_merge(held: bytes, joined: bool) -> None:
    """``build.freeze_node`` merges an owner of several records in C: the same encoding
    (types in order, each record once, each type at its lowest TTL) and the same counts."""
    require_rows_compiled()
    from valis_core.dns.zone._rows import merge_node as compiled

    blob, counts = compiled(bytearray(held) if joined else held)
    want_blob, want_counts = merge_node(held)
    assert (blob, list(counts.items())) == (want_blob, list(want_counts.items()))


def test_the_compiled_merge_refuses_a_truncated_encoding() -> None:
    require_rows_compiled()
    from valis_core.dns.zone._rows import merge_node as compiled

    whole = RR_HEAD.pack(1, 1, 60, 4) + b"\xc0\x00\x02\x01"
    for cut in (whole[:9], whole[:13], whole + whole[:5]):
        with pytest.raises(ValueError, match="run past the end"):
            compiled(cut)


@settings(max_examples=scaled(0.3))
@given(st.integers(1, 5000), st.randoms(use_true_random=False))
def test_the_compiled_shards_are_the_python_shards(size: int, chance: random.Random) -> None:
    """``OwnerMap`` shards a dict in C (past ``SHARD_OWNERS`` keys, more than one shard)."""
    require_rows_compiled()
    held = {chance.randbytes(chance.randint(0, 12)): chance.randbytes(2) for _ in range(size)}
    table = OwnerMap(held)
    mask = table.mask
    expected: list[dict[bytes, bytes]] = [{} for _ in range(mask + 1)]
    for key, value in held.items():
        expected[hash(key) & mask][key] = value
    assert [list(shard.items()) for shard in table.shards] == [
        list(shard.items()) for shard in expected]


def test_the_compiled_loader_refuses_misuse_without_crashing() -> None:
    require_rows_compiled()
    from valis_core.dns.zone._rows import Loader

    with pytest.raises(RuntimeError, match="not initialised"):
        Loader.__new__(Loader).line(b"a\tb\tA\t1\t192.0.2.1\n")
    with pytest.raises(ValueError, match="position"):
        Loader({b"a": 5}).line(b"a\tb\tA\t1\t192.0.2.1\n")
    with pytest.raises(ValueError, match="of one zone"):
        Loader({b"a": 0, b"b": 1}, zone_column=False)
    with pytest.raises(RuntimeError, match="libpq"):
        Loader({b"a": 0}).read(0, 10)
    with pytest.raises(OSError, match="not loaded"):
        compiled_rows.use_libpq("/nonexistent/libpq.so.5")

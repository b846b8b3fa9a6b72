"""The master-file reader decodes plain lines itself and hands the rest to dnspython; the
records it yields, and the line it blames when a file does not parse, must be exactly
those of dnspython's reader reading the whole file alone. A line the plain path takes
must read the same in dnspython from the same state, hostile lines included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.master_lines import (
    ONE_LINES,
    master_files,
    reading_states,
)
from valis_core.dns import wire
from valis_core.dns.wire import _reading, master, master_general
from valis_core.dns.wire.records import ZoneError
from valis_core.dns.zone.build import rdata_wire

Record = tuple[bytes, int, int, bytes]


def read(text: str, origin: str | None, *, whole: bool) -> list[Record] | str:
    records: list[Record] = []
    emit = records.append
    try:
        if whole:
            lines = text.split("\n")
            state = _reading.ReadingState(wire.from_text(origin) if origin is not None else None)
            master._read_with_dnspython(lines, 1, state, emit)
        else:
            master.read_master(text, origin, emit)
    except _reading.MasterFileError as exc:
        opened = _unclosed_at(text) if whole else None
        if opened is not None and exc.line >= opened:
            return f"error at line {opened}"  # blamed where it opened, not at the end
        return f"error at {exc.where}"
    return records


def _unclosed_at(text: str) -> int | None:
    """The line opening parentheses the file never closes, if it ends inside them."""
    depth = 0
    opened = 0
    for number, line in enumerate(text.split("\n"), 1):
        if depth <= 0:
            depth = 0
            opened = number
        depth += _reading.parenthesis_depth(line.removesuffix("\r"))
    return opened if depth > 0 else None


@settings(deadline=None)
@given(master_files(), st.sampled_from(["example.com.", None]))
def test_plain_lines_read_exactly_as_dnspython_reads_them(text: str, origin: str | None) -> None:
    assert read(text, origin, whole=False) == read(text, origin, whole=True)


# -- one line, from any state --------------------------------------------------------------

def _values(state: _reading.ReadingState) -> tuple[object, ...]:
    return tuple(getattr(state, slot) for slot in _reading.ReadingState.__slots__)


def _copy(state: _reading.ReadingState) -> _reading.ReadingState:
    copied = _reading.ReadingState(state.origin)
    for slot in _reading.ReadingState.__slots__:
        setattr(copied, slot, getattr(state, slot))
    return copied


@settings(deadline=None)
@given(reading_states(), ONE_LINES)
def test_a_line_the_plain_path_takes_reads_the_same_in_dnspython(
    state: _reading.ReadingState, line: str
) -> None:
    """Whatever the plain path makes of a line (a record, or nothing), dnspython's reader
    makes of it too, from the same state and leaving the same state; where the plain
    path declines, the state is untouched."""
    if master._DOUBTFUL.search(line):
        return  # such a line never reaches the plain path
    plain, general = _copy(state), _copy(state)
    taken = master.plain_line(line, plain)
    if taken is None:
        assert _values(plain) == _values(state)
        return
    records: list[Record] = []
    master_general.read_general([line], 1, general, records.append)  # raises if it refuses
    assert records == ([taken] if taken else [])
    assert _values(plain) == _values(general)


def test_the_plain_path_takes_the_lines_big_zones_are_made_of() -> None:
    state = _reading.ReadingState(wire.from_text("example.com."))
    taken = [
        master.plain_line(line, state)
        for line in (
            "$TTL 3600",
            "$ORIGIN example.com.",
            "@ SOA ns1 hostmaster 1 7200 3600 1209600 300",
            "@ IN NS ns1",
            "www 300 IN A 192.0.2.1",
            "\tAAAA 2001:db8::1 ; comment",
            "mail MX 10 mail.example.net.",
            "_sip._tcp SRV 0 5 5060 sip",
            "alias CNAME www",
            "1.2 PTR host.example.com.",
            'www TXT "v=spf1 ip4:192.0.2.0/24 -all" "two"',
            '\tIN TXT ""',
        )
    ]
    assert None not in taken
    assert taken[4] == (b"\x03www\x07example\x03com\x00", 1, 300, bytes([192, 0, 2, 1]))
    assert taken[10] == (taken[4][0], 16, 3600, b"\x1cv=spf1 ip4:192.0.2.0/24 -all\x03two")
    assert taken[11] == (taken[4][0], 16, 3600, b"\x00")


def _read_without_dnspython(text: str) -> tuple[list[Record], list[int]]:
    """The records and lines of ``text`` (origin example.com.), failing if any line went
    to dnspython."""
    calls = []
    original = master._read_with_dnspython

    def spy(*args: object) -> None:
        calls.append(args)

    master._read_with_dnspython = spy  # type: ignore[assignment]
    try:
        records: list[Record] = []
        positions: list[int] = []
        master.read_master(text, "example.com.", records.append, positions=positions)
    finally:
        master._read_with_dnspython = original
    assert not calls
    return records, positions


def test_a_plain_zone_is_read_without_dnspython() -> None:
    text = "".join(f"host{i} 300 IN A 192.0.2.{i % 256}\n" for i in range(50))
    text = "$ORIGIN example.com.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\n" + text
    records, _ = _read_without_dnspython(text)
    assert len(records) == 52
    assert records[2] == (b"\x05host0\x07example\x03com\x00", 1, 300, bytes([192, 0, 2, 0]))


def test_an_soa_held_across_lines_by_parentheses_is_read_without_dnspython() -> None:
    """As most zone files write it: each timer on a line of its own with a comment."""
    text = (
        "$TTL 3600\n@ IN SOA ns1.example.com. hostmaster.example.com. (\n"
        "        2026120501 ; serial\n        7200       ; refresh\n"
        "        900        ; retry\n        1209600    ; expire\n"
        "        300 )      ; negative answers\n@ NS ns1\nns1 A 192.0.2.1\n"
    )
    records, positions = _read_without_dnspython(text)
    assert positions == [2, 8, 9]
    assert records == read(text, "example.com.", whole=True)


@pytest.mark.parametrize(
    "text",
    ["www\r0\n", "\r0", "a A 192.0.2.1\rb\n", "x\ry\rz\nw", "owner\nother A 192.0.2.1\nlast"],
)
def test_a_lone_carriage_return_or_a_lone_owner_never_breaks_the_reader(text: str) -> None:
    problems: list[_reading.MasterFileError] = []
    positions: list[int] = []
    records: list[tuple[bytes, int, int, bytes]] = []
    master.read_master(text, "example.com.", records.append, problems=problems,
                       positions=positions)
    lines = text.count("\n") + 1
    assert problems
    assert all(1 <= place <= lines for place in [p.line for p in problems] + positions)


def test_an_owner_alone_on_its_line_is_named_as_such() -> None:
    problems: list[_reading.MasterFileError] = []
    records: list[tuple[bytes, int, int, bytes]] = []
    master.read_master("www\nok 60 A 192.0.2.1\n", "example.com.", records.append,
                       problems=problems)
    assert [(p.line, p.reason) for p in problems] == [
        (1, "an owner and nothing else: a record needs its type and data after the owner")
    ]


def test_an_error_names_the_line_the_record_starts_on() -> None:
    text = (
        "$TTL 60\n@ SOA ns1 h (\n 1 2 3 4 5 )\nok A 192.0.2.1\nbad A 192.0.2.300\n"
        "ok2 A 192.0.2.2\n"
    )
    with pytest.raises(_reading.MasterFileError) as caught:
        master.read_master(text, "example.com.", lambda record: None)
    assert caught.value.where == "line 5"


LOC = 29
OUT_OF_RANGE = (
    "@ LOC 0 0 0 N 0 0 0 E 42849673 0 0 0",  # altitude beyond 32 bits
    "@ LOC 0 0 0 N 0 0 0 E -100001 0 0 0",  # and below its floor
)


def test_a_value_dnspythons_text_takes_but_its_wire_field_cannot_hold_is_a_bad_record() -> None:
    """dnspython reads a LOC altitude of any size and fails only when it writes the field
    (``struct.error``, not one of its own errors): the file's reading, collecting or not,
    and a row's, give the bad record its line and reason, never an exception of their
    own."""
    for line in OUT_OF_RANGE:
        text = f"$TTL 60\n{line}\nok A 192.0.2.1\n"
        problems: list[_reading.MasterFileError] = []
        records: list[tuple[bytes, int, int, bytes]] = []
        master.read_master(text, "example.com.", records.append, problems=problems)
        assert [(p.line, p.reason) for p in problems] == [
            (2, "LOC record: a value is out of the range its wire field holds")]
        assert len(records) == 1  # the line after it is read on
        with pytest.raises(_reading.MasterFileError):
            master.read_master(text, "example.com.", lambda record: None)
        with pytest.raises(ZoneError, match=r"cannot parse LOC rdata .* out of the range"):
            rdata_wire("example.com.", "example.com.", LOC, line.split(" LOC ")[1])

"""The master-file reader decodes plain lines itself and hands the rest to dnspython; the
records it yields, and the line it blames when a file does not parse, must be exactly
those of dnspython's reader reading the whole file alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from valis_core.dns import master, wire

Record = tuple[bytes, int, int, bytes]

def mostly(good: tuple[str, ...], bad: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Valid text nearly always, so whole files get read; a rare bad value, so errors and
    their line numbers get compared too."""
    if not bad:
        return st.sampled_from(good)
    return st.integers(0, 39).flatmap(lambda n: st.sampled_from(bad if n == 0 else good))


OWNERS = mostly(("@", "www", "a.b", "*.w", "mail.example.com.", "x.example.org.", "WWW", ""))
TTLS = mostly(("", "", "300", "0", "1h"), ("2147483648",))
CLASSES = mostly(("", "", "IN", "in"), ("CH",))
RDATA = {
    "A": mostly(("192.0.2.1", "198.51.100.7"), ("192.0.2.300", "1.2.3")),
    "AAAA": mostly(("2001:db8::1", "::1"), ("2001:db8::g",)),
    "NS": mostly(("ns1", "ns1.example.net.", "@"), ("a..b",)),
    "CNAME": mostly(("target", "target.example.net.")),
    "MX": mostly(("10 mail", "5 mail.example.net.", "0 @"), ("70000 mail", "10")),
    "TXT": mostly(('"some text"', "bare", '"a" "b"')),
    "PTR": mostly(("host.example.com.",)),
    "SRV": mostly(("0 5 53 srv",)),
}
DIRECTIVES = mostly(
    ("$TTL 600", "$TTL 1d", "$ORIGIN sub.example.com.", "$ORIGIN rel",
     "$GENERATE 1-3 host$ A 198.51.100.$"),
    ("$INCLUDE other.zone", "$BOGUS"),
)
SOAS = st.sampled_from(
    (
        "@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 300",
        "@ IN SOA ns1 hostmaster (\n  1 ; serial\n  7200 3600 1209600 300 )",
        "@ SOA ns1 hostmaster 1 2 3 4 5",
    )
)
ODD = mostly(("", "; a comment", "   ", "x A ( 192.0.2.7 )", "y TXT ( \"multi\"\n \"line\" )"),
             ("(", "z BOGUS x"))


@st.composite
def record_lines(draw: st.DrawFn) -> str:
    owner = draw(OWNERS)
    rtype = draw(st.sampled_from(sorted(RDATA)))
    fields = [draw(TTLS), draw(CLASSES)]
    if draw(st.booleans()):
        fields.reverse()
    rdata = draw(RDATA[rtype])
    comment = draw(st.sampled_from(["", " ; note", ";x"]))
    spacing = draw(st.sampled_from([" ", "\t", "  "]))
    shown = rtype.lower() if draw(st.booleans()) else rtype
    start = owner if owner else draw(st.sampled_from([" ", "\t"]))
    line = spacing.join(part for part in (start, *fields, shown, rdata) if part)
    if not owner:
        line = start + line.lstrip()
    return line + comment


@st.composite
def master_files(draw: st.DrawFn) -> str:
    lines = draw(
        st.lists(
            st.one_of(record_lines(), record_lines(), record_lines(), DIRECTIVES, SOAS, ODD),
            max_size=14,
        )
    )
    prelude = [draw(mostly(("$ORIGIN example.com.",), ("",))), draw(mostly(("$TTL 3600",), ("",)))]
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return ending.join(prelude + lines) + draw(st.sampled_from(["", ending]))


def read(text: str, origin: str | None, *, whole: bool) -> list[Record] | str:
    records: list[Record] = []

    emit = records.append
    try:
        if whole:
            lines = text.split("\n")
            state = master.ReadingState(wire.from_text(origin) if origin is not None else None)
            master._read_with_dnspython(lines, 1, state, emit)
        else:
            master.read_master(text, origin, emit)
    except master.MasterFileError as exc:
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
        depth += master.parenthesis_depth(line.removesuffix("\r"))
    return opened if depth > 0 else None


@settings(max_examples=200, deadline=None)
@given(master_files(), st.sampled_from(["example.com.", None]))
def test_plain_lines_read_exactly_as_dnspython_reads_them(text: str, origin: str | None) -> None:
    assert read(text, origin, whole=False) == read(text, origin, whole=True)


def test_a_plain_zone_is_read_without_dnspython() -> None:
    text = "".join(f"host{i} 300 IN A 192.0.2.{i % 256}\n" for i in range(50))
    calls = []
    original = master._read_with_dnspython

    def spy(*args: object) -> None:
        calls.append(args)

    master._read_with_dnspython = spy  # type: ignore[assignment]
    try:
        records: list[Record] = []
        master.read_master(text, "example.com.", records.append)
    finally:
        master._read_with_dnspython = original
    assert not calls
    assert len(records) == 50
    assert records[0] == (b"\x05host0\x07example\x03com\x00", 1, 300, bytes([192, 0, 2, 0]))


def test_an_error_names_the_line_the_record_starts_on() -> None:
    text = (
        "$TTL 60\n@ SOA ns1 h (\n 1 2 3 4 5 )\nok A 192.0.2.1\nbad A 192.0.2.300\n"
        "ok2 A 192.0.2.2\n"
    )
    with pytest.raises(master.MasterFileError) as caught:
        master.read_master(text, "example.com.", lambda record: None)
    assert caught.value.where == "line 5"

"""Master-file lines and whole files for the reader's properties: mostly what zones are
made of, some of what breaks them, hostile text among them (``test_master.py`` holds the
plain path to dnspython's reader with them, ``test_master_compiled.py`` the compiled runs
to the plain path)."""

from __future__ import annotations

from hypothesis import strategies as st

from valis_core.dns import wire
from valis_core.dns.wire import _reading


def mostly(good: tuple[str, ...], bad: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Valid text nearly always, so whole files get read; a rare bad value, so errors and
    their line numbers get compared too."""
    if not bad:
        return st.sampled_from(good)
    return st.integers(0, 39).flatmap(lambda n: st.sampled_from(bad if n == 0 else good))


LONG_LABEL = "l" * 63
OWNERS = mostly(
    ("@", "www", "a.b", "*.w", "mail.example.com.", "x.example.org.", "WWW", ""),
    ("a..b", ".", "..", "w\\.x", "w\\065", '"q"', "(", "l" * 64, f"{LONG_LABEL}.{LONG_LABEL}.x"
     f".{LONG_LABEL}.{LONG_LABEL}", "$w", "é", "a;b", "1", "in", "A"),
)
TTLS = mostly(
    ("", "", "300", "0", "1h"),
    ("2147483647", "2147483648", "4294967295", "4294967296", "0300", "1x", "-1", "\\049"),
)
CLASSES = mostly(("", "", "IN", "in"), ("CH", "CLASS1", "iN", "IN IN"))
RDATA = {
    "A": mostly(
        ("192.0.2.1", "198.51.100.7"),
        ("192.0.2.300", "1.2.3", "01.2.3.4", "1.2.3.4.5", "1.2.3.", "1..3.4", "+1.2.3.4",
         "1.2.3.4 5", "1.2.3.٤", "0x1.2.3.4", "\\049.2.3.4", "( 192.0.2.1 )", "\\# 4 c0000201"),
    ),
    "AAAA": mostly(("2001:db8::1", "::1"), ("2001:db8::g", "::ffff:192.0.2.1", "1.2.3.4")),
    "NS": mostly(("ns1", "ns1.example.net.", "@"), ("a..b", "ns\\.1", "", "ns1 ns2", ".")),
    "CNAME": mostly(("target", "target.example.net."), ("t\\032x", '"t"')),
    "MX": mostly(
        ("10 mail", "5 mail.example.net.", "0 @"),
        ("70000 mail", "10", "65535 m", "65536 m", "010 m", "x mail", "10 a..b"),
    ),
    "TXT": mostly(
        ('"some text"', "bare", '"a" "b"', '"v=spf1 ip4:192.0.2.0/24 -all"', '""', 'w "q" w',
         '"\ttab"', f'"{"x" * 255}"'),
        ('"open', '"a\\"b"', "a;b", '"a;b"', '"a""b"', 'a"b"', '"a"b', f'"{"x" * 256}"',
         "x" * 256, '"é"', '"("'),
    ),
    "PTR": mostly(("host.example.com.",), ("h\\.x.",)),
    "SRV": mostly(("0 5 53 srv",), ("0 5 70000 srv", "0 5 srv", "1 2 3 4 5", "0 5 53 .")),
    "SOA": mostly(
        ("ns1 hostmaster 1 7200 3600 1209600 300", "ns1. h. 4294967295 1 2 3 4"),
        ("ns1 h 4294967296 1 2 3 4", "ns1 h 1 1h 2 3 4", "ns1 h 1 2 3 4", "ns1 h 1 2 3 4 5 6",
         "ns1 h 1 2 3 4 4294967296"),
    ),
    "TYPE1": mostly(("192.0.2.9", "\\# 4 c0000209")),
}
DIRECTIVES = mostly(
    ("$TTL 600", "$TTL 1d", "$ORIGIN sub.example.com.", "$ORIGIN rel",
     "$GENERATE 1-3 host$ A 198.51.100.$"),
    ("$INCLUDE other.zone", "$BOGUS", "$TTL", "$TTL 4294967296", "$ttl 60 ; c", "$TTL 1 2",
     "$ORIGIN @", "$ORIGIN .", "$ORIGIN a..b.", "$origin Mixed.Case.", " $TTL 60",
     "$ORIGIN", "$TTL \\049"),
)
SOAS = st.sampled_from(
    (
        "@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 300",
        "@ IN SOA ns1 hostmaster (\n  1 ; serial\n  7200 3600 1209600 300 )",
        "@ SOA ns1 hostmaster 1 2 3 4 5",
    )
)
ODD = mostly(
    ("", "; a comment", "   ", "x A ( 192.0.2.7 )", "y TXT ( \"multi\"\n \"line\" )"),
    ("(", "z BOGUS x", ")", "\t;", "w\x0bA 192.0.2.1", "w A 192.0.2.1\x0c",
     "w A 192.0.2.1 \t ", "g TYPE65280 \\# 2 abcd", 'q A "192.0.2.1"'),
)
SPACES = st.sampled_from([" ", "\t", "  ", " \t"])


@st.composite
def record_lines(draw: st.DrawFn) -> str:
    owner = draw(OWNERS)
    rtype = draw(st.sampled_from(sorted(RDATA)))
    fields = [draw(TTLS), draw(CLASSES)]
    if draw(st.booleans()):
        fields.reverse()
    rdata = draw(RDATA[rtype])
    comment = draw(st.sampled_from(["", " ; note", ";x", ' ; "quoted" (paren)']))
    spacing = draw(SPACES)
    shown = draw(st.sampled_from([rtype, rtype.lower(), rtype.capitalize()]))
    start = owner if owner else draw(st.sampled_from([" ", "\t"]))
    line = spacing.join(part for part in (start, *fields, shown, rdata) if part)
    if not owner:
        line = start + line.lstrip()
    return line + comment


@st.composite
def grouped_lines(draw: st.DrawFn) -> str:
    """A record held across lines by parentheses, as an SOA is usually written: opened
    before any of its fields (the owner too, rarely), closed after any, with comments and
    blanks on the lines between, and now and then nested, unbalanced or a paren hugging a
    token (the plain path reads such a record joined; dnspython's tokenizer is the rule)."""
    line = draw(st.one_of(record_lines(), SOAS))
    lead = line[: len(line) - len(line.lstrip())]
    tokens = line.replace("\n", " ").split()
    opened = draw(st.integers(0, len(tokens)))
    closed = draw(st.integers(opened, len(tokens)))
    words: list[str] = [*tokens[:opened], "("]
    for token in tokens[opened:closed]:
        words.append(token)
        words.append(draw(st.sampled_from([" ", " ", "\n  ", " ; a comment\n\t", "\n"])))
    words += [")", *tokens[closed:]]
    words.insert(
        draw(st.integers(0, len(words))),
        draw(mostly(("",), ("(", ")", "( )", "((", "\n)", ";)\n"))),
    )
    hug = draw(st.booleans())
    text = lead + "".join(
        word if word.isspace() or word.startswith((" ", "\n")) else
        (word if hug and word in "()" else f" {word} ") for word in words
    )
    return text if lead else text.lstrip(" ")


HOSTILE_TEXT = st.text(alphabet=' \t;()"\\$@.*-_0123456789aAinINsSoOxX#:é\x0b', max_size=30)
"""Lines of characters that matter to the format, in any order. (Not a lone carriage
return: dnspython ends a line there, an editor does not, so the two count lines
differently after one; ``test_a_lone_carriage_return_or_a_lone_owner_never_breaks_the_reader``.)"""


@st.composite
def master_files(draw: st.DrawFn) -> str:
    lines = draw(
        st.lists(
            st.one_of(
                record_lines(), record_lines(), record_lines(), DIRECTIVES, SOAS, ODD,
                HOSTILE_TEXT, grouped_lines(),
            ),
            max_size=14,
        )
    )
    prelude = [draw(mostly(("$ORIGIN example.com.",), ("",))), draw(mostly(("$TTL 3600",), ("",)))]
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return ending.join(prelude + lines) + draw(st.sampled_from(["", ending]))


ORIGINS = st.sampled_from([None, "example.com.", "Sub.Example.COM.", "."])
LAST_OWNERS = st.sampled_from([None, "prev.example.com.", "PREV.example.com."])


@st.composite
def reading_states(draw: st.DrawFn) -> _reading.ReadingState:
    origin = draw(ORIGINS)
    state = _reading.ReadingState(wire.from_text(origin) if origin is not None else None)
    last = draw(LAST_OWNERS)
    state.last_owner = wire.from_text(last) if last is not None else None
    state.last_ttl = draw(st.sampled_from([0, 60, 2**31]))
    state.last_ttl_known = draw(st.booleans())
    state.default_ttl = draw(st.sampled_from([0, 300]))
    state.default_ttl_known = draw(st.booleans())
    state.default_ttl_from_soa = draw(st.booleans())
    return state


ONE_LINES = st.one_of(record_lines(), record_lines(), DIRECTIVES, SOAS, ODD, HOSTILE_TEXT).filter(
    lambda line: "\n" not in line
)

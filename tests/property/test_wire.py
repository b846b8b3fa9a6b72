"""Names in wire form are written and read by valis's own code where that is plain, and by
dnspython otherwise; either way a name reads and writes exactly as dnspython has it."""

from __future__ import annotations

import dns.exception
import dns.name
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns import wire

LABELS = st.lists(
    st.one_of(
        st.binary(min_size=1, max_size=63),
        st.text(alphabet="abcXYZ019-_*", min_size=1, max_size=63).map(str.encode),
    ),
    max_size=4,
)


@given(LABELS)
def test_a_wire_name_is_written_as_dnspython_writes_it(labels: list[bytes]) -> None:
    data = b"".join(bytes((len(label),)) + label for label in labels) + b"\x00"
    assert wire.to_text(data) == dns.name.Name([*labels, b""]).to_text()


NAME_TEXT = st.text(alphabet="ab.-*@\\09 é\"();$", max_size=70) | st.sampled_from(
    [".", "..", "a..", "@", "a.", "a", "", "\\.", "a\\.b.", "é.", "l" * 63 + ".", "l" * 64 + ".",
     ".".join(["l" * 63] * 3 + ["l" * 61, ""]), ".".join(["l" * 63] * 3 + ["l" * 62, ""])]
)


@given(NAME_TEXT)
def test_a_name_is_read_as_dnspython_reads_it(text: str) -> None:
    try:
        name = dns.name.from_text(text, origin=None)
        expected: bytes | None = wire.name_wire(name) if name.is_absolute() else None
    except (dns.exception.DNSException, UnicodeError, ValueError):
        expected = None
    try:
        found: bytes | None = wire.from_text(text)
    except wire.BadName:
        found = None
    assert found == expected

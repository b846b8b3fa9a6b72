"""The compiled UDP fast path's copies of the Python path's values are the same values.

``_fastpath.c`` cannot import Python constants: it copies the ones it needs as
``#define``s and ``enum``s (the header flags, the size limits, record types and rcodes,
how a zone is signed, the fields of an answer entry). Each copy is read from the C
source here and compared with the Python value it copies, and every copy is accounted
for: a new ``#define`` or ``enum`` member must be named here, either with its Python
value or as C's own. The source is read, not the built extension, so this holds in an
unbuilt tree too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from valis_core.dns.answer import fastpath, message
from valis_core.dns.dnssec.nsec3 import NSEC3PARAM
from valis_core.dns.dnssec.signing import CDNSKEY, CDS, DNSKEY
from valis_core.dns.serve import _loops
from valis_core.dns.wire import names, records

SOURCE = Path(fastpath.__file__).with_name("_fastpath.c")

PYTHON: Mapping[str, int] = {
    # sizes and limits
    "MAX_DATAGRAM": _loops.MAX_DATAGRAM,
    "MAX_NAME": names.MAX_NAME,
    "MAX_LABEL": names.MAX_LABEL,
    "SERVER_PAYLOAD": message.SERVER_PAYLOAD,
    "PLAIN_UDP_LIMIT": message.PLAIN_UDP_LIMIT,
    "MAX_OPTIONS": message.MAX_OPTIONS,
    "RCODES": _loops.RCODES,
    # header flags
    "F_QR": message.QR,
    "F_OPCODE": message.OPCODE,
    "F_TC": message.TC,
    "F_ECHOED": message.ECHOED,
    # record types and rcodes
    "T_OPT": records.OPT,
    "T_IXFR": records.IXFR,
    "T_AXFR": records.AXFR,
    "T_CNAME": records.CNAME,
    "T_DS": records.DS,
    "T_DNSKEY": DNSKEY,
    "T_NSEC3PARAM": NSEC3PARAM,
    "T_CDS": CDS,
    "T_CDNSKEY": CDNSKEY,
    "T_ANY": records.ANY,
    "NOERROR": records.NOERROR,
    "NXDOMAIN": records.NXDOMAIN,
    # how the table is told a zone is signed
    "UNSIGNED": fastpath.UNSIGNED,
    "SIGNED": fastpath.SIGNED,
    "SIGNED_ELSEWHERE": fastpath.SIGNED_ELSEWHERE,
    # where each field of an answer entry sits (message.Entry)
    **{f"E_{field.upper()}": at for at, field in enumerate(message.ENTRY_FIELDS)},
    "E_FIELDS": len(message.ENTRY_FIELDS),
    # how stream_serve gives a TCP connection back
    "STREAM_WAIT": fastpath.STREAM_WAIT,
    "STREAM_MISS": fastpath.STREAM_MISS,
    "STREAM_TURN": fastpath.STREAM_TURN,
    "STREAM_EOF": fastpath.STREAM_EOF,
    "STREAM_STALLED": fastpath.STREAM_STALLED,
    "STREAM_FAILED": fastpath.STREAM_FAILED,
}
"""Each copy in the C source and the Python value it must equal."""

C_OWN = frozenset({
    "PY_SSIZE_T_CLEAN",  # Python's C API convention
    "MAX_BATCH",  # the most datagrams one Pump takes (Python asks for UDP_BATCH, fewer)
    "KEY_MAX",  # MAX_NAME + 2: a question name and its type, as the table keys them
    "OPT_SIZE",  # a bare OPT record's 11 octets
    "MISS",  # what a lookup returns for a question the table does not hold
    "PLAIN_MISS",  # ... and for one it must hand back to the plain Python path
    "SLOT_DEPS",  # the zones an entry remembers by name; past that, any change
    "DEP_NONE",  # ... the end of that list,
    "DEP_ROOT",  # ... "no served zone" (a lookup that found none),
    "DEP_ANY",  # ... and "any change" (more zones than SLOT_DEPS)
    "SLOT_READS",  # the names read inside its zone an entry remembers; past that, none
    "STREAM_READ",  # one read of a TCP connection, as _tcp_loop reads (MAX_DATAGRAM + 2)
    "STREAM_IN",  # a connection's unread bytes: less than a message, and a read
    "STREAM_FRAMES",  # the most messages one stream_serve call answers (Python: TCP_BATCH)
    "STREAM_OUT",  # room for that many responses, each at most SERVER_PAYLOAD
    "STREAM_RETRIES",  # EINTRs a stream_serve call retries
    "STREAM_READS",  # reads a stream_serve call makes at most
    "WRITE",  # a macro, no value: each change to a table a write under the readers' lock
})
"""The C source's own names: not copies of anything in Python."""


def copies(source: str) -> dict[str, int | None]:
    """Every ``#define`` and ``enum`` member of ``source``: its integer value, or ``None``
    when it is not a plain integer (an expression, or no value)."""
    found: dict[str, int | None] = {}
    for name, value in re.findall(r"^#define (\w+)[ \t]*([^\n/]*)", source, re.MULTILINE):
        text = value.strip()
        found[name] = int(text, 0) if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", text) else None
    for body in re.findall(r"\benum\s*\{([^}]*)\}", source):
        for member in body.split(","):
            name, _, value = (part.strip() for part in member.partition("="))
            if name:
                found[name] = int(value, 0) if value else None
    return found


def mismatches(source: str) -> list[str]:
    """What the C source copies differently from Python, or copies unaccounted for."""
    found = copies(source)
    wrong = [
        f"{name}: C has {found.get(name)}, Python {value}"
        for name, value in PYTHON.items()
        if found.get(name) != value
    ]
    unknown = sorted(set(found) - set(PYTHON) - C_OWN)
    wrong += [f"{name}: in the C source, neither checked here nor C's own" for name in unknown]
    return wrong


def test_the_compiled_paths_copies_equal_the_python_values() -> None:
    assert mismatches(SOURCE.read_text()) == []


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("#define SERVER_PAYLOAD 1232", "#define SERVER_PAYLOAD 1400", "SERVER_PAYLOAD"),
        ("#define F_TC 0x0200", "#define F_TC 0x0100", "F_TC"),
        ("SIGNED_ELSEWHERE = 2", "SIGNED_ELSEWHERE = 3", "SIGNED_ELSEWHERE"),
        ("E_BODY = 4", "E_BODY = 5", "E_BODY"),
        ("#define T_ANY 255", "#define T_ANY 255\n#define T_NEW 7", "T_NEW"),
    ],
)
def test_a_copy_that_drifts_is_found(old: str, new: str, named: str) -> None:
    source = SOURCE.read_text()
    assert old in source
    found = mismatches(source.replace(old, new, 1))
    assert len(found) == 1
    assert found[0].startswith(f"{named}: ")

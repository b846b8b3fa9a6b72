"""Hostile additional sections: refused by a bounded scan with the right RCODE, never by
a full parse; and the BADKEY reply to a signed query keeps the query's OPT and its size
limit."""

from __future__ import annotations

import importlib
import struct
from collections.abc import Iterator
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.tsigkeyring
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from valis_core.dns.answer import (
    MAX_OPTIONS,
    MAX_POINTERS,
    SERVER_PAYLOAD,
    Transport,
    answer,
    answer_general,
)
from valis_core.dns.answer._cache import ResponseCache
from valis_core.dns.zone import ZoneIndex

# By path: the package's face exports the ``answer`` function under the module's name.
answer_module = importlib.import_module("valis_core.dns.answer._answer")

ZONE = """\
$ORIGIN example.com.
$TTL 3600
@    SOA ns1 hostmaster 1 7200 3600 1209600 300
@    NS  ns1
ns1  A   192.0.2.1
www  A   192.0.2.80
"""
INDEX = ZoneIndex.from_zone_text(ZONE, "example.com.")
HMAC = b"\x0bhmac-sha256\x00"
OPT_RR = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
A_RR = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + bytes([192, 0, 2, 7])


def plain(name: str = "www.example.com.", *, qid: int = 0x1234) -> bytes:
    message = dns.message.make_query(name, "A", use_edns=False)
    message.id = qid
    return message.to_wire()


def with_additional(wire: bytes, records: list[bytes]) -> bytes:
    return wire[:10] + struct.pack("!H", len(records)) + wire[12:] + b"".join(records)


def tsig_rr(owner: bytes, *, algorithm: bytes = HMAC, original_id: int = 0x1234,
            rclass: int = 255) -> bytes:
    rdata = (
        algorithm
        + struct.pack("!HIH", 0, 1_700_000_000, 300)
        + struct.pack("!H", 32) + bytes(32)
        + struct.pack("!HHH", original_id, 0, 0)
    )
    return owner + struct.pack("!HHIH", 250, rclass, 0, len(rdata)) + rdata


def opt_with_options(count: int) -> bytes:
    options = struct.pack("!HH", 65001, 0) * count
    return b"\x00" + struct.pack("!HHIH", 41, 1232, 0, len(options)) + options


def respond(wire: bytes, transport: Transport = Transport.UDP) -> dns.message.Message:
    raw = answer(INDEX, wire, transport=transport)
    assert raw is not None
    return dns.message.from_wire(raw, keyring=lambda _message, _name: False)


@pytest.fixture
def no_full_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails the test if the serving path called dnspython's message parser (checked
    after the test, since ``answer`` turns any exception into a FORMERR)."""
    calls: list[int] = []

    def refuse(wire: bytes, *args: Any, **kwargs: Any) -> None:
        calls.append(len(wire))
        raise AssertionError("the serving path ran dnspython's full parse")

    monkeypatch.setattr(dns.message, "from_wire", refuse)
    yield
    assert not calls, f"dnspython parsed messages of {calls} octets"


def rcode_of(wire: bytes, transport: Transport = Transport.UDP) -> int:
    """The RCODE answered, checking the reply is a considered one: the ID and the
    question echoed (the last-resort FORMERR for an internal failure echoes no question)."""
    raw = answer(INDEX, wire, transport=transport)
    assert raw is not None
    assert raw[:2] == wire[:2]
    qend = wire.index(b"\x00", 12) + 5
    assert raw[4:6] == b"\x00\x01"
    assert raw[12:qend] == wire[12:qend]
    return raw[3] & 0x0F


# --- the decision, without a full parse ------------------------------------------------


@pytest.mark.usefixtures("no_full_parse")
def test_a_query_with_many_additional_records_is_formerr_without_a_full_parse() -> None:
    for count in (3, 75, 4000):
        assert rcode_of(with_additional(plain(), [A_RR] * count)) == dns.rcode.FORMERR


@pytest.mark.usefixtures("no_full_parse")
def test_a_65k_tcp_message_is_refused_without_a_full_parse() -> None:
    stuffed = with_additional(plain(), [A_RR] * 4680)
    assert len(stuffed) > 65_000
    assert rcode_of(stuffed, Transport.TCP) == dns.rcode.FORMERR
    huge_opt = with_additional(plain(), [opt_with_options(16_000)])
    assert len(huge_opt) > 64_000
    assert rcode_of(huge_opt, Transport.TCP) == dns.rcode.FORMERR


@pytest.mark.usefixtures("no_full_parse")
def test_the_additional_section_may_hold_one_opt_and_a_tsig_last_only() -> None:
    key = b"\x03key\x00"
    cases = {
        "two OPT records": [OPT_RR, OPT_RR],
        "a TSIG before the OPT": [tsig_rr(key), OPT_RR],
        "a data record beside the OPT": [OPT_RR, A_RR],
        "a TSIG not of class ANY": [tsig_rr(key, rclass=1)],
        "a TSIG with a compressed algorithm": [tsig_rr(key, algorithm=b"\xc0\x0c")],
        "a TSIG whose rdata runs short": [tsig_rr(key)[:-3]],
    }
    for label, records in cases.items():
        assert rcode_of(with_additional(plain(), records)) == dns.rcode.FORMERR, label
    signed = [OPT_RR, tsig_rr(key)]
    assert rcode_of(with_additional(plain(), signed)) == dns.rcode.NOTAUTH


@pytest.mark.usefixtures("no_full_parse")
def test_options_are_scanned_up_to_the_bound_and_more_is_formerr() -> None:
    at_bound = with_additional(plain(), [opt_with_options(MAX_OPTIONS)])
    assert rcode_of(at_bound) == dns.rcode.NOERROR
    over = with_additional(plain(), [opt_with_options(MAX_OPTIONS + 1)])
    assert rcode_of(over) == dns.rcode.FORMERR


@pytest.mark.usefixtures("no_full_parse")
def test_compression_pointers_that_loop_or_point_forward_are_formerr() -> None:
    wire = plain()
    tsig_at = len(wire)
    cases = {
        "pointer to itself": (0xC000 | tsig_at).to_bytes(2, "big"),
        "pointer forward": (0xC000 | (tsig_at + 40)).to_bytes(2, "big"),
        "pointer past the message": b"\xff\xff",
        "label running past the end": b"\x3f" + b"x" * 10,
    }
    for label, owner in cases.items():
        assert rcode_of(with_additional(wire, [tsig_rr(owner)])) == dns.rcode.FORMERR, label


def test_a_chain_of_pointers_longer_than_the_bound_is_formerr() -> None:
    def chained(links: int) -> bytes:
        """A signed query whose key name is a pointer to a chain of ``links`` pointers
        (kept in an OPT option's value), each to the one before, the first to the
        question name."""
        wire = plain()
        start = len(wire) + 1 + 10 + 4  # root owner, OPT header, option header
        chain = b"".join(
            (0xC000 | (start + 2 * (i - 1) if i else 12)).to_bytes(2, "big")
            for i in range(links)
        )
        option = struct.pack("!HH", 65001, len(chain)) + chain
        opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, len(option)) + option
        owner = (0xC000 | (start + 2 * (links - 1))).to_bytes(2, "big")
        return with_additional(wire, [opt, tsig_rr(owner)])

    assert rcode_of(chained(MAX_POINTERS - 1)) == dns.rcode.NOTAUTH
    assert rcode_of(chained(MAX_POINTERS)) == dns.rcode.FORMERR


# --- the scan agrees with dnspython's parse --------------------------------------------

RECORDS = {
    "opt": OPT_RR,
    "opt-do-options": b"\x00"
    + struct.pack("!HHIH", 41, 4096, 0x8000, 6)
    + struct.pack("!HH", 65001, 2) + b"\x01\x02",
    "opt-v1": b"\x00" + struct.pack("!HHIH", 41, 1232, 1 << 16, 0),
    "opt-not-root": b"\x01x\x00" + struct.pack("!HHIH", 41, 1232, 0, 0),
    "opt-bad-option": b"\x00" + struct.pack("!HHIHHH", 41, 1232, 0, 4, 65001, 8),
    "tsig": tsig_rr(b"\x03key\x07example\x00"),
    "tsig-compressed": tsig_rr(b"\x03key\xc0\x10"),
    "tsig-class-in": tsig_rr(b"\x03key\x00", rclass=1),
    "a": A_RR,
}


@settings(deadline=None)
@given(
    st.lists(st.sampled_from(sorted(RECORDS)), max_size=3),
    st.sampled_from(list(Transport)),
    st.binary(max_size=2),
)
def test_the_scan_gives_the_same_bytes_as_dnspythons_parse(
    kinds: list[str], transport: Transport, trailing: bytes
) -> None:
    wire = with_additional(plain(), [RECORDS[kind] for kind in kinds]) + trailing
    scanned = answer(INDEX, wire, transport=transport)
    assert scanned == answer_general(INDEX, wire, transport=transport)
    tcp = transport is Transport.TCP
    assert scanned == answer_module._answer(INDEX, ResponseCache(), wire, tcp, False)


# --- the BADKEY reply ------------------------------------------------------------------

LONG_NAME = ".".join(["a" * 61] * 4) + "."  # 250 octets in wire form, outside the zone


def test_a_badkey_reply_compresses_the_key_name_as_the_query_did() -> None:
    wire = plain(LONG_NAME)
    signed = with_additional(wire, [tsig_rr(b"\xc0\x0c")])  # the key is named as asked
    assert len(signed) <= 512
    raw = answer(INDEX, signed, transport=Transport.UDP)
    assert raw is not None
    assert len(raw) <= 512
    response = dns.message.from_wire(raw, keyring=lambda _message, _name: False)
    assert response.rcode() == dns.rcode.NOTAUTH
    assert not response.flags & dns.flags.TC
    assert response.tsig is not None
    assert response.tsig_error == dns.rcode.BADKEY
    assert response.tsig.name.to_text() == LONG_NAME
    assert response.tsig[0].original_id == 0x1234


def test_a_badkey_reply_over_512_octets_without_edns_is_truncated() -> None:
    key = b"".join(b"\x3f" + b"k" * 63 for _ in range(3)) + b"\x00"  # 193 octets
    algorithm = b"\x3d" + b"h" * 61 + b"\x00"
    signed = with_additional(plain(LONG_NAME), [tsig_rr(key, algorithm=algorithm)])
    raw = answer(INDEX, signed, transport=Transport.UDP)
    assert raw is not None
    assert len(raw) <= 512
    response = dns.message.from_wire(raw)
    assert response.flags & dns.flags.TC
    assert response.rcode() == dns.rcode.NOTAUTH
    assert response.tsig is None
    over_tcp = respond(signed, Transport.TCP)
    assert not over_tcp.flags & dns.flags.TC
    assert over_tcp.tsig is not None
    assert over_tcp.tsig_error == dns.rcode.BADKEY


def test_a_badkey_reply_keeps_the_querys_opt_ahead_of_the_tsig() -> None:
    message = dns.message.make_query("www.example.com.", "A", use_edns=0, want_dnssec=True)
    keyring = dns.tsigkeyring.from_text({"k.": "c2VjcmV0c2VjcmV0c2VjcmV0"})
    message.use_tsig(keyring, keyname="k.")
    raw = answer(INDEX, message.to_wire(), transport=Transport.UDP)
    assert raw is not None
    assert struct.unpack_from("!H", raw, 10)[0] == 2
    response = dns.message.from_wire(raw, keyring=lambda _message, _name: False)
    assert response.rcode() == dns.rcode.NOTAUTH
    assert response.edns == 0
    assert response.ednsflags & dns.flags.DO
    assert response.tsig is not None
    assert response.tsig_error == dns.rcode.BADKEY
    assert raw == answer_general(INDEX, message.to_wire(), transport=Transport.UDP)


def test_a_signed_query_without_edns_gets_no_opt_back() -> None:
    message = dns.message.make_query("www.example.com.", "A", use_edns=False)
    keyring = dns.tsigkeyring.from_text({"k.": "c2VjcmV0c2VjcmV0c2VjcmV0"})
    message.use_tsig(keyring, keyname="k.")
    raw = answer(INDEX, message.to_wire(), transport=Transport.UDP)
    assert raw is not None
    assert struct.unpack_from("!H", raw, 10)[0] == 1
    response = dns.message.from_wire(raw, keyring=lambda _message, _name: False)
    assert response.edns < 0
    assert response.tsig is not None
    assert response.tsig[0].algorithm == message.keyalgorithm


def wire_name(labels: list[int], letter: bytes) -> bytes:
    return b"".join(bytes([size]) + letter * size for size in labels) + b"\x00"


NAME_LABELS = st.lists(st.integers(1, 63), max_size=4).filter(lambda sizes: sum(sizes) < 240)


@settings(deadline=None)
@given(
    st.tuples(NAME_LABELS, NAME_LABELS, NAME_LABELS),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 65535)),
    st.sampled_from(list(Transport)),
)
def test_a_badkey_reply_always_fits_the_querys_size_limit(
    names: tuple[list[int], list[int], list[int]],
    key_is_qname: bool,
    payload: int | None,
    transport: Transport,
) -> None:
    qname, key, algorithm = names
    question = wire_name(qname, b"q") + struct.pack("!HH", 1, 1)
    wire = struct.pack("!HHHHHH", 0x1234, 0, 1, 0, 0, 0) + question
    owner = b"\xc0\x0c" if key_is_qname else wire_name(key, b"k")
    records = [tsig_rr(owner, algorithm=wire_name(algorithm, b"h"))]
    if payload is not None:
        records.insert(0, b"\x00" + struct.pack("!HHIH", 41, payload, 0, 0))
    signed = with_additional(wire, records)
    raw = answer(INDEX, signed, transport=transport)
    assert raw is not None
    if transport is Transport.TCP:
        limit = 65535
    elif payload is None:
        limit = 512
    else:
        limit = max(512, min(payload, SERVER_PAYLOAD))
    assert len(raw) <= limit
    response = dns.message.from_wire(raw, keyring=lambda _message, _name: False)
    assert response.rcode() == dns.rcode.NOTAUTH
    assert (response.edns >= 0) == (payload is not None)
    assert (response.tsig is None) == bool(response.flags & dns.flags.TC)
    if response.tsig is not None:
        assert response.tsig_error == dns.rcode.BADKEY
    assert raw == answer_general(INDEX, signed, transport=transport)

"""The DoH core: whatever bytes arrive, a route or a DohError with an HTTP status; a
query's bytes survive GET and POST alike; bytes that are not a DNS query are 400, a
well-formed query the server will not answer 200 with its DNS error; the cache lifetime
is the least TTL."""

from __future__ import annotations

import base64
from pathlib import Path

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rrset
import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.zone import ZoneIndex
from valis_core.edge.doh import (
    MAX_MESSAGE,
    MAX_RECORDS,
    DnsQuery,
    DohError,
    Route,
    StatusPage,
    dns_response,
    max_age,
    route,
)
from valis_core.edge.exchange import respond

ZONE_TEXT = (Path(__file__).parents[1] / "scenario" / "data" / "example.com.zone").read_text()
SNAPSHOT = Snapshot(ZoneIndex.from_zone_text(ZONE_TEXT, "example.com."))
DNS_MESSAGE = [(b"content-type", b"application/dns-message")]
STATUSES = {400, 404, 405, 413, 414, 415}

headers = st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=60)), max_size=6)
methods = st.sampled_from([b"GET", b"POST", b"HEAD", b"PUT", b""]) | st.binary(max_size=8)
targets = (
    st.binary(max_size=200)
    | st.builds(lambda q: b"/dns-query?" + q, st.binary(max_size=200))
    | st.builds(lambda q: b"/dns-query?dns=" + q, st.binary(max_size=200))
)


def b64url(wire: bytes) -> bytes:
    return base64.urlsafe_b64encode(wire).rstrip(b"=")


@given(methods, targets, headers, st.binary(max_size=300))
def test_garbage_is_routed_or_refused_with_a_status_never_raised_otherwise(
    method: bytes, target: bytes, fields: list[tuple[bytes, bytes]], body: bytes
) -> None:
    status, asked = 0, None
    try:
        asked = route(method, target, fields, body)
    except DohError as exc:
        status = exc.status
    assert status in STATUSES or isinstance(asked, DnsQuery | StatusPage)


@given(methods, targets, headers, st.binary(max_size=300))
def test_every_request_gets_a_response_with_a_length_that_is_its_body(
    method: bytes, target: bytes, fields: list[tuple[bytes, bytes]], body: bytes
) -> None:
    response = respond(SNAPSHOT, method, target, fields, body)
    declared = dict(response.headers)[b"content-length"]
    if method == b"HEAD":
        assert response.body == b""  # the length is the GET's; HTTP sends no body to HEAD
    else:
        assert int(declared) == len(response.body)


def routed(method: bytes, wire: bytes) -> Route | int:
    """What ``wire`` sent by GET or POST routes to, or the status it is refused with."""
    try:
        if method == b"GET":
            return route(b"GET", b"/dns-query?dns=" + b64url(wire), [], b"")
        return route(b"POST", b"/dns-query", DNS_MESSAGE, wire)
    except DohError as exc:
        return exc.status


@given(st.binary(min_size=12, max_size=600))
def test_a_message_reaches_the_answer_path_the_same_by_get_and_by_post(wire: bytes) -> None:
    assert routed(b"GET", wire) == routed(b"POST", wire) in (DnsQuery(wire), 400)


names = st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20),
                 min_size=1, max_size=5).map(lambda labels: ".".join(labels) + ".")


@given(names, st.sampled_from(["A", "AAAA", "MX", "TXT", "ANY", "SOA", "HTTPS"]),
       st.booleans(), st.integers(min_value=0, max_value=65535))
def test_every_query_a_client_makes_reaches_the_answer_path(
    name: str, rdtype: str, edns: bool, qid: int
) -> None:
    query = dns.message.make_query(name, rdtype, use_edns=0 if edns else False, id=qid)
    wire = query.to_wire()
    assert routed(b"GET", wire) == routed(b"POST", wire) == DnsQuery(wire)


_QUERY = dns.message.make_query("www.example.com.", "A", id=4242).to_wire()


@pytest.mark.parametrize(("why", "wire"), [
    ("garbage whose header is nonsense", b"x" * 40),
    ("a header and nothing after it", bytes(12)),
    ("a response, not a query", b"\xff" * 40),
    ("a question cut short", _QUERY[:-3]),
    ("bytes after the last record", _QUERY + b"\x00"),
    ("counted records that are not there", _QUERY[:11] + b"\x01" + _QUERY[12:]),
    ("a label type that is not one", _QUERY[:12] + b"\x43" + _QUERY[13:]),
    ("a pointer that points forward", _QUERY[:12] + b"\xc0\x20" + _QUERY[-4:]),
    ("more records than a query holds", _QUERY[:10] + bytes((0, MAX_RECORDS)) + _QUERY[12:]
     + b"\x00\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00" * MAX_RECORDS),
])
def test_bytes_that_are_not_a_dns_query_are_400_not_a_dns_error(why: str, wire: bytes) -> None:
    for method in (b"GET", b"POST"):
        assert routed(method, wire) == 400, why
        target = b"/dns-query?dns=" + b64url(wire) if method == b"GET" else b"/dns-query"
        response = respond(SNAPSHOT, method, target, DNS_MESSAGE, wire)
        assert response.status == 400
        assert dict(response.headers)[b"content-type"].startswith(b"text/plain")
        assert response.body.startswith(b"not a DNS query")


def _with(change: str) -> bytes:
    query = dns.message.make_query("www.example.com.", "A", id=4242)
    if change == "notify":
        query.set_opcode(dns.opcode.NOTIFY)
    elif change == "chaos":
        query = dns.message.make_query("version.bind.", "TXT", rdclass="CH", id=4242)
    elif change == "answer record":
        query.answer.append(dns.rrset.from_text("www.example.com.", 60, "IN", "A", "192.0.2.1"))
    wire = query.to_wire()
    if change == "two questions":
        question = wire[12:]
        wire = wire[:4] + b"\x00\x02" + wire[6:] + question
    return wire


@pytest.mark.parametrize(("change", "rcode"), [
    ("two questions", dns.rcode.FORMERR), ("answer record", dns.rcode.FORMERR),
    ("notify", dns.rcode.NOTIMP), ("chaos", dns.rcode.REFUSED),
])
def test_a_well_formed_query_the_server_will_not_answer_is_200_with_the_dns_error(
    change: str, rcode: dns.rcode.Rcode
) -> None:
    response = respond(SNAPSHOT, b"POST", b"/dns-query", DNS_MESSAGE, _with(change))
    assert response.status == 200  # RFC 8484 section 4.2.1: a valid DNS response is 2xx
    reply = dns.message.from_wire(response.body, question_only=True)
    assert (reply.id, reply.rcode()) == (4242, rcode)


@given(st.binary(min_size=12, max_size=300))
def test_any_bytes_get_400_or_a_dns_response_to_them(wire: bytes) -> None:
    response = respond(SNAPSHOT, b"POST", b"/dns-query", DNS_MESSAGE, wire)
    assert response.status in (200, 400)
    if response.status == 200:
        assert response.body[:2] == wire[:2]
        assert response.body[2] & 0x80


@given(st.binary(max_size=11))
def test_shorter_than_a_header_is_400(wire: bytes) -> None:
    for method, target, body in ((b"GET", b"/dns-query?dns=" + b64url(wire), b""),
                                 (b"POST", b"/dns-query", wire)):
        with pytest.raises(DohError) as caught:
            route(method, target, DNS_MESSAGE, body)
        assert caught.value.status == 400


def test_a_body_past_the_largest_message_is_413() -> None:
    with pytest.raises(DohError) as caught:
        route(b"POST", b"/dns-query", DNS_MESSAGE, bytes(MAX_MESSAGE + 1))
    assert caught.value.status == 413


@pytest.mark.parametrize(("method", "target", "fields", "status"), [
    (b"GET", b"/dns-query", [], 400),
    (b"GET", b"/dns-query?dns=AAAA&dns=AAAA", [], 400),
    (b"GET", b"/dns-query?dns=%FF%FE", [], 400),
    (b"GET", b"/status", [], 404),
    (b"GET", b"/metrics", [], 404),
    (b"DELETE", b"/dns-query", [], 405),
    (b"POST", b"/", [], 405),
    (b"POST", b"/dns-query", [(b"content-type", b"text/plain")], 415),
    (b"POST", b"/dns-query", [], 415),
    (b"GET", b"/\xff", [], 400),
])
def test_refusals_carry_the_status_an_http_client_expects(
    method: bytes, target: bytes, fields: list[tuple[bytes, bytes]], status: int
) -> None:
    with pytest.raises(DohError) as caught:
        route(method, target, fields, b"x" * 20)
    assert caught.value.status == status
    assert respond(SNAPSHOT, method, target, fields, b"x" * 20).status == status


def answered(name: str, rdtype: str) -> tuple[int, dns.message.Message]:
    query = dns.message.make_query(name, rdtype)
    response = respond(SNAPSHOT, b"POST", b"/dns-query", DNS_MESSAGE, query.to_wire())
    assert response.status == 200
    fields = dict(response.headers)
    assert fields[b"content-type"] == b"application/dns-message"
    age = int(fields[b"cache-control"].removeprefix(b"max-age="))
    return age, dns.message.from_wire(response.body)


def test_the_cache_lifetime_is_the_least_ttl_and_the_soa_minimum_when_negative() -> None:
    assert answered("www.example.com.", "A")[0] == 3600
    age, negative = answered("nowhere.example.com.", "A")
    assert negative.rcode() == dns.rcode.NXDOMAIN
    assert age == 300
    age, refused = answered("www.example.net.", "A")
    assert refused.rcode() == dns.rcode.REFUSED
    assert age == 0


def test_an_answer_too_big_for_udp_comes_whole_over_https() -> None:
    texts = "".join(f'big IN TXT "{index:03d} {"x" * 96}"\n' for index in range(40))
    snapshot = Snapshot(ZoneIndex.from_zone_text(ZONE_TEXT + texts, "example.com."))
    query = dns.message.make_query("big.example.com.", "TXT", use_edns=False)
    over_udp = answer(snapshot, query.to_wire(), transport=Transport.UDP)
    assert over_udp is not None
    assert dns.message.from_wire(over_udp).flags & dns.flags.TC
    response = respond(snapshot, b"POST", b"/dns-query", DNS_MESSAGE, query.to_wire())
    whole = dns.message.from_wire(response.body)
    assert not whole.flags & dns.flags.TC
    assert len(whole.answer[0]) == 40


def test_a_dropped_query_is_400_over_http() -> None:
    assert dns_response(None).status == 400


@given(st.binary(max_size=200))
def test_the_cache_lifetime_of_any_bytes_is_a_number(wire: bytes) -> None:
    assert max_age(wire) >= 0

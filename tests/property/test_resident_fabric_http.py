"""Properties of the fabric's HTTP reader: bounded, never crashes, reads what a client
sends."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_core.resident.fabric_http import (
    MAX_HEAD,
    HttpError,
    RequestReader,
    parse_head,
    render_response,
)

segments = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1,
                   max_size=12)
tokens = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~",
                 min_size=1, max_size=64)


@given(st.binary(max_size=MAX_HEAD + 64), st.integers(min_value=1, max_value=64))
def test_any_bytes_give_a_request_or_an_http_error(data: bytes, piece: int) -> None:
    status = 0
    reader = RequestReader()
    try:
        for at in range(0, len(data), piece):  # as they might arrive, piece by piece
            if reader.receive(data[at : at + piece]) is not None:
                break
        else:
            reader.receive(b"")
    except HttpError as exc:
        status = exc.status
    assert status == 0 or 400 <= status < 600


@given(st.lists(segments, min_size=1, max_size=4), st.dictionaries(segments, segments,
       max_size=4), tokens)
def test_a_get_is_read_back_as_sent(
    path: list[str], query: dict[str, str], token: str
) -> None:
    target = "/" + "/".join(quote(part, safe="") for part in path)
    if query:
        target += "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}"
                                 for k, v in query.items())
    head = (f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\n\r\n").encode("ascii")
    reader = RequestReader()
    assert reader.receive(head[:-1]) is None
    request = reader.receive(head[-1:])
    assert request is not None
    assert request.method == "GET"
    assert request.path == "/" + "/".join(path)
    assert dict(request.query) == query
    assert request.bearer_token() == token


def test_a_head_that_never_ends_is_refused_once_it_passes_the_bound() -> None:
    reader = RequestReader()
    assert reader.receive(b"GET / HTTP/1.1\r\nX: " + b"a" * 100) is None
    with pytest.raises(HttpError) as caught:
        reader.receive(b"a" * MAX_HEAD)
    assert caught.value.status == 431


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET http://elsewhere/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer a\r\n"
         b"Authorization: Bearer b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n folded\r\n\r\n", 400),
        (b"GET /?a=1&a=2 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ],
)
def test_requests_outside_the_fabrics_sliver_of_http_are_refused(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as caught:
        parse_head(head)
    assert caught.value.status == status


@pytest.mark.parametrize(
    ("value", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None)],
)
def test_only_a_bearer_credential_is_a_token(value: str, token: str | None) -> None:
    request = parse_head(f"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: {value}\r\n\r\n".encode())
    assert request.bearer_token() == token


def test_a_response_says_its_length_and_closes() -> None:
    data = render_response(200, b"hello\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Length: 6" in head
    assert b"Connection: close" in head
    assert body == b"hello\n"
    assert render_response(200, b"hello\n", include_body=False).endswith(b"\r\n\r\n")

"""The TLS edge over real loopback sockets: real DoH clients (dnspython over HTTP/2, curl
over HTTP/2 and HTTP/1.1) trusting a test CA get the answers :53 gives; a malformed
request gets 400, a name outside the served zones REFUSED, a hostile client only its own
connection; a renewed certificate serves the next handshake while older connections
keep going."""

from __future__ import annotations

import base64
import contextlib
import functools
import random
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
import trio

from tests.scenario.edge_ca import LocalCA, make_test_ca
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.zone import ZoneIndex
from valis_core.edge.bounds import EdgeBounds
from valis_core.edge.certificate import CertificateSlot
from valis_core.edge.server import serve_edge
from valis_core.edge.stats import EdgeStats

ZONE_TEXT = (Path(__file__).parent / "data" / "example.com.zone").read_text()
LIMIT = 20.0


@attrs.frozen
class Edge:
    url: str
    port: int
    cafile: Path
    ca: LocalCA
    slot: CertificateSlot
    holder: IndexHolder
    stats: EdgeStats


@contextlib.asynccontextmanager
async def running_edge(tmp_path: Path, bounds: EdgeBounds | None = None,
                       *, certified: bool = True) -> AsyncIterator[Edge]:
    ca = make_test_ca()
    cafile = tmp_path / "root.pem"
    cafile.write_bytes(ca.root_pem)
    slot = CertificateSlot(ca.issue(("example.com",)) if certified else None)
    holder = IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, "example.com."))
    stats = EdgeStats()
    listener = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: serve_edge(
                listener, slot, holder, bounds=bounds, stats=stats, task_status=task_status))
            yield Edge(f"https://127.0.0.1:{port}/dns-query", port, cafile, ca, slot, holder,
                       stats)
            nursery.cancel_scope.cancel()


def dnspython_ask(edge: Edge, name: str, rdtype: str, *, post: bool) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    return dns.query.https(
        query, edge.url, timeout=LIMIT, post=post,
        verify=ssl.create_default_context(cafile=str(edge.cafile)),
        http_version=dns.query.HTTPVersion.H2,
    )


async def curl(edge: Edge, *args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(LIMIT):
        return await trio.run_process(
            ["curl", "--silent", "--show-error", "--max-time", "10", "--cacert",
             str(edge.cafile), *args],
            capture_stdout=True, capture_stderr=True, check=False,
        )


def b64url(wire: bytes) -> str:
    return base64.urlsafe_b64encode(wire).rstrip(b"=").decode()


async def test_dnspython_over_http2_gets_the_answer_port_53_gives(tmp_path: Path) -> None:
    async with running_edge(tmp_path) as edge:
        for post in (True, False):
            reply = await trio.to_thread.run_sync(
                functools.partial(dnspython_ask, edge, "www.example.com.", "A", post=post))
            assert reply.rcode() == dns.rcode.NOERROR
            assert [r.to_text() for r in reply.answer[0]] == ["192.0.2.80"]
        assert edge.stats.responses[(200, "h2")] == 2


async def test_a_name_outside_the_zones_gets_the_same_refused_as_port_53(
    tmp_path: Path,
) -> None:
    async with running_edge(tmp_path) as edge:
        reply = await trio.to_thread.run_sync(
            lambda: dnspython_ask(edge, "www.example.net.", "A", post=True))
        assert reply.rcode() == dns.rcode.REFUSED
        query = dns.message.make_query("www.example.net.", "A")
        plain = answer(edge.holder.snapshot, query.to_wire(), transport=Transport.UDP)
        assert plain is not None
        assert dns.message.from_wire(plain).rcode() == reply.rcode()


@pytest.mark.parametrize("version", ["--http2", "--http1.1"])
async def test_curl_gets_the_answer_with_a_cache_lifetime(tmp_path: Path, version: str) -> None:
    query = dns.message.make_query("www.example.com.", "A")
    query.id = 0
    posted_query = tmp_path / "query.bin"
    posted_query.write_bytes(dns.message.make_query("mail.example.com.", "A").to_wire())
    async with running_edge(tmp_path) as edge:
        got = await curl(edge, version, "--include", f"{edge.url}?dns={b64url(query.to_wire())}")
        assert got.returncode == 0, got.stderr
        head, _, body = got.stdout.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/2 200" if version == "--http2" else b"HTTP/1.1 200")
        assert b"content-type: application/dns-message" in head.lower()
        assert b"cache-control: max-age=3600" in head.lower()
        reply = dns.message.from_wire(body)
        assert [r.to_text() for r in reply.answer[0]] == ["192.0.2.80"]
        posted = await curl(edge, version, "--data-binary", f"@{posted_query}", "-H",
                            "Content-Type: application/dns-message", edge.url)
        assert posted.returncode == 0, posted.stderr
        reply = dns.message.from_wire(posted.stdout)
        assert [r.to_text() for r in reply.answer[0]] == ["192.0.2.25"]


async def test_a_large_post_over_http1_is_answered_without_waiting_out_expect(
    tmp_path: Path,
) -> None:
    padded = dns.message.make_query("www.example.com.", "A", use_edns=0, payload=8192,
                                    pad=4000)
    query = tmp_path / "padded.bin"
    query.write_bytes(padded.to_wire())
    async with running_edge(tmp_path) as edge:
        got = await curl(edge, "--http1.1", "--expect100-timeout", "30", "--data-binary",
                         f"@{query}", "-H", "Content-Type: application/dns-message", edge.url)
        assert got.returncode == 0, got.stderr
        assert [r.to_text() for r in dns.message.from_wire(got.stdout).answer[0]] == [
            "192.0.2.80"]


async def test_a_negative_answer_is_cached_no_longer_than_the_soa_minimum(
    tmp_path: Path,
) -> None:
    query = dns.message.make_query("nowhere.example.com.", "A")
    async with running_edge(tmp_path) as edge:
        got = await curl(edge, "--http2", "--include", f"{edge.url}?dns={b64url(query.to_wire())}")
        head, _, body = got.stdout.partition(b"\r\n\r\n")
        assert dns.message.from_wire(body).rcode() == dns.rcode.NXDOMAIN
        assert b"cache-control: max-age=300" in head.lower()


@pytest.mark.parametrize("version", ["--http2", "--http1.1"])
async def test_malformed_requests_get_400_and_the_edge_keeps_serving(
    tmp_path: Path, version: str,
) -> None:
    async with running_edge(tmp_path) as edge:
        for target in (f"{edge.url}?dns=!!!", f"{edge.url}?dns=AAAA", f"{edge.url}",
                       f"{edge.url}?dns={b64url(b'x' * 40)}&dns=AAAA"):
            got = await curl(edge, version, "--output", "/dev/null", "--write-out",
                             "%{http_code}", target)
            assert got.stdout == b"400", target
        wrong_type = await curl(edge, version, "--output", "/dev/null", "--write-out",
                                "%{http_code}", "--data-binary", "x" * 20, edge.url)
        assert wrong_type.stdout == b"415"
        # Bytes that are not a DNS query (a nonsense header, a query with bytes after it)
        # are 400 with a line saying why, not 200 with a DNS error: POST and GET alike.
        query = dns.message.make_query("www.example.com.", "A").to_wire()
        for index, garbage in enumerate((b"x" * 40, query + b"\x00")):
            body = tmp_path / f"garbage-{index}.bin"
            body.write_bytes(garbage)
            for how in (["--data-binary", f"@{body}", "-H",
                         "Content-Type: application/dns-message", edge.url],
                        [f"{edge.url}?dns={b64url(garbage)}"]):
                got = await curl(edge, version, "--write-out", "\n%{http_code}", *how)
                text, _, status = got.stdout.rpartition(b"\n")
                assert status == b"400", how
                assert text.startswith(b"not a DNS query: "), text
        elsewhere = await curl(edge, version, "--output", "/dev/null", "--write-out",
                               "%{http_code}", f"https://127.0.0.1:{edge.port}/fabric")
        assert elsewhere.stdout == b"404"
        reply = await trio.to_thread.run_sync(
            lambda: dnspython_ask(edge, "www.example.com.", "AAAA", post=True))
        assert [r.to_text() for r in reply.answer[0]] == ["2001:db8::80"]


@pytest.mark.parametrize("version", ["--http2", "--http1.1"])
async def test_head_gets_the_status_and_headers_without_a_body(
    tmp_path: Path, version: str
) -> None:
    async with running_edge(tmp_path) as edge:
        for url, status in ((edge.url, b"405"), (f"https://127.0.0.1:{edge.port}/", b"200")):
            got = await curl(edge, version, "--head", "--output", "/dev/null", "--write-out",
                             "%{http_code}", url)
            assert (got.returncode, got.stdout) == (0, status), got.stderr


async def test_an_oversized_body_gets_413(tmp_path: Path) -> None:
    async with running_edge(tmp_path, EdgeBounds(max_body_bytes=100)) as edge:
        for version in ("--http2", "--http1.1"):
            got = await curl(edge, version, "--output", "/dev/null", "--write-out",
                             "%{http_code}", "-H", "Content-Type: application/dns-message",
                             "--data-binary", "x" * 200, edge.url)
            assert got.stdout == b"413", version


async def test_garbage_instead_of_tls_is_closed_at_once(tmp_path: Path) -> None:
    async with running_edge(tmp_path) as edge:
        garbage = await trio.open_tcp_stream("127.0.0.1", edge.port)
        async with garbage:
            await garbage.send_all(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)))
            with trio.fail_after(LIMIT):
                assert await garbage.receive_some(100) == b""
        assert edge.stats.handshakes_failed == 1


async def test_silent_connections_holding_every_slot_give_way_to_a_client_that_asks(
    tmp_path: Path,
) -> None:
    bounds = EdgeBounds(handshake_timeout=600.0, max_connections=4)
    async with running_edge(tmp_path, bounds) as edge:
        silent = [await trio.open_tcp_stream("127.0.0.1", edge.port) for _ in range(4)]
        try:
            await trio.sleep(0.2)  # all four accepted: every slot held
            reply = await trio.to_thread.run_sync(
                lambda: dnspython_ask(edge, "www.example.com.", "A", post=False))
            assert reply.rcode() == dns.rcode.NOERROR
            assert edge.stats.displaced == 1
            with trio.fail_after(LIMIT):  # the oldest silent one made the room
                assert await silent[0].receive_some(100) == b""
        finally:
            for stream in silent:
                await stream.aclose()


@pytest.mark.parametrize("alpn", ["h2", "http/1.1"])
async def test_garbage_inside_tls_ends_that_connection_only(tmp_path: Path, alpn: str) -> None:
    noise = random.Random(8484)
    async with running_edge(tmp_path, EdgeBounds(idle_timeout=1.0)) as edge:
        context = ssl.create_default_context(cafile=str(edge.cafile))
        context.set_alpn_protocols([alpn])
        for size in (1, 24, 100, 4096, 20000):
            stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", edge.port,
                                                         ssl_context=context)
            junk = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" if alpn == "h2" else b"") + bytes(
                noise.getrandbits(8) for _ in range(size))
            try:
                with contextlib.suppress(trio.BrokenResourceError):
                    await stream.send_all(junk)
                    with trio.fail_after(LIMIT):  # an answer (400, GOAWAY), then the close;
                        while await stream.receive_some(65536):  # a frame cut short: idle
                            pass
            finally:
                await trio.aclose_forcefully(stream)
        reply = await trio.to_thread.run_sync(
            lambda: dnspython_ask(edge, "www.example.com.", "A", post=True))
        assert [r.to_text() for r in reply.answer[0]] == ["192.0.2.80"]


async def test_a_renewed_certificate_serves_new_handshakes_and_spares_open_ones(
    tmp_path: Path,
) -> None:
    async with running_edge(tmp_path) as edge:
        context = ssl.create_default_context(cafile=str(edge.cafile))
        context.set_alpn_protocols(["http/1.1"])
        first = await trio.open_ssl_over_tcp_stream("127.0.0.1", edge.port,
                                                    ssl_context=context)
        await first.do_handshake()
        before = first.getpeercert(binary_form=True)
        renewed = edge.ca.issue(("example.com",), days=60)
        edge.slot.swap(renewed)
        second = await trio.open_ssl_over_tcp_stream("127.0.0.1", edge.port,
                                                     ssl_context=context)
        await second.do_handshake()
        assert second.getpeercert(binary_form=True) != before
        for stream in (first, second):  # the old connection still answers
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
            with trio.fail_after(LIMIT):
                data = await stream.receive_some(4096)
            assert data.startswith(b"HTTP/1.1 200")
            await stream.aclose()


async def test_an_edge_without_a_certificate_starts_serving_when_one_arrives(
    tmp_path: Path,
) -> None:
    async with running_edge(tmp_path, certified=False) as edge:
        edge.slot.swap(edge.ca.issue(("example.com",)))
        reply = await trio.to_thread.run_sync(
            lambda: dnspython_ask(edge, "www.example.com.", "A", post=True))
        assert reply.rcode() == dns.rcode.NOERROR


async def test_kdig_over_https(tmp_path: Path) -> None:
    async with running_edge(tmp_path) as edge:
        with trio.fail_after(LIMIT):
            got = await trio.run_process(
                ["kdig", "@127.0.0.1", "-p", str(edge.port), "+https=/dns-query",
                 f"+tls-ca={edge.cafile}", "+tls-hostname=example.com", "+short",
                 "www.example.com", "A"],
                capture_stdout=True, capture_stderr=True, check=False,
            )
        assert got.stdout.strip() == b"192.0.2.80", got.stderr

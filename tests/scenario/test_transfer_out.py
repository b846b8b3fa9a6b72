"""AXFR out of the TCP serve loop, in-process over real loopback sockets, asked by
dnspython's and dig's transfer clients: the whole zone from one version in several
signed messages, and a refusal for every request that is not a listed secondary's
correctly signed one: NOTAUTH with the TSIG error RFC 8945 prescribes for a key, MAC or
time that fails, REFUSED for an ACL miss. IXFR over UDP out of the UDP serve loop: the SOA
when up to date, the journal's difference when it fits the datagram, TC otherwise."""

from __future__ import annotations

import base64
import functools
import re
import socket
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Sequence

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import dns.renderer
import dns.rrset
import dns.tsig
import dns.tsigkeyring
import dns.xfr
import dns.zone
import pytest
import trio

from tests.scenario.loopback_serve import serve_loops
from valis_core.dns import dnssec, wire
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.serve import serve_tcp
from valis_core.dns.serve.transfer_serve import INCREMENTAL_HERE, MAX_DATAGRAMS, Transfers
from valis_core.dns.transfer import Listed
from valis_core.dns.transfer.journal import Difference
from valis_core.dns.transfer.notify_send import ChangeWatch, NotifySender
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

ZONE = "example.test."
KEY_NAME = "xfr.example."
SECRET = bytes(range(32))
LIMIT = 20.0
HOSTS = 3000


def zone_text(serial: int, hosts: int = HOSTS) -> str:
    lines = [
        f"$ORIGIN {ZONE}", "$TTL 300",
        f"@ IN SOA ns1 hostmaster {serial} 7200 3600 1209600 300",
        "@ IN NS ns1", "ns1 IN A 192.0.2.53", "@ IN MX 10 mail", "mail IN A 192.0.2.25",
        "sub IN NS ns.sub", "ns.sub IN A 192.0.2.54",
    ]
    lines += [f"h{i} IN A 198.51.100.{i % 250 + 1}" for i in range(hosts)]
    return "\n".join(lines) + "\n"


def listed(address: str = "127.0.0.1") -> Listed:
    return Listed(ZONE, address, KEY_NAME, "hmac-sha256", SECRET)


class Node:
    def __init__(self, port: int, udp_port: int, holder: IndexHolder, transfers: Transfers,
                 secondaries: list[Listed]) -> None:
        self.port = port
        self.udp_port = udp_port
        self.holder = holder
        self.transfers = transfers
        self.secondaries = secondaries


@pytest.fixture
async def node(nursery: trio.Nursery) -> AsyncIterator[Node]:
    secondaries = [listed()]

    async def current() -> Sequence[Listed]:
        return tuple(secondaries)

    holder = IndexHolder(ZoneIndex.from_zone_text(zone_text(1), ZONE))
    transfers = Transfers(current, lambda: tuple(secondaries))
    async with serve_loops(nursery, holder, transfers) as (port, udp_port):
        yield Node(port, udp_port, holder, transfers, secondaries)


def keyring(secret: bytes = SECRET) -> dict[dns.name.Name, dns.tsig.Key]:
    return dns.tsigkeyring.from_text({KEY_NAME: ("hmac-sha256", base64.b64encode(secret).decode())})


def axfr(port: int, secret: bytes | None = SECRET) -> dns.zone.Zone:
    zone = dns.zone.Zone(ZONE)
    query, _ = dns.xfr.make_query(zone)
    if secret is not None:
        query.use_tsig(keyring(secret), KEY_NAME)
    dns.query.inbound_xfr("127.0.0.1", zone, query, port=port, timeout=LIMIT, lifetime=LIMIT)
    return zone


async def test_a_listed_secondary_gets_the_whole_zone_in_signed_messages(node: Node) -> None:
    got = await trio.to_thread.run_sync(axfr, node.port)
    expected = dns.zone.from_text(zone_text(1), ZONE, relativize=False)
    got_abs = dns.zone.from_text(got.to_text(relativize=False), ZONE, relativize=False)
    assert got_abs == expected
    assert node.transfers.stats.completed == 1
    (state,) = node.transfers.progress.report([listed()], {ZONE: (2, 100.0)}, now=130.0)
    assert (state.serial, state.lag_serials, state.lag_seconds) == (1, 1, 30.0)

    # dig checks every message's TSIG too, and says how many messages there were.
    key = f"hmac-sha256:{KEY_NAME}:{base64.b64encode(SECRET).decode()}"
    result = await trio.to_thread.run_sync(lambda: subprocess.run(
        ["dig", "@127.0.0.1", "-p", str(node.port), ZONE, "AXFR", "-y", key, "+noall",
         "+answer", "+stats"], capture_output=True, text=True, timeout=LIMIT, check=False))
    assert result.returncode == 0, result.stderr
    records = [line for line in result.stdout.splitlines() if line and not line.startswith(";")]
    assert len(records) == HOSTS + 8  # SOA twice, the six other records, the hosts
    assert "Couldn't verify" not in result.stdout + result.stderr
    messages = re.search(r"XFR size: \d+ records \(messages (\d+),", result.stdout)
    assert messages is not None
    assert int(messages[1]) > 1


async def test_a_transfer_comes_from_the_version_served_when_it_was_asked(node: Node) -> None:
    first: list[dns.zone.Zone] = []

    async def transfer() -> None:
        first.append(await trio.to_thread.run_sync(axfr, node.port))

    async with trio.open_nursery() as inner:
        inner.start_soon(transfer)
        with trio.fail_after(LIMIT):
            while not node.transfers.stats.running:
                await trio.sleep(0.001)
        node.holder.swap(ZoneIndex.from_zone_text(zone_text(2, hosts=10), ZONE))
    assert first[0].get_soa().serial == 1
    assert len(list(first[0].iterate_rdatas())) == HOSTS + 7
    got = await trio.to_thread.run_sync(axfr, node.port)
    assert got.get_soa().serial == 2
    assert len(list(got.iterate_rdatas())) == 10 + 7


@pytest.mark.parametrize("case", ["unsigned", "unlisted address"])
async def test_anyone_else_is_refused_and_counted(node: Node, case: str) -> None:
    secret: bytes | None = SECRET
    if case == "unsigned":
        secret = None
    else:
        node.secondaries[:] = [listed("192.0.2.99")]
    with pytest.raises(dns.xfr.TransferError) as refused:
        await trio.to_thread.run_sync(axfr, node.port, secret)
    assert refused.value.rcode == dns.rcode.REFUSED
    kind = {"unsigned": "unsigned", "unlisted address": "unlisted"}[case]
    assert node.transfers.stats.refused[kind] == 1
    assert node.transfers.stats.completed == 0


async def test_a_stranger_is_refused_from_the_list_in_memory_while_the_database_hangs(
    nursery: trio.Nursery,
) -> None:
    """Access is decided against the secondaries held in memory: an unlisted address, an
    unsigned request and a key that does not verify are refused without the database
    being asked, so they are answered even while it does not answer at all."""
    asked = 0

    async def hung() -> Sequence[Listed]:
        nonlocal asked
        asked += 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    holder = IndexHolder(ZoneIndex.from_zone_text(zone_text(1, hosts=10), ZONE))
    transfers = Transfers(hung, lambda: (listed("192.0.2.99"),))
    async with serve_loops(nursery, holder, transfers) as (port, _):
        for secret in (SECRET, None):
            with trio.fail_after(LIMIT), pytest.raises(dns.xfr.TransferError) as refused:
                await trio.to_thread.run_sync(axfr, port, secret)
            assert refused.value.rcode == dns.rcode.REFUSED
        wrong = signed_at(dns.message.make_query(ZONE, "AXFR"),
                          dns.tsig.Key(KEY_NAME, bytes(32), "hmac-sha256"))
        with trio.fail_after(LIMIT):
            response = await trio.to_thread.run_sync(lambda: exchange(port, wrong, tcp=True))
        assert response.rcode() == dns.rcode.NOTAUTH
    assert asked == 0
    assert transfers.stats.refused["unlisted"] == 2
    assert transfers.stats.refused["bad_signature"] == 1


async def test_a_secondary_removed_from_the_database_is_refused_before_the_next_refresh(
    nursery: trio.Nursery,
) -> None:
    """A request the list in memory grants is decided again against the database: a
    secondary the operator removed since that list was read (here: its key now listed at
    another address) is refused."""
    asked = 0

    async def removed() -> Sequence[Listed]:
        nonlocal asked
        asked += 1
        return (listed("192.0.2.99"),)

    holder = IndexHolder(ZoneIndex.from_zone_text(zone_text(1, hosts=10), ZONE))
    transfers = Transfers(removed, lambda: (listed(),))
    async with serve_loops(nursery, holder, transfers) as (port, _):
        with pytest.raises(dns.xfr.TransferError) as refused:
            await trio.to_thread.run_sync(axfr, port)
    assert refused.value.rcode == dns.rcode.REFUSED
    assert asked == 1
    assert transfers.stats.refused["unlisted"] == 1
    assert transfers.stats.completed == 0


@pytest.mark.parametrize("current", [True, False])
async def test_a_list_in_memory_known_current_decides_without_a_read(
    nursery: trio.Nursery, current: bool
) -> None:
    """When the list in memory is known to be the database's (``current``), a transfer
    it grants reads nothing (a fleet's thousands of transfers at once would each read
    every secondary); when it may not be, the database is asked."""
    asked = 0

    async def read() -> Sequence[Listed]:
        nonlocal asked
        asked += 1
        return (listed(),)

    holder = IndexHolder(ZoneIndex.from_zone_text(zone_text(1, hosts=10), ZONE))
    transfers = Transfers(read, lambda: (listed(),),
                          current=lambda: (listed(),) if current else None)
    async with serve_loops(nursery, holder, transfers) as (port, _):
        await trio.to_thread.run_sync(axfr, port)
        await trio.to_thread.run_sync(axfr, port)
    assert transfers.stats.completed == 2
    assert asked == (0 if current else 2)


def signed_at(query: dns.message.Message, key: dns.tsig.Key, skew: float = 0) -> bytes:
    """``query`` signed with ``key`` by a client whose clock is ``skew`` seconds off."""
    query.use_tsig(key)
    clock = dns.renderer.time.time  # type: ignore[attr-defined]
    dns.renderer.time.time = lambda: clock() + skew  # type: ignore[attr-defined]
    try:
        return query.to_wire()
    finally:
        dns.renderer.time.time = clock  # type: ignore[attr-defined]


def exchange(port: int, request: bytes, *, tcp: bool) -> dns.message.Message:
    """One response to ``request`` over loopback, its TSIG read but not checked."""
    if tcp:
        with socket.create_connection(("127.0.0.1", port), timeout=LIMIT) as sock:
            sock.sendall(struct.pack("!H", len(request)) + request)
            data = b""
            while len(data) < 2 or len(data) < 2 + struct.unpack("!H", data[:2])[0]:
                chunk = sock.recv(65535)
                assert chunk, "the connection closed before the response"
                data += chunk
            return dns.message.from_wire(data[2:], keyring=False)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(LIMIT)
        sock.sendto(request, ("127.0.0.1", port))
        return dns.message.from_wire(sock.recv(65535), keyring=False)


@pytest.mark.parametrize(("ask", "tcp"), [("AXFR", True), ("IXFR", False), ("SOA", False),
                                          ("SOA", True)])
async def test_a_tsig_that_fails_is_notauth_with_the_error_rfc_8945_names(
    node: Node, ask: str, tcp: bool
) -> None:
    """An unknown key is BADKEY and a bad MAC BADSIG, both unsigned with an empty MAC; a
    time outside the fudge is BADTIME, signed, with the server's time in Other Data (RFC
    8945 sections 5.2 and 5.3.2), as NSD and Knot answer them: for a transfer or for the
    SOA query a secondary sends before one, over either transport."""
    unknown = dns.tsig.Key("nobody.example.", SECRET, "hmac-sha256")
    wrong = dns.tsig.Key(KEY_NAME, bytes(32), "hmac-sha256")
    right = keyring()[dns.name.from_text(KEY_NAME)]
    cases = [("unknown_key", unknown, 0, dns.rcode.BADKEY),
             ("bad_signature", wrong, 0, dns.rcode.BADSIG),
             ("bad_time", right, -1000, dns.rcode.BADTIME),
             ("bad_time", right, 1000, dns.rcode.BADTIME)]
    for kind, key, skew, error in cases:
        query = dns.message.make_query(ZONE, ask, use_edns=0)
        if ask == "IXFR":
            query.authority.append(dns.rrset.from_text(
                ZONE, 300, "IN", "SOA", f"ns1.{ZONE} hostmaster.{ZONE} 1 7200 3600 1209600 300"))
        request = signed_at(query, key, skew)
        before = int(time.time())
        response = await trio.to_thread.run_sync(
            functools.partial(exchange, node.port if tcp else node.udp_port, request, tcp=tcp))
        assert response.rcode() == dns.rcode.NOTAUTH, kind
        assert response.edns >= 0  # the query had EDNS, so the reply has an OPT
        assert response.tsig is not None
        tsig = response.tsig[0]
        assert (response.tsig.name, tsig.error) == (key.name, error)
        assert query.tsig is not None
        assert tsig.time_signed == query.tsig[0].time_signed  # the request's, even BADTIME's
        if error == dns.rcode.BADTIME:
            assert len(tsig.mac) == 32
            assert before <= int.from_bytes(tsig.other, "big") <= int(time.time())
        else:
            assert (tsig.mac, tsig.other) == (b"", b"")
        if ask != "SOA":
            assert node.transfers.stats.refused[kind] >= 1
    assert node.transfers.stats.completed == 0
    assert node.transfers.stats.signed_answers == 0


async def test_a_key_listed_for_another_zone_or_address_is_refused_signed(node: Node) -> None:
    """A key the node holds (another secondary's) that verifies, used where it is not
    listed: the transfer is REFUSED, as NSD refuses an ACL miss, and the refusal is
    signed with that key (RFC 8945 section 5.3); its SOA query is answered signed."""
    other = Listed("other.test.", "127.0.0.1", "other.example.", "hmac-sha256", bytes(32))
    node.secondaries.append(other)
    query = dns.message.make_query(ZONE, "AXFR")
    request = signed_at(query, other.key())
    response = await trio.to_thread.run_sync(lambda: exchange(node.port, request, tcp=True))
    assert response.rcode() == dns.rcode.REFUSED
    dns.message.from_wire(response.to_wire(), keyring={other.key().name: other.key()},
                          request_mac=query.mac)  # raises unless signed with the key
    assert node.transfers.stats.refused["unlisted"] == 1

    soa = dns.message.make_query(ZONE, "SOA")
    soa.use_tsig(other.key())
    answered = await trio.to_thread.run_sync(lambda: dns.query.udp(
        soa, "127.0.0.1", port=node.udp_port, timeout=LIMIT))  # dnspython checks the TSIG
    assert answered.rcode() == dns.rcode.NOERROR
    assert answered.answer[0][0].serial == 1


@pytest.mark.parametrize("tcp", [False, True])
async def test_a_signed_notify_is_judged_by_its_tsig_before_its_opcode(
    node: Node, tcp: bool
) -> None:
    """The node takes no NOTIFY (NOTIMP), but a signed one's TSIG is judged first (RFC
    8945 section 5.2): a listed key's NOTIFY is NOTIMP signed with it, another key's
    BADKEY, as NSD and Knot judge theirs."""
    def notify(key: dns.tsig.Key | None) -> tuple[dns.message.Message, bytes]:
        query = dns.message.make_query(ZONE, "SOA")
        query.set_opcode(dns.opcode.NOTIFY)
        query.answer.append(dns.rrset.from_text(
            ZONE, 300, "IN", "SOA", f"ns1.{ZONE} hostmaster.{ZONE} 2 7200 3600 1209600 300"))
        return query, (signed_at(query, key) if key is not None else query.to_wire())

    port = node.port if tcp else node.udp_port
    query, wire = notify(keyring()[dns.name.from_text(KEY_NAME)])
    response = await trio.to_thread.run_sync(lambda: exchange(port, wire, tcp=tcp))
    assert response.rcode() == dns.rcode.NOTIMP
    key = keyring()[dns.name.from_text(KEY_NAME)]
    dns.message.from_wire(response.to_wire(), keyring={key.name: key},
                          request_mac=query.mac)  # raises unless signed with the key
    _, wire = notify(dns.tsig.Key("nobody.example.", SECRET, "hmac-sha256"))
    response = await trio.to_thread.run_sync(lambda: exchange(port, wire, tcp=tcp))
    assert response.rcode() == dns.rcode.NOTAUTH
    assert response.tsig is not None
    assert response.tsig[0].error == dns.rcode.BADKEY
    _, wire = notify(None)
    response = await trio.to_thread.run_sync(lambda: exchange(port, wire, tcp=tcp))
    assert (response.rcode(), response.tsig) == (dns.rcode.NOTIMP, None)


async def test_dig_reads_the_tsig_errors_as_it_reads_nsd_s(node: Node) -> None:
    wrong = base64.b64encode(bytes(32)).decode()
    for key, error in ((f"hmac-sha256:{KEY_NAME}:{wrong}", None),
                       (f"hmac-sha256:nobody.example.:{wrong}", "BADKEY")):
        result = await trio.to_thread.run_sync(functools.partial(
            subprocess.run,
            ["dig", "@127.0.0.1", "-p", str(node.udp_port), ZONE, "SOA", "+edns", "-y", key],
            capture_output=True, text=True, timeout=LIMIT, check=False))
        assert "status: NOTAUTH" in result.stdout
        assert "Couldn't verify signature: tsig indicates error" in result.stdout
        assert "OPT PSEUDOSECTION" in result.stdout
        if error is not None:
            assert f" {error} 0" in result.stdout  # the TSIG line: error, no Other Data


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_a_listed_secondary_s_signed_soa_query_is_answered_signed(
    node: Node, transport: str
) -> None:
    def ask(secret: bytes) -> dns.message.Message:
        query = dns.message.make_query(ZONE, "SOA")
        query.use_tsig(keyring(secret), KEY_NAME)
        if transport == "udp":
            return dns.query.udp(query, "127.0.0.1", port=node.udp_port, timeout=LIMIT,
                         one_rr_per_rrset=True)
        return dns.query.tcp(query, "127.0.0.1", port=node.port, timeout=LIMIT)

    response = await trio.to_thread.run_sync(ask, SECRET)  # dnspython checks its TSIG
    assert response.rcode() == dns.rcode.NOERROR
    assert response.had_tsig
    assert response.answer[0][0].serial == 1
    assert node.transfers.stats.signed_answers == 1

    # From an address not listed, the key still verifies: the answer is the one anyone
    # gets unsigned, signed (as NSD answers it). A key no secondary has is BADKEY.
    node.secondaries[:] = [listed("192.0.2.99")]
    response = await trio.to_thread.run_sync(ask, SECRET)
    assert response.had_tsig
    node.secondaries[:] = []
    with pytest.raises(dns.tsig.PeerBadKey):
        await trio.to_thread.run_sync(ask, SECRET)


async def test_a_stalled_transfer_is_cut_at_its_deadline_and_frees_its_slot() -> None:
    secondaries = (listed(),)

    async def current() -> Sequence[Listed]:
        return secondaries

    transfers = Transfers(current, lambda: secondaries, max_transfers=1, deadline=1.0)
    holder = IndexHolder(ZoneIndex.from_zone_text(zone_text(1), ZONE))
    with trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener, \
            trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stalled:
        # Small buffers both ends (an accepted socket takes the listener's), so a reader
        # that stops reading stops the transfer within a few messages.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        await listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: serve_tcp(listener, holder, transfers=transfers))
            await stalled.connect(("127.0.0.1", port))
            query, _ = dns.xfr.make_query(dns.zone.Zone(ZONE))
            query.use_tsig(keyring(), KEY_NAME)
            request = query.to_wire()
            await stalled.send(len(request).to_bytes(2, "big") + request)
            with trio.fail_after(LIMIT):
                while not transfers.stats.failed:
                    await trio.sleep(0.01)
            assert (transfers.stats.running, transfers.stats.completed) == (0, 0)
            got = await trio.to_thread.run_sync(axfr, port)
            assert len(list(got.iterate_rdatas())) == HOSTS + 7
            assert transfers.stats.completed == 1
            with trio.fail_after(LIMIT):  # what was sent, then the end: it was closed
                while await stalled.recv(65536):
                    pass
            nursery.cancel_scope.cancel()


def ixfr_query(serial: int) -> dns.message.Message:
    query = dns.message.make_query(ZONE, "IXFR")
    soa = f"ns1.{ZONE} hostmaster.{ZONE} {serial} 7200 3600 1209600 300"
    query.authority.append(dns.rrset.from_text_list(ZONE, 300, "IN", "SOA", [soa]))
    query.use_tsig(keyring(), KEY_NAME)
    return query


@pytest.mark.parametrize("serial", [1, 0])
async def test_an_ixfr_over_udp_without_the_history_is_the_soa_alone_and_tc_when_behind(
    node: Node, serial: int
) -> None:
    response = await trio.to_thread.run_sync(lambda: dns.query.udp(
        ixfr_query(serial), "127.0.0.1", port=node.udp_port, timeout=LIMIT))
    assert response.rcode() == dns.rcode.NOERROR
    assert response.had_tsig
    assert [(rrset.rdtype, rrset[0].serial) for rrset in response.answer] == [
        (dns.rdatatype.SOA, 1)]
    # Up to date, that is the whole answer; behind (no journal here), ask over TCP.
    assert bool(response.flags & dns.flags.TC) == (serial == 0)


def row(owner: str, rtype: str, rdata: str) -> RecordRow:
    return RecordRow(ZONE, owner, rtype, 300, rdata)


def soa_row(serial: int) -> RecordRow:
    return row(ZONE, "SOA", f"ns1.{ZONE} hostmaster.{ZONE} {serial} 7200 3600 1209600 300")


ADDED_MOST = INCREMENTAL_HERE + 500
"""The most hosts a test's journal difference adds."""


class Journal:
    """The zone's history as the resident's journal gives it: from serial 1 to 2, ``added``
    new hosts and ``gone`` removed; ``hold`` keeps every read waiting until it is set."""

    def __init__(self, added: int) -> None:
        self.added = added
        self.hold: trio.Event | None = None
        self.reads = 0

    async def __call__(self, zone: str, old: int, new: int) -> Difference | None:
        self.reads += 1
        if self.hold is not None:
            await self.hold.wait()
        if (zone, old, new) != (ZONE, 1, 2):
            return None
        added = tuple(row(f"new{i}.{ZONE}", "A", f"203.0.113.{i % 250 + 1}")
                      for i in range(self.added))
        return Difference(soa_row(1), (row(f"gone.{ZONE}", "A", "192.0.2.99"),), added, 1)


@pytest.fixture
async def journal_node(nursery: trio.Nursery) -> AsyncIterator[tuple[Node, Journal]]:
    """A node serving serial 2 of the zone (UDP and TCP), whose journal reaches back to
    serial 1."""
    secondaries = [listed()]

    async def current() -> Sequence[Listed]:
        return tuple(secondaries)

    journal = Journal(added=3)
    # Serial 2 holds every host the journal's difference may add (an IXFR sends the RRsets
    # it touches as the zone serves them).
    added = "".join(f"new{i} IN A 203.0.113.{i % 250 + 1}\n" for i in range(ADDED_MOST))
    holder = IndexHolder(ZoneIndex.from_zone_text(zone_text(2, hosts=20) + added, ZONE))
    transfers = Transfers(current, lambda: tuple(secondaries), journal=journal)
    async with serve_loops(nursery, holder, transfers) as (port, udp_port):
        yield Node(port, udp_port, holder, transfers, secondaries), journal


async def test_an_ixfr_of_a_difference_too_large_to_make_on_the_serving_thread_is_whole(
    journal_node: tuple[Node, Journal],
) -> None:
    """A difference of more than ``INCREMENTAL_HERE`` records is made into the IXFR on a
    worker thread; the secondary gets all of it, as from a small one."""
    node, journal = journal_node
    journal.added = ADDED_MOST
    messages = await trio.to_thread.run_sync(lambda: list(dns.query.xfr(
        "127.0.0.1", ZONE, dns.rdatatype.IXFR, port=node.port, serial=1, keyring=keyring(),
        keyname=KEY_NAME, timeout=LIMIT, lifetime=LIMIT, relativize=False)))
    rrs = [(rrset.rdtype, rrset.name.to_text(), rdata.to_text())
           for message in messages for rrset in message.answer for rdata in rrset]
    soas = [i for i, rr in enumerate(rrs) if rr[0] == dns.rdatatype.SOA]
    assert soas == [0, 1, 3, len(rrs) - 1]
    assert rrs[2] == (dns.rdatatype.A, f"gone.{ZONE}", "192.0.2.99")
    assert sorted(rrs[4:-1]) == sorted(
        (dns.rdatatype.A, f"new{i}.{ZONE}", f"203.0.113.{i % 250 + 1}")
        for i in range(journal.added))
    assert node.transfers.stats.kinds["incremental"] == 1


def ask_udp(node: Node, serial: int, payload: int | None = None) -> dns.message.Message:
    query = ixfr_query(serial)
    if payload is not None:
        query.use_edns(0, payload=payload)
        query.use_tsig(keyring(), KEY_NAME)  # signed again, over the OPT too
    return dns.query.udp(query, "127.0.0.1", port=node.udp_port, timeout=LIMIT,
                         one_rr_per_rrset=True)


async def test_an_ixfr_over_udp_from_a_secondary_behind_is_the_difference_when_it_fits(
    journal_node: tuple[Node, Journal],
) -> None:
    node, _ = journal_node
    response = await trio.to_thread.run_sync(ask_udp, node, 1)  # dnspython checks its TSIG
    assert response.rcode() == dns.rcode.NOERROR
    assert not response.flags & dns.flags.TC
    got = [(rrset.rdtype, rrset.name.to_text(), rrset[0].to_text()) for rrset in response.answer]
    soa = [(dns.rdatatype.SOA, ZONE, f"ns1.{ZONE} hostmaster.{ZONE} {n} 7200 3600 1209600 300")
           for n in (1, 2)]
    assert got == [soa[1], soa[0], (dns.rdatatype.A, f"gone.{ZONE}", "192.0.2.99"), soa[1],
                   *[(dns.rdatatype.A, f"new{i}.{ZONE}", f"203.0.113.{i + 1}")
                     for i in range(3)], soa[1]]
    assert (node.transfers.stats.completed, node.transfers.stats.kinds["incremental"]) == (1, 1)
    (state,) = node.transfers.progress.report([listed()], {ZONE: (2, 100.0)}, now=100.0)
    assert (state.serial, state.lag_serials) == (2, 0)

    # dig asks the same over UDP (+notcp), checks the TSIG and shows the difference.
    key = f"hmac-sha256:{KEY_NAME}:{base64.b64encode(SECRET).decode()}"
    dug = await trio.to_thread.run_sync(lambda: subprocess.run(
        ["dig", "@127.0.0.1", "-p", str(node.udp_port), ZONE, "IXFR=1", "+notcp", "-y", key,
         "+noall", "+answer"], capture_output=True, text=True, timeout=LIMIT, check=False))
    assert dug.returncode == 0, dug.stderr
    assert "Couldn't verify" not in dug.stdout + dug.stderr
    assert len([line for line in dug.stdout.splitlines() if line.strip()]) == 8


async def test_an_ixfr_over_udp_too_big_for_the_datagram_is_the_soa_with_tc(
    journal_node: tuple[Node, Journal],
) -> None:
    node, journal = journal_node
    journal.added = 30  # about 600 bytes of records: more than 512, less than 1232
    plain = await trio.to_thread.run_sync(ask_udp, node, 1)
    assert plain.flags & dns.flags.TC
    assert [(rrset.rdtype, rrset[0].serial) for rrset in plain.answer] == [
        (dns.rdatatype.SOA, 2)]
    assert node.transfers.stats.completed == 0

    edns = await trio.to_thread.run_sync(ask_udp, node, 1, 1232)
    assert not edns.flags & dns.flags.TC
    assert edns.edns == 0
    assert len(edns.answer) == 30 + 1 + 4
    assert node.transfers.stats.completed == 1

    journal.added = 200  # beyond any datagram this server sends
    big = await trio.to_thread.run_sync(ask_udp, node, 1, 4096)
    assert big.flags & dns.flags.TC
    assert len(big.answer) == 1


async def test_ixfrs_over_udp_waiting_for_the_journal_are_bounded_and_the_rest_told_tc(
    journal_node: tuple[Node, Journal],
) -> None:
    node, journal = journal_node
    journal.hold = trio.Event()
    waiting: list[dns.message.Message] = []

    async def ask() -> None:
        waiting.append(await trio.to_thread.run_sync(ask_udp, node, 1))

    async with trio.open_nursery() as nursery:
        for _ in range(MAX_DATAGRAMS):
            nursery.start_soon(ask)
        with trio.fail_after(LIMIT):
            while journal.reads < MAX_DATAGRAMS:
                await trio.sleep(0.01)
        # Every slot is taken: the next is answered at once, TC, without the journal.
        over = await trio.to_thread.run_sync(ask_udp, node, 1)
        assert over.flags & dns.flags.TC
        assert journal.reads == MAX_DATAGRAMS
        journal.hold.set()
    assert len(waiting) == MAX_DATAGRAMS
    assert all(not response.flags & dns.flags.TC for response in waiting)
    assert node.transfers.stats.completed == MAX_DATAGRAMS


async def test_an_ixfr_over_tcp_is_the_soa_when_up_to_date_and_the_zone_otherwise(
    node: Node,
) -> None:
    def ixfr(serial: int) -> list[dns.message.Message]:
        return list(dns.query.xfr("127.0.0.1", ZONE, dns.rdatatype.IXFR, port=node.port,
                                  serial=serial, keyring=keyring(), keyname=KEY_NAME,
                                  timeout=LIMIT, lifetime=LIMIT))

    up_to_date = await trio.to_thread.run_sync(ixfr, 1)
    assert [len(message.answer) for message in up_to_date] == [1]
    behind = await trio.to_thread.run_sync(ixfr, 0)
    assert sum(len(message.answer) for message in behind) == HOSTS + 8


@pytest.mark.parametrize("serial", [1, 0])
async def test_every_transfer_message_to_an_edns_request_carries_an_opt(
    node: Node, serial: int
) -> None:
    """RFC 6891 section 7, as Knot sends it: the SOA alone of an up-to-date IXFR, and each
    message of a whole zone, has an OPT (echoing DO) before its TSIG."""
    query = dns.message.make_query(ZONE, "IXFR", use_edns=0, want_dnssec=True)
    query.authority.append(dns.rrset.from_text(
        ZONE, 300, "IN", "SOA", f"ns1.{ZONE} hostmaster.{ZONE} {serial} 7200 3600 1209600 300"))
    query.use_tsig(keyring(), KEY_NAME)

    def transfer() -> list[dns.message.Message]:
        got: list[dns.message.Message] = []
        with socket.create_connection(("127.0.0.1", node.port), timeout=LIMIT) as sock:
            dns.query.send_tcp(sock, query)
            ctx = None
            soas = 0
            with sock.makefile("rb") as stream:
                while soas < (1 if serial else 2):
                    (size,) = struct.unpack("!H", stream.read(2))
                    message = dns.message.from_wire(  # every message's TSIG checked in turn
                        stream.read(size), keyring=keyring(),
                        request_mac=b"" if got else query.mac, xfr=True, tsig_ctx=ctx,
                        multi=True, one_rr_per_rrset=True)
                    ctx = message.tsig_ctx
                    got.append(message)
                    soas += sum(rrset.rdtype == dns.rdatatype.SOA for rrset in message.answer)
                    assert len(got) < 100
        return got

    messages = await trio.to_thread.run_sync(transfer)
    assert (len(messages) == 1) == (serial == 1)
    assert all(m.edns == 0 and m.ednsflags & dns.flags.DO for m in messages)


# --- NOTIFY ----------------------------------------------------------------------------


class Secondary:
    """A secondary's NOTIFY port on loopback: reads each NOTIFY, checks its TSIG, and
    answers (signed) from the ``answer_from``-th one on; ``forge`` first sends an
    unsigned answer with the right ID, which must not count."""

    def __init__(self, sock: trio.socket.SocketType, *, answer_from: int = 1,
                 forge: bool = False) -> None:
        self.sock = sock
        self.answer_from = answer_from
        self.forge = forge
        self.received: list[dns.message.Message] = []

    async def run(self) -> None:
        while True:
            data, peer = await self.sock.recvfrom(65535)
            query = dns.message.from_wire(data, keyring=keyring())
            self.received.append(query)
            response = dns.message.make_response(query)
            if self.forge:
                forged = dns.message.make_response(dns.message.from_wire(data, keyring=False))
                forged.tsig = None
                await self.sock.sendto(_unsigned(forged), peer)
            if len(self.received) >= self.answer_from:
                await self.sock.sendto(response.to_wire(), peer)


def _unsigned(message: dns.message.Message) -> bytes:
    message.keyring = None
    message.tsig = None
    return message.to_wire()


@pytest.fixture
async def secondary_socket() -> AsyncIterator[trio.socket.SocketType]:
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.bind(("127.0.0.1", 0))
        yield sock


async def notify_run(
    secondary: Secondary, zones: Sequence[ZoneIndex], *, attempts: int = 5
) -> NotifySender:
    port = secondary.sock.getsockname()[1]

    async def current() -> Sequence[Listed]:
        return (listed(),)

    sender = NotifySender("127.0.0.1", current, port=port, attempts=attempts, timeout=0.2)
    holder = ChangeWatch(ZoneIndex.from_zone_text(zone_text(1, hosts=1), ZONE))
    holder.changed = sender.changed
    with trio.move_on_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(secondary.run)
            await nursery.start(sender.run)
            for index in zones:
                holder.swap(index)
            while sender.stats.answered + sender.stats.unanswered < 1:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    return sender


async def test_a_change_is_notified_signed_and_retried_until_answered(
    secondary_socket: trio.socket.SocketType,
) -> None:
    secondary = Secondary(secondary_socket, answer_from=3, forge=True)
    sender = await notify_run(secondary, [ZoneIndex.from_zone_text(zone_text(2, 1), ZONE)])
    assert (sender.stats.sent, sender.stats.answered, sender.stats.unanswered) == (3, 1, 0)
    first = secondary.received[0]
    assert first.opcode() == dns.opcode.NOTIFY
    assert first.flags & dns.flags.AA
    assert first.had_tsig
    assert first.keyname == dns.name.from_text(KEY_NAME)
    assert (first.question[0].name, first.question[0].rdtype) == (
        dns.name.from_text(ZONE), dns.rdatatype.SOA)
    assert first.answer[0][0].serial == 2


async def test_an_unanswered_notify_is_given_up_after_its_attempts(
    secondary_socket: trio.socket.SocketType,
) -> None:
    secondary = Secondary(secondary_socket, answer_from=99)
    sender = await notify_run(secondary, [ZoneIndex.from_zone_text(zone_text(2, 1), ZONE)],
                              attempts=3)
    assert (sender.stats.sent, sender.stats.answered, sender.stats.unanswered) == (3, 0, 1)


async def test_a_zone_left_untouched_by_a_swap_is_not_notified() -> None:
    untouched = ZoneIndex.from_zone_text(zone_text(1, hosts=1), ZONE)
    holder = ChangeWatch(untouched)
    seen: list[list[str]] = []
    holder.changed = lambda zones: seen.append([zone.origin for zone in zones])
    holder.swap(ZoneIndex([*untouched.served()], untouched.record_count))
    assert seen == []
    holder.swap(ZoneIndex.from_zone_text(zone_text(2, hosts=1), ZONE))
    assert seen == [[ZONE]]


async def test_an_ixfr_over_udp_of_a_signed_zone_is_tc_and_a_compact_zone_is_refused(
    journal_node: tuple[Node, Journal],
) -> None:
    """A zone signed with NSEC3 comes whole over TCP (the journal's difference is unsigned),
    so its IXFR over UDP is TC even when the difference would fit; a zone denying compactly
    cannot be sent signed at all, and is REFUSED, signed with the secondary's key."""
    node, _ = journal_node
    apex = wire.from_text(ZONE)
    key = dnssec.ZoneKey(dnssec.generate_key(dnssec.ED25519))
    node.holder.sign_with(Signer({apex: key}, clock=time.time, nsec3={apex: Nsec3Params()}))
    chained = await trio.to_thread.run_sync(ask_udp, node, 1, 1232)
    assert chained.flags & dns.flags.TC
    assert [rrset.rdtype for rrset in chained.answer] == [dns.rdatatype.SOA]
    assert node.transfers.stats.completed == 0

    node.holder.sign_with(Signer({apex: key}, clock=time.time))
    compact = await trio.to_thread.run_sync(ask_udp, node, 1, 1232)  # its TSIG checked
    assert compact.rcode() == dns.rcode.REFUSED
    assert not compact.answer
    assert node.transfers.stats.refused["signed_without_chain"] == 1

"""The node and a real NSD, serving the same zone to the same listed secondary (its address
and TSIG key) on loopback, answer every way a transfer request or a secondary's signed
query can fail alike: the RCODE, the TSIG error, whether the reply is signed, whether it
carries an OPT. The one difference is chosen: a BADTIME reply is signed, as RFC 8945
section 5.3.2 asks and Knot and BIND send it (NSD sends it unsigned). A NOTIFY NSD
rejects for its TSIG is not taken as an answer, and the node's log says what to fix."""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import attrs
import dns.message
import dns.opcode
import dns.query
import dns.rcode
import dns.renderer
import dns.rrset
import dns.tsig
import pytest
import trio

from tests.scenario.loopback_serve import free_port, serve_loops
from tests.scenario.nsd_conf import nsd_server
from tests.scenario.proving_ground import wait_for
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve.transfer_serve import Transfers
from valis_core.dns.transfer import Listed
from valis_core.dns.transfer.notify_send import ChangeWatch, NotifySender
from valis_core.dns.zone import ZoneIndex

ZONE = "example.test."
ZONE_TEXT = (f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n"
             "@ NS ns1\nns1 A 192.0.2.53\nwww A 192.0.2.80\n")
LISTED = Listed(ZONE, "127.0.0.1", "xfr.example.", "hmac-sha256", bytes(range(32)))
ELSEWHERE = Listed("other.test.", "127.0.0.9", "other.example.", "hmac-sha256",
                   bytes(range(1, 33)))
"""A key both servers hold that is not allowed to transfer ZONE."""
LISTED_KEY = LISTED.key()
LIMIT = 10.0


def nsd_conf(directory: Path, port: int) -> str:
    keys = "".join(f"""key:
    name: "{entry.key_name}"
    algorithm: {entry.algorithm}
    secret: "{base64.b64encode(entry.secret).decode()}"
""" for entry in (LISTED, ELSEWHERE))
    return nsd_server(directory, f"127.0.0.1@{port}", "server-count: 1") + f"""\
{keys}zone:
    name: "{ZONE}"
    zonefile: "{directory}/zone"
    provide-xfr: {LISTED.address} {LISTED.key_name}
"""


@pytest.fixture
def nsd(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "zone").write_text(ZONE_TEXT)
    port = free_port()
    (tmp_path / "nsd.conf").write_text(nsd_conf(tmp_path, port))
    output = tmp_path / "nsd.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(["nsd", "-d", "-c", str(tmp_path / "nsd.conf")],
                                   stdout=sink, stderr=subprocess.STDOUT)
    try:
        def serving() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"nsd exited: {output.read_text(errors='replace')}")
            try:
                dns.query.udp(dns.message.make_query(ZONE, "SOA"), "127.0.0.1", port=port,
                              timeout=0.2)
            except (OSError, dns.exception.Timeout):
                return False
            return True

        wait_for(serving, LIMIT, "nsd to answer")
        yield port
    finally:
        process.terminate()
        process.wait(LIMIT)


@pytest.fixture
async def node(nursery: trio.Nursery) -> AsyncIterator[int]:
    async with serving(nursery) as port:
        yield port


@contextlib.asynccontextmanager
async def serving(
    nursery: trio.Nursery, clock: Callable[[], float] = time.time
) -> AsyncIterator[int]:
    """The node's serve loops on a loopback port, its transfers' clock ``clock``."""
    secondaries = (LISTED, ELSEWHERE)

    async def current() -> Sequence[Listed]:
        return secondaries

    holder = IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, ZONE))
    transfers = Transfers(current, lambda: secondaries, clock=clock)
    async with serve_loops(nursery, holder, transfers, free_port()) as (port, _):
        yield port


@attrs.frozen
class Case:
    """One request: what it asks, how it is signed, where it comes from."""

    name: str
    qname: str = ZONE
    qtype: str = "AXFR"
    tcp: bool = True
    key: dns.tsig.Key | None = LISTED_KEY
    skew: float = 0
    edns: bool = False
    serial: int | None = None
    source: str = "127.0.0.1"
    tsig_ttl: int = 0
    notify: bool = False


UNKNOWN = dns.tsig.Key("nobody.example.", LISTED.secret, "hmac-sha256")
WRONG = dns.tsig.Key(LISTED.key_name, bytes(32), "hmac-sha256")
CASES = [
    Case("granted"),
    Case("granted, EDNS", edns=True),
    Case("unsigned", key=None),
    Case("unsigned, EDNS", key=None, edns=True),
    Case("a key no one listed", key=UNKNOWN),
    Case("a key no one listed, EDNS", key=UNKNOWN, edns=True),
    Case("a wrong secret", key=WRONG),
    Case("a wrong secret, from an unlisted address", key=WRONG, source="127.0.0.2"),
    Case("a time outside the fudge", skew=-1000),
    Case("a time outside the fudge, EDNS", skew=1000, edns=True),
    Case("a key listed for another zone", key=ELSEWHERE.key()),
    Case("an unlisted address", source="127.0.0.2"),
    Case("an unlisted address, unsigned", key=None, source="127.0.0.2"),
    Case("a zone not served", qname="nope.test."),
    Case("a zone not served, unsigned", qname="nope.test.", key=None),
    Case("a TSIG whose TTL is not 0", tsig_ttl=300),
    Case("IXFR up to date, EDNS", qtype="IXFR", serial=7, edns=True),
    Case("IXFR behind, EDNS", qtype="IXFR", serial=5, edns=True),
    Case("IXFR over UDP, up to date", qtype="IXFR", serial=7, tcp=False),
    Case("IXFR over UDP, a key no one listed", qtype="IXFR", serial=7, tcp=False, key=UNKNOWN),
    Case("IXFR over UDP, a wrong secret", qtype="IXFR", serial=7, tcp=False, key=WRONG),
    Case("IXFR over UDP, an unlisted address", qtype="IXFR", serial=7, tcp=False,
         source="127.0.0.2"),
    Case("SOA over UDP", qtype="SOA", tcp=False),
    Case("SOA over UDP, EDNS", qtype="SOA", tcp=False, edns=True),
    Case("SOA over UDP, a key no one listed", qtype="SOA", tcp=False, key=UNKNOWN),
    Case("SOA over UDP, a wrong secret", qtype="SOA", tcp=False, key=WRONG),
    Case("SOA over UDP, a time outside the fudge", qtype="SOA", tcp=False, skew=-1000),
    Case("SOA over TCP, a wrong secret", qtype="SOA", key=WRONG),
    Case("SOA over UDP, from an unlisted address", qtype="SOA", tcp=False,
         source="127.0.0.2"),
    Case("SOA over UDP, a key listed for another zone", qtype="SOA", tcp=False,
         key=ELSEWHERE.key()),
    Case("a name outside the zones over UDP, signed", qname="nope.test.", qtype="A",
         tcp=False),
    Case("NOTIFY, a key no one listed", qtype="SOA", tcp=False, key=UNKNOWN, notify=True),
    Case("NOTIFY, a wrong secret", qtype="SOA", tcp=False, key=WRONG, notify=True),
    Case("NOTIFY, a time outside the fudge", qtype="SOA", tcp=False, skew=1000, notify=True),
]


def request(case: Case) -> bytes:
    query = dns.message.make_query(case.qname, case.qtype, use_edns=0 if case.edns else False)
    if case.notify:
        query.set_opcode(dns.opcode.NOTIFY)
        query.answer.append(dns.rrset.from_text(
            case.qname, 300, "IN", "SOA", f"ns1.{ZONE} hostmaster.{ZONE} 8 7200 3600 1209600 300"))
    if case.serial is not None:
        query.authority.append(dns.rrset.from_text(
            case.qname, 300, "IN", "SOA",
            f"ns1.{ZONE} hostmaster.{ZONE} {case.serial} 7200 3600 1209600 300"))
    if case.key is None:
        return query.to_wire()
    query.use_tsig(case.key)
    clock = dns.renderer.time.time  # type: ignore[attr-defined]
    dns.renderer.time.time = lambda: clock() + case.skew  # type: ignore[attr-defined]
    try:
        wire = bytearray(query.to_wire())
    finally:
        dns.renderer.time.time = clock  # type: ignore[attr-defined]
    if case.tsig_ttl:  # the TTL sits before the rdata's length; the MAC does not cover it
        owner = case.key.name.to_wire() or b""
        at = wire.rindex(owner) + len(owner) + 4
        wire[at : at + 4] = case.tsig_ttl.to_bytes(4, "big")
    return bytes(wire)


def first_response(port: int, case: Case) -> bytes:
    wire = request(case)
    if case.tcp:
        with socket.create_connection(("127.0.0.1", port), timeout=LIMIT,
                                      source_address=(case.source, 0)) as sock:
            sock.sendall(struct.pack("!H", len(wire)) + wire)
            with sock.makefile("rb") as stream:
                (size,) = struct.unpack("!H", stream.read(2))
                return bytes(stream.read(size))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(LIMIT)
        sock.bind((case.source, 0))
        sock.sendto(wire, ("127.0.0.1", port))
        return sock.recv(65535)


def shape(response: bytes) -> dict[str, object]:
    """What is compared: the RCODE, the TSIG error and whether the reply is signed (a MAC),
    whether it has an OPT, how many answer records the first message holds. (NSD leaves
    the question out of a TSIG error; the node echoes it, as Knot does.)"""
    message = dns.message.from_wire(response, keyring=False, one_rr_per_rrset=True)
    tsig = message.tsig[0] if message.tsig is not None else None
    return {
        "rcode": dns.rcode.to_text(message.rcode()),
        "tsig error": None if tsig is None else dns.rcode.to_text(tsig.error),
        "signed": tsig is not None and bool(tsig.mac),
        "opt": message.edns >= 0,
        "answers": len(message.answer),
    }


async def test_the_node_answers_each_tsig_and_acl_case_as_nsd_does(nsd: int, node: int) -> None:
    differences = []
    for case in CASES:
        theirs = shape(await trio.to_thread.run_sync(first_response, nsd, case))
        ours = shape(await trio.to_thread.run_sync(first_response, node, case))
        if ours["tsig error"] == "BADTIME":
            assert ours["signed"], case.name  # signed, as RFC 8945 section 5.3.2 asks
            theirs = {**theirs, "signed": True}
        if ours != theirs:
            differences.append(f"{case.name}: node {ours}, nsd {theirs}")
    assert differences == []


async def test_a_badtime_reply_carries_both_clocks(node: int) -> None:
    """The time signed is the request's and Other Data the server's, so the client sees
    the skew (RFC 8945 section 5.2.3)."""
    case = Case("late", qtype="SOA", tcp=False, skew=-1000)
    before = int(time.time())
    response = await trio.to_thread.run_sync(first_response, node, case)
    message = dns.message.from_wire(response, keyring=False)
    assert message.tsig is not None
    tsig = message.tsig[0]
    assert before - 1001 <= tsig.time_signed <= int(time.time()) - 999
    assert before <= int.from_bytes(tsig.other, "big") <= int(time.time())


async def notify_serial_8(port: int, key: Listed, timeout: float) -> NotifySender:
    """The zone's change to serial 8 notified to 127.0.0.1 ``port`` as ``key`` lists it,
    two attempts of ``timeout``; the sender once it is answered or gives up."""
    async def current() -> Sequence[Listed]:
        return (key,)

    sender = NotifySender("127.0.0.1", current, port=port, attempts=2, timeout=timeout)
    holder = ChangeWatch(ZoneIndex.from_zone_text(ZONE_TEXT, ZONE))
    holder.changed = sender.changed
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        holder.swap(ZoneIndex.from_zone_text(ZONE_TEXT.replace(" 7 ", " 8 "), ZONE))
        with trio.fail_after(LIMIT):
            while sender.stats.answered + sender.stats.unanswered < 1:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return sender


@pytest.mark.parametrize(("key", "said"), [
    (Listed(ZONE, "127.0.0.1", "nobody.example.", "hmac-sha256", LISTED.secret),
     "NOTAUTH with TSIG error BADKEY: it does not know key nobody.example.: check the key's "
     "name and algorithm there"),
    (Listed(ZONE, "127.0.0.1", LISTED.key_name, "hmac-sha256", bytes(32)),
     "NOTAUTH with TSIG error BADSIG: its secret for key xfr.example. is not the node's: "
     "check the secret there"),
])
async def test_a_notify_rejected_for_its_tsig_says_why_in_the_log(
    nsd: int, key: Listed, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="valis.notify")
    sender = await notify_serial_8(nsd, key, timeout=0.05)
    assert (sender.stats.answered, sender.stats.unanswered) == (0, 1)
    assert (f"notify: {ZONE} serial 8 to 127.0.0.1: no answer to 2 attempts; it answered "
            f"{said} (a reply the key does not verify is not taken)") in caplog.text


async def test_a_notify_signed_with_a_key_nsd_holds_is_answered(
    nsd: int, caplog: pytest.LogCaptureFixture
) -> None:
    """NSD, the zone's primary here, refuses the NOTIFY, signed with the key: an answer."""
    caplog.set_level(logging.INFO, logger="valis.notify")
    sender = await notify_serial_8(nsd, LISTED, timeout=0.5)
    assert sender.stats.answered == 1
    assert f"notify: {ZONE} serial 8 to 127.0.0.1 answered REFUSED" in caplog.text


async def test_dig_and_kdig_verify_a_badtime_reply_and_report_the_clocks(
    nursery: trio.Nursery,
) -> None:
    """BIND's and Knot's clients check the signed BADTIME reply's MAC and then tell the
    user that the clocks differ, rather than that the reply is forged."""
    secret = base64.b64encode(LISTED.secret).decode()
    key = f"hmac-sha256:{LISTED.key_name}:{secret}"
    async with serving(nursery, clock=lambda: time.time() + 1000) as port:
        for command, said in (
            (["dig", "@127.0.0.1", "-p", str(port), ZONE, "SOA", "+time=5", "+tries=1",
              "-y", key], "Couldn't verify signature: clocks are unsynchronized"),
            (["kdig", "@127.0.0.1", "-p", str(port), ZONE, "SOA", "+timeout=5",
              "+retry=0", "-y", key], "(TSIG out of time window)"),
        ):
            with trio.fail_after(LIMIT):
                done = await trio.run_process(command, capture_stdout=True,
                                              capture_stderr=True, check=False)
            output = (done.stdout + done.stderr).decode()
            assert said in output, output
            assert "BADTIME" in output

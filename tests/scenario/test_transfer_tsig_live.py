"""RFC 8945 section 5.2 on a running resident (issue 31): a zone transfer (AXFR and IXFR
over TCP, IXFR over UDP), a NOTIFY sent to the node (over UDP and TCP) and a secondary's
SOA query, each signed with a key no listed secondary has, with a listed key's name but
the wrong secret, or with the right key by a clock 1000 s off, is answered NOTAUTH with
the TSIG error the RFC names: BADKEY (5.2.1) and BADSIG (5.2.2) unsigned, the MAC empty;
BADTIME (5.2.3) signed, the server's time in Other Data. The right key transfers the
zone, and its NOTIFY is NOTIMP signed (the node is the primary). The resident as the
launcher runs it, its secondary listed in the real PostgreSQL by ``valis zone secondary
add``; dnspython and ``dig -y`` on the wire."""

from __future__ import annotations

import base64
import socket
import subprocess
import time

import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rrset
import dns.tsig
import dns.xfr
import dns.zone
import pytest

from tests.property.tsig_check import signed_at, verifies_as_badtime
from tests.scenario.pg import valis
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts

ZONE = "example.test."
KEY_NAME = "xfr.example."
SECRET = bytes(range(32))
RIGHT = dns.tsig.Key(KEY_NAME, SECRET, "hmac-sha256")
SOA = f"ns1.{ZONE} hostmaster.{ZONE} 1 7200 3600 1209600 300"
LIMIT = 20.0


@pytest.fixture
def resident(resident_harness: Harness, zone_dsn: str) -> Resident:
    status, _, err = valis("zone", "secondary", "add", "--dsn", zone_dsn, ZONE, "127.0.0.1",
                           "--key-name", KEY_NAME,
                           "--secret", base64.b64encode(SECRET).decode())
    assert (status, err) == (0, "")
    node = resident_harness.start(make_state_dir(resident_harness.workdir),
                                  site_facts(zone_dsn))
    node.wait_ready()
    return node


def exchange(port: int, wire: bytes, *, tcp: bool) -> bytes:
    """The response to ``wire`` from ``127.0.0.1:port``, as it came."""
    kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.settimeout(LIMIT)
        sock.connect(("127.0.0.1", port))
        if not tcp:
            sock.send(wire)
            return sock.recv(65535)
        sock.sendall(len(wire).to_bytes(2, "big") + wire)
        data = b""
        for _ in range(1000):  # bounded: a response is at most 64 KiB
            if len(data) >= 2 and len(data) >= 2 + int.from_bytes(data[:2], "big"):
                break
            chunk = sock.recv(65535)
            assert chunk, "the connection closed before the response"
            data += chunk
        return data[2:]


def request(ask: str) -> dns.message.Message:
    if ask == "NOTIFY":
        query = dns.message.make_query(ZONE, "SOA", use_edns=0)
        query.set_opcode(dns.opcode.NOTIFY)
        query.answer.append(dns.rrset.from_text(ZONE, 300, "IN", "SOA", SOA))
        return query
    query = dns.message.make_query(ZONE, ask, use_edns=0)
    if ask == "IXFR":
        query.authority.append(dns.rrset.from_text(ZONE, 300, "IN", "SOA", SOA))
    return query


@pytest.mark.parametrize(("ask", "tcp"), [
    ("AXFR", True), ("IXFR", True), ("IXFR", False), ("NOTIFY", False), ("NOTIFY", True),
    ("SOA", False),
])
def test_a_wrong_key_is_notauth_with_the_tsig_error_rfc_8945_names(
    resident: Resident, ask: str, tcp: bool
) -> None:
    assert resident.port is not None
    cases = [(dns.tsig.Key("nobody.example.", SECRET, "hmac-sha256"), 0, dns.rcode.BADKEY),
             (dns.tsig.Key(KEY_NAME, bytes(32), "hmac-sha256"), 0, dns.rcode.BADSIG),
             (RIGHT, -1000, dns.rcode.BADTIME), (RIGHT, 1000, dns.rcode.BADTIME)]
    for key, skew, error in cases:
        query = request(ask)
        wire = signed_at(query, key, time.time() + skew)
        before = int(time.time())
        raw = exchange(resident.port, wire, tcp=tcp)
        response = dns.message.from_wire(raw, keyring=False)  # its TSIG read, not checked
        said = (ask, tcp, dns.rcode.to_text(error), skew)
        assert response.rcode() == dns.rcode.NOTAUTH, said
        assert response.tsig is not None, said
        tsig = response.tsig[0]
        assert (response.tsig.name, tsig.error) == (key.name, error), said
        assert query.tsig is not None
        assert tsig.time_signed == query.tsig[0].time_signed, said
        if error == dns.rcode.BADTIME:
            assert before <= int.from_bytes(tsig.other, "big") <= int(time.time()), said
            assert verifies_as_badtime(raw, query, RIGHT), said  # signed over the request
        else:
            assert (tsig.mac, tsig.other) == (b"", b""), said


def test_the_right_key_transfers_the_zone_and_its_notify_is_notimp_signed(
    resident: Resident,
) -> None:
    assert resident.port is not None
    zone = dns.zone.Zone(ZONE)
    query, _ = dns.xfr.make_query(zone, keyring={RIGHT.name: RIGHT}, keyname=RIGHT.name)
    dns.query.inbound_xfr("127.0.0.1", zone, query, port=resident.port, timeout=LIMIT,
                          lifetime=LIMIT)  # checks every message's TSIG
    assert zone.get_soa().serial >= 1
    notify = request("NOTIFY")
    wire = signed_at(notify, RIGHT, time.time())
    response = dns.message.from_wire(  # raises unless signed with the key over the request's
        exchange(resident.port, wire, tcp=False), keyring={RIGHT.name: RIGHT},
        request_mac=notify.mac)
    assert response.rcode() == dns.rcode.NOTIMP


def test_dig_with_a_wrong_key_reads_notauth_and_the_error(resident: Resident) -> None:
    wrong = base64.b64encode(bytes(32)).decode()
    for key, error in ((f"hmac-sha256:{KEY_NAME}:{wrong}", "BADSIG"),
                       (f"hmac-sha256:nobody.example.:{wrong}", "BADKEY")):
        result = subprocess.run(
            ["dig", "@127.0.0.1", "-p", str(resident.port), ZONE, "SOA", "+edns", "-y", key],
            capture_output=True, text=True, timeout=LIMIT, check=False)
        assert "status: NOTAUTH" in result.stdout, result.stdout
        assert f" {error} 0" in result.stdout  # the TSIG line: its error, no Other Data

"""The owner terminus as an operator uses it: a real resident with an owner descriptor
handed down, the private PostgreSQL cluster, and real clients (dnspython and nsupdate)
signing with the key ``valis owner key`` prints. Signed updates reach the DNS port, each
answered once the node serves it;
anything unsigned, badly signed, for a foreign zone or with a failing prerequisite
changes nothing; a key the node does not hold, a wrong secret, a clock outside the fudge
and a TSIG whose TTL is not 0 are answered as RFC 8945 says (as the zone transfers answer
them), and nsupdate and knsupdate tell their user which; a writer the fence has moved past writes
nothing and the resident exits non-zero."""

from __future__ import annotations

import base64
import os
import re
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode
import dns.tsig
import dns.update
import pytest

from tests.property.tsig_check import (
    signed_at,
    signed_time,
    tsig_of,
    verifies_as_badtime,
    with_tsig_ttl,
)
from tests.scenario.pg import PgCluster
from tests.scenario.resident_harness import (
    Harness,
    Resident,
    make_state_dir,
    resident_runtime,
    site_facts,
)
from valis_core.identity.custody import load_keyfile
from valis_core.operator_state.fence import claim_instance_fence
from valis_core.operator_state.zone_notes import FENCE_CHANNEL
from valis_core.owner.key import derive_owner_tsig
from valis_core.owner.terminus import APPLICATION_NAME

ZONE = "example.test."
WWW = "www IN A 192.0.2.80\n"
WAIT = 30.0


@pytest.fixture
def resident(resident_harness: Harness, zone_dsn: str) -> Resident:
    started = resident_harness.start(
        make_state_dir(resident_harness.workdir), site_facts(zone_dsn), owner=True
    )
    started.wait_ready()
    return started


def keyring(resident: Resident) -> dns.tsig.Key:
    key = derive_owner_tsig(load_keyfile(resident.state_dir))
    return dns.tsig.Key(key.name, key.secret, key.algorithm)


def send(resident: Resident, update: dns.message.Message) -> dns.message.Message:
    assert resident.owner_port is not None
    return dns.query.tcp(update, "127.0.0.1", port=resident.owner_port, timeout=10)


def records(pg_cluster: PgCluster, dsn: str) -> set[tuple[Any, ...]]:
    with pg_cluster.connect(dsn) as conn:
        return set(conn.execute("SELECT zone, owner, rtype, ttl, rdata FROM records"))


def answers(resident: Resident, name: str, rtype: str = "A") -> set[str]:
    response = resident.ask(name, rtype)
    return {rdata.to_text() for rrset in response.answer for rdata in rrset}


def wait_for_answer(resident: Resident, name: str, expected: set[str], rtype: str = "A") -> None:
    # A bound on the wait, not a speed target.
    deadline = time.monotonic() + WAIT
    seen = answers(resident, name, rtype)
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.02)
        seen = answers(resident, name, rtype)
    assert seen == expected


def serial(resident: Resident) -> int:
    (text,) = answers(resident, ZONE, "SOA")
    return int(text.split()[2])


def test_a_signed_update_is_applied_and_answered_on_the_dns_port(resident: Resident) -> None:
    assert "owner terminus: accepting TSIG-signed DNS UPDATE on 127.0.0.1:" in resident.stderr()
    update = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    update.add("new", 300, "A", "192.0.2.99")
    update.replace("www", 300, "A", "192.0.2.81")
    response = send(resident, update)
    assert response.rcode() == dns.rcode.NOERROR
    assert response.had_tsig  # signed, and dnspython verified the signature
    wait_for_answer(resident, "new.example.test.", {"192.0.2.99"})
    wait_for_answer(resident, "www.example.test.", {"192.0.2.81"})
    wait_for_answer(resident, ZONE, {
        "ns1.example.test. hostmaster.example.test. 2 7200 3600 1209600 300"
    }, "SOA")
    assert "owner terminus: update of example.test. from 127.0.0.1:" in resident.stderr()


def _until_row(pg_cluster: PgCluster, dsn: str, sql: str, params: tuple[Any, ...], *,
               done: Callable[[tuple[Any, ...]], bool], never: str) -> None:
    """Run ``sql`` every 10 ms until it returns a row that is ``done``; ``never`` is the
    failure after ``WAIT``."""
    deadline = time.monotonic() + WAIT
    with pg_cluster.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(sql, params).fetchone()
            if row is not None and done(row):
                return
            time.sleep(0.01)
    raise AssertionError(never)


def _end_zone_source_session(pg_cluster: PgCluster, dsn: str) -> None:
    """End the resident's zone-source session (the one whose last statement was its
    LISTEN of the fence channel), waiting for it to be there first: the source then
    reconnects after its backoff (0.1 s or more) and reads its zones again."""
    _until_row(pg_cluster, dsn,
               "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE datname = current_database() AND query = %s",
               (f"LISTEN {FENCE_CHANNEL}",), done=lambda row: bool(row[0]),
               never="the zone source's session never came back")


def test_an_update_is_answered_once_the_node_serves_it(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    # With the zone source's session ended just before each update, the node serves the
    # change only once the source is back; the NOERROR waits for that, so one ask right
    # after it (no wait, no retry) finds the new address.
    for n in range(3):
        _end_zone_source_session(pg_cluster, zone_dsn)
        update = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
        update.replace("www", 300, "A", f"192.0.2.{100 + n}")
        assert send(resident, update).rcode() == dns.rcode.NOERROR
        assert answers(resident, "www.example.test.") == {f"192.0.2.{100 + n}"}, n
        assert serial(resident) == 2 + n


def test_a_record_two_rows_spell_is_deleted_whole_by_an_update(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """An operator's SQL may store one record twice, spelled two ways; the node serves it
    once, and the owner's delete of it takes both rows, or the node would serve it on."""
    with pg_cluster.connect(zone_dsn) as conn:
        conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES"
                     " (%s, %s, 'AAAA', 300, '2001:db8::53'),"
                     " (%s, %s, 'AAAA', 300, '2001:0db8:0000::53')",
                     (ZONE, f"v6.{ZONE}", ZONE, f"v6.{ZONE}"))
    wait_for_answer(resident, f"v6.{ZONE}", {"2001:db8::53"}, "AAAA")
    update = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    update.delete("v6", "AAAA", "2001:db8::53")
    assert send(resident, update).rcode() == dns.rcode.NOERROR
    wait_for_answer(resident, f"v6.{ZONE}", set(), "AAAA")
    assert not [row for row in records(pg_cluster, zone_dsn) if row[2] == "AAAA"]


def test_nsupdate_signs_with_the_key_valis_owner_key_prints(
    resident: Resident, run_account_dir: Path
) -> None:
    printed = subprocess.run(
        [resident_runtime(), "owner", "key", "--state-dir", str(resident.state_dir)],
        capture_output=True, text=True, check=True, timeout=60,
    )
    assert printed.stdout.startswith('key "valis-owner." {')
    key_file = run_account_dir / "owner.tsig"
    key_file.write_text(printed.stdout)
    os.chmod(key_file, 0o600)
    script = (
        f"server 127.0.0.1 {resident.owner_port}\nzone {ZONE}\n"
        "prereq nxdomain mail.example.test.\n"
        "update add mail.example.test. 300 A 192.0.2.25\nsend\n"
    )
    result = subprocess.run(
        ["nsupdate", "-v", "-t", "10", "-k", str(key_file)],
        input=script, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    wait_for_answer(resident, "mail.example.test.", {"192.0.2.25"})


def test_unsigned_badly_signed_foreign_and_malformed_updates_change_nothing(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    before = records(pg_cluster, zone_dsn)

    unsigned = dns.update.UpdateMessage(ZONE)
    unsigned.add("evil", 300, "A", "198.51.100.66")
    assert send(resident, unsigned).rcode() == dns.rcode.REFUSED

    forged = dns.tsig.Key("valis-owner.", b"\x00" * 32, "hmac-sha256")
    badly = dns.update.UpdateMessage(ZONE, keyring=forged)
    badly.add("evil", 300, "A", "198.51.100.66")
    with pytest.raises(dns.tsig.PeerBadSignature):
        send(resident, badly)

    foreign = dns.update.UpdateMessage("other.test.", keyring=keyring(resident))
    foreign.add("evil", 300, "A", "198.51.100.66")
    assert send(resident, foreign).rcode() == dns.rcode.NOTAUTH

    query = dns.message.make_query(ZONE, "SOA")
    query.use_tsig(keyring(resident))
    assert send(resident, query).rcode() == dns.rcode.NOTIMP

    assert resident.owner_port is not None
    with socket.create_connection(("127.0.0.1", resident.owner_port), timeout=10) as raw:
        raw.sendall(b"\x00\x05\x01\x02\x03\x04\x05" + b"\x00\x0e" + b"\xff" * 14)
        raw.shutdown(socket.SHUT_WR)
        raw.recv(4096)  # a FORMERR, or nothing; the server goes on either way

    assert records(pg_cluster, zone_dsn) == before
    assert answers(resident, "evil.example.test.") == set()
    assert resident.proc.poll() is None
    update = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    update.add("after", 300, "A", "192.0.2.7")
    assert send(resident, update).rcode() == dns.rcode.NOERROR
    metrics = resident.fabric_get("/metrics")[1].decode()
    assert 'valis_owner_updates_total{outcome="applied"} 1' in metrics
    assert 'valis_owner_updates_total{outcome="refused"} 4' in metrics


def exchange(resident: Resident, wire: bytes) -> bytes:
    """One message over TCP to the owner port, as sent; the first response."""
    assert resident.owner_port is not None
    with socket.create_connection(("127.0.0.1", resident.owner_port), timeout=10) as sock:
        sock.sendall(struct.pack("!H", len(wire)) + wire)
        with sock.makefile("rb") as stream:
            (size,) = struct.unpack("!H", stream.read(2))
            return bytes(stream.read(size))


def test_each_tsig_failure_is_answered_as_rfc_8945_says_and_changes_nothing(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    before = records(pg_cluster, zone_dsn)
    key = keyring(resident)

    def evil() -> dns.update.UpdateMessage:
        update = dns.update.UpdateMessage(ZONE)
        update.add("evil", 300, "A", "198.51.100.66")
        return update

    # A key name or algorithm the node does not hold, a wrong secret: unsigned, MAC empty.
    for signer, error in (
        (dns.tsig.Key("nobody.", key.secret, key.algorithm), dns.rcode.BADKEY),
        (dns.tsig.Key(key.name, key.secret, "hmac-sha512"), dns.rcode.BADKEY),
        (dns.tsig.Key(key.name, bytes(32), key.algorithm), dns.rcode.BADSIG),
    ):
        update = evil()
        response = exchange(resident, signed_at(update, signer, time.time()))
        assert tsig_of(response) == (dns.rcode.NOTAUTH, error, b"", b"")
        assert update.tsig is not None
        echoed = dns.message.from_wire(response, keyring=False).tsig
        assert echoed is not None
        assert echoed[0].time_signed == update.tsig[0].time_signed

    # A clock 1000 s either way: BADTIME, signed, the time signed the request's and the
    # node's time in Other Data, so the client sees both clocks (section 5.2.3).
    for skew in (-1000, 1000):
        update = evil()
        sent_at = time.time()
        response = exchange(resident, signed_at(update, key, sent_at + skew))
        rcode, time_error, mac, other = tsig_of(response)
        assert (rcode, time_error, len(mac)) == (dns.rcode.NOTAUTH, dns.rcode.BADTIME, 32)
        assert verifies_as_badtime(response, update, key)
        echoed = dns.message.from_wire(response, keyring=False).tsig
        assert echoed is not None
        assert echoed[0].time_signed == int(sent_at + skew)
        assert int(sent_at) <= int.from_bytes(other, "big") <= int(time.time())

    # A TSIG record whose TTL is not 0 (section 4.2): FORMERR, however good its MAC.
    wire = with_tsig_ttl(signed_at(evil(), key, time.time()), key, 300)
    response = exchange(resident, wire)
    answered = dns.message.from_wire(response, keyring=False)
    assert (answered.rcode(), answered.tsig) == (dns.rcode.FORMERR, None)

    assert records(pg_cluster, zone_dsn) == before
    assert answers(resident, "evil.example.test.") == set()
    assert resident.proc.poll() is None
    metrics = resident.fabric_get("/metrics")[1].decode()
    assert 'valis_owner_updates_total{outcome="refused"} 6' in metrics


def test_nsupdate_and_knsupdate_say_which_tsig_failure_the_node_answered(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """BIND's nsupdate reads BADKEY and BADSIG; Knot's knsupdate, its clock skewed by
    faketime (nsupdate does not run under it), checks the BADTIME reply's MAC and then
    says the clocks differ, the reply showing its own time signed and the node's."""
    before = records(pg_cluster, zone_dsn)
    key = keyring(resident)
    secret = base64.b64encode(key.secret).decode()
    right = f"hmac-sha256:{key.name}:{secret}"
    script = (
        f"server 127.0.0.1 {resident.owner_port}\nzone {ZONE}\n"
        "update add evil.example.test. 300 A 198.51.100.66\nsend\n"
    )

    def run(argv: list[str]) -> str:
        done = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode != 0, done.stdout
        return done.stdout + done.stderr

    for signing, said in (
        (f"hmac-sha256:nobody.:{secret}", "update failed: NOTAUTH(BADKEY)"),
        (f"hmac-sha256:{key.name}:{base64.b64encode(bytes(32)).decode()}",
         "update failed: NOTAUTH(BADSIG)"),
    ):
        output = run(["nsupdate", "-v", "-t", "10", "-y", signing])
        assert said in output, output

    for skew in (-1000, 1000):
        started = int(time.time())
        output = run(["faketime", "-f", f"{skew:+d}", "knsupdate", "-v", "-t", "10", "-r", "0",
                      "-y", right])
        assert "status: BADTIME" in output, output
        assert "reply verification (TSIG out of time window)" in output, output
        found = re.search(r"hmac-sha256\. (\d+) 300 32 \S+ \d+ BADTIME 6 (\d+)", output)
        assert found is not None, output
        signed, theirs = int(found[1]), int(found[2])
        assert started + skew <= signed <= int(time.time()) + skew  # the request's clock
        assert started <= theirs <= int(time.time())  # the node's

    assert records(pg_cluster, zone_dsn) == before


def test_nsupdate_sent_to_the_dns_port_with_the_right_key_hears_notimp_not_badkey(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """The operator who forgets the owner port and sends to :53 (the DNS pair) with the
    key ``valis owner key`` printed is told the port takes no updates, not that the key
    is wrong; the same script to the owner port is applied."""
    before = records(pg_cluster, zone_dsn)
    key = keyring(resident)
    signing = f"hmac-sha256:{key.name}:{base64.b64encode(key.secret).decode()}"
    update = f"zone {ZONE}\nupdate add moved.example.test. 300 A 192.0.2.77\nsend\n"
    for tcp in ([], ["-v"]):
        done = subprocess.run(["nsupdate", *tcp, "-t", "10", "-y", signing],
                              input=f"server 127.0.0.1 {resident.port}\n{update}",
                              capture_output=True, text=True, timeout=60, check=False)
        said = done.stdout + done.stderr
        assert done.returncode != 0, said
        assert "update failed: NOTIMP" in said, said
        assert "BADKEY" not in said, said
    assert records(pg_cluster, zone_dsn) == before
    done = subprocess.run(["nsupdate", "-v", "-t", "10", "-y", signing],
                          input=f"server 127.0.0.1 {resident.owner_port}\n{update}",
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for_answer(resident, "moved.example.test.", {"192.0.2.77"})


def test_failing_prerequisites_change_nothing(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    before = records(pg_cluster, zone_dsn)
    cases = []
    absent = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    absent.present("nothing-here")
    absent.add("x", 300, "A", "192.0.2.1")
    cases.append((absent, dns.rcode.NXDOMAIN))
    differs = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    differs.present("www", "A", "192.0.2.1")
    differs.delete("www")
    cases.append((differs, dns.rcode.NXRRSET))
    exists = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    exists.absent("www", "A")
    exists.add("www", 300, "A", "192.0.2.2")
    cases.append((exists, dns.rcode.YXRRSET))
    for update, rcode in cases:
        assert send(resident, update).rcode() == rcode
    assert records(pg_cluster, zone_dsn) == before
    assert answers(resident, "www.example.test.") == {"192.0.2.80"}


def test_a_captured_update_sent_again_is_refused_and_changes_nothing(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """An attacker who captured the owner's signed UPDATE sends it again, after the owner
    undid it: the replay verifies (same key, time within the fudge) but is REFUSED, and
    the record stays removed."""
    key = keyring(resident)
    add = dns.update.UpdateMessage(ZONE)
    add.add("captured", 300, "A", "192.0.2.70")
    captured = signed_at(add, key, time.time())
    assert tsig_of(exchange(resident, captured))[0] == dns.rcode.NOERROR
    wait_for_answer(resident, "captured.example.test.", {"192.0.2.70"})
    remove = dns.update.UpdateMessage(ZONE, keyring=key)
    remove.delete("captured")
    assert send(resident, remove).rcode() == dns.rcode.NOERROR
    wait_for_answer(resident, "captured.example.test.", set())
    before = records(pg_cluster, zone_dsn)

    replayed = exchange(resident, captured)
    assert tsig_of(replayed)[0] == dns.rcode.REFUSED
    dns.message.from_wire(replayed, keyring={key.name: key},
                          request_mac=add.mac)  # signed by the node: raises unless
    assert records(pg_cluster, zone_dsn) == before
    assert answers(resident, "captured.example.test.") == set()
    assert ("(key valis-owner., signed at "
            f"{signed_time(captured)}) refused "
            "REFUSED: it is a replay of an update already received") in resident.stderr()


def test_a_fudge_the_signer_stretched_past_300_s_is_judged_as_300_s(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """A signer cannot make its messages good for longer by asking a wider fudge: a clock
    1000 s off with a fudge of an hour is BADTIME, as BIND and Knot answer it."""
    before = records(pg_cluster, zone_dsn)
    key = keyring(resident)
    for skew in (-1000, 1000):
        update = dns.update.UpdateMessage(ZONE)
        update.add("stretched", 300, "A", "192.0.2.71")
        response = exchange(resident, signed_at(update, key, time.time() + skew, 3600))
        rcode, error, _, _ = tsig_of(response)
        assert (rcode, error) == (dns.rcode.NOTAUTH, dns.rcode.BADTIME)
    assert records(pg_cluster, zone_dsn) == before
    assert answers(resident, "stretched.example.test.") == set()


def _terminus_backend(pg_cluster: PgCluster, dsn: str) -> int:
    """The owner terminus's database session (of this test's database: an earlier test's
    resident may have a backend still exiting)."""
    with pg_cluster.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _wait_until_waiting_on_a_lock(pg_cluster: PgCluster, dsn: str, pid: int) -> None:
    _until_row(pg_cluster, dsn, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
               (pid,), done=lambda row: row[0] == "Lock",
               never="the update never reached the fence")


def test_an_update_after_the_fence_moved_writes_nothing_and_the_resident_exits(
    resident: Resident, pg_cluster: PgCluster, zone_dsn: str
) -> None:
    before = records(pg_cluster, zone_dsn)
    backend = _terminus_backend(pg_cluster, zone_dsn)
    update = dns.update.UpdateMessage(ZONE, keyring=keyring(resident))
    update.add("late", 300, "A", "192.0.2.44")
    got: list[dns.message.Message | BaseException] = []

    def sender() -> None:
        try:
            got.append(send(resident, update))
        except BaseException as exc:
            got.append(exc)

    # A successor claims generation 1; the update arrives while the claim is open and
    # sees the fence only once the claim has committed.
    with pg_cluster.connect(zone_dsn) as claim:
        claim.execute("SELECT 1")  # opens the transaction the claim then stays inside
        claim_instance_fence(claim, 1, "node-a@successor")
        thread = threading.Thread(target=sender)
        thread.start()
        _wait_until_waiting_on_a_lock(pg_cluster, zone_dsn, backend)
        claim.commit()
    thread.join(WAIT)
    assert len(got) == 1
    (response,) = got
    assert isinstance(response, dns.message.Message), response
    assert response.rcode() == dns.rcode.SERVFAIL

    assert resident.wait_exit() != 0
    line = resident.last_line()
    assert line.startswith("valis: fence: "), resident.stderr()
    assert "fenced out" in line
    assert records(pg_cluster, zone_dsn) == before
    assert resident.owner_port is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", resident.owner_port), timeout=10).close()

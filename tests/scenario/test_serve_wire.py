"""`valis serve` as an operator runs it: a real process on loopback, asked over UDP and
TCP with dnspython and with `dig`, stopped with SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from tests.dns_ask import over_tcp, over_udp, question
from tests.scenario.operator_state_helpers import addresses
from tests.scenario.serve_process import (
    ASK_TIMEOUT,
    STARTUP_LIMIT,
    STOP_LIMIT,
    ZONE_FILE,
    Server,
    run_valis,
    start_server,
    stop_server,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("serve") / "valis.log")
    try:
        yield running
    finally:
        stop_server(running)


def query(name: str, rdtype: str) -> dns.message.Message:
    return question(name, rdtype)


def ask_udp(server: Server, name: str, rdtype: str) -> dns.message.Message:
    return over_udp(server.port, name, rdtype, timeout=ASK_TIMEOUT)


def ask_tcp(server: Server, name: str, rdtype: str) -> dns.message.Message:
    return over_tcp(server.port, name, rdtype, timeout=ASK_TIMEOUT)


def frame(message: dns.message.Message) -> bytes:
    wire = message.to_wire()
    return len(wire).to_bytes(2, "big") + wire


def read_frame(sock: socket.socket) -> bytes:
    size = int.from_bytes(read_exactly(sock, 2), "big")
    return read_exactly(sock, size)


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("server closed the connection mid-message")
        data += chunk
    return data


def dig(server: Server, *args: str) -> str:
    command = ["dig", "@127.0.0.1", "-p", str(server.port), "+time=3", "+tries=1", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def dig_flags(output: str) -> set[str]:
    match = re.search(r";; flags: ([a-z ]+);", output)
    assert match, output
    return set(match.group(1).split())


def test_dnspython_over_udp_gets_the_authoritative_answer(server: Server) -> None:
    response = ask_udp(server, "www.example.com.", "A")
    assert response.rcode() == dns.rcode.NOERROR
    assert response.flags & dns.flags.AA
    assert addresses(response) == {"192.0.2.80"}


def test_dnspython_over_tcp_gets_the_authoritative_answer(server: Server) -> None:
    response = ask_tcp(server, "www.example.com.", "AAAA")
    assert response.rcode() == dns.rcode.NOERROR
    assert response.flags & dns.flags.AA
    assert addresses(response) == {"2001:db8::80"}


def test_a_name_outside_the_served_zones_is_refused(server: Server) -> None:
    response = ask_udp(server, "www.example.org.", "A")
    assert response.rcode() == dns.rcode.REFUSED
    assert not response.flags & dns.flags.AA


@pytest.mark.skipif(shutil.which("dig") is None, reason="dig (bind9-dnsutils) not installed")
@pytest.mark.parametrize("transport", ["+notcp", "+tcp"])
def test_dig_reports_noerror_with_the_aa_flag(server: Server, transport: str) -> None:
    output = dig(server, transport, "www.example.com", "A")
    assert "status: NOERROR" in output
    assert "aa" in dig_flags(output)
    assert re.search(r"^www\.example\.com\.\s+3600\s+IN\s+A\s+192\.0\.2\.80$", output, re.M)


@pytest.mark.skipif(shutil.which("dig") is None, reason="dig (bind9-dnsutils) not installed")
def test_dig_sees_nxdomain_for_a_missing_name(server: Server) -> None:
    output = dig(server, "nope.example.com", "A")
    assert "status: NXDOMAIN" in output
    assert "aa" in dig_flags(output)


def test_several_pipelined_queries_are_answered_on_one_tcp_connection(server: Server) -> None:
    asked = [query("www.example.com.", "A"), query("mail.example.com.", "A"),
             query("example.com.", "SOA"), query("ns2.example.com.", "A")]
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"".join(frame(message) for message in asked))
        answers = [dns.message.from_wire(read_frame(sock)) for _ in asked]
        follow_up = query("ns1.example.com.", "A")
        sock.sendall(frame(follow_up))
        last = dns.message.from_wire(read_frame(sock))
    assert [response.id for response in answers] == [message.id for message in asked]
    assert addresses(answers[1]) == {"192.0.2.25"}
    assert answers[2].answer[0].rdtype == dns.rdatatype.SOA
    assert last.id == follow_up.id
    assert addresses(last) == {"192.0.2.1"}


def test_a_stalled_tcp_client_does_not_hold_up_another(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as stalled:
        stalled.sendall(b"\x00")  # the first byte of a length prefix, then nothing
        second_tcp = ask_tcp(server, "www.example.com.", "A")
        second_udp = ask_udp(server, "www.example.com.", "A")
    assert addresses(second_tcp) == {"192.0.2.80"}
    assert addresses(second_udp) == {"192.0.2.80"}


def test_garbage_datagrams_leave_the_server_answering(server: Server) -> None:
    valid = query("www.example.com.", "A").to_wire()
    header_as_response = bytes([valid[0], valid[1], valid[2] | 0x80]) + valid[3:]
    garbage = [
        b"",
        b"\x00",
        b"\xff" * 11,
        os.urandom(12),
        os.urandom(300),
        valid[:15],
        header_as_response,
        valid[:2] + b"\x01\x00\xff\xff" + valid[6:],
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for packet in garbage:
            sock.sendto(packet, ("127.0.0.1", server.port))
    response = ask_udp(server, "www.example.com.", "A")
    assert addresses(response) == {"192.0.2.80"}
    assert server.process.poll() is None


def test_sigterm_stops_the_server_with_status_0_and_frees_its_ports(tmp_path: Path) -> None:
    server = start_server(tmp_path / "valis.log")
    assert stop_server(server) == 0
    log = server.log_text()
    assert re.search(r"valis serve: serving 1 zone \(example\.com\.\) \(\d+ records\)", log)
    assert "valis serve: stopped on SIGTERM" in log
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", server.port))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("127.0.0.1", server.port))


def test_sigint_also_exits_0(tmp_path: Path) -> None:
    server = start_server(tmp_path / "valis.log")
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(timeout=STOP_LIMIT) == 0
    assert "stopped on SIGINT" in server.log_text()


def test_sighup_reloads_the_zone_file_while_serving(tmp_path: Path) -> None:
    zone = tmp_path / "example.com.zone"
    zone.write_text(ZONE_FILE.read_text())
    server = start_server(tmp_path / "valis.log", str(zone))
    try:
        assert addresses(ask_udp(server, "www.example.com.", "A")) == {"192.0.2.80"}
        zone.write_text(ZONE_FILE.read_text().replace("192.0.2.80", "198.51.100.80"))
        server.process.send_signal(signal.SIGHUP)
        limit = time.monotonic() + STARTUP_LIMIT
        while addresses(ask_udp(server, "www.example.com.", "A")) != {"198.51.100.80"}:
            assert time.monotonic() < limit, server.log_text()
            time.sleep(0.05)
        zone.write_text("this is not a zone file\n")
        server.process.send_signal(signal.SIGHUP)
        while "reload refused" not in server.log_text():
            assert time.monotonic() < limit, server.log_text()
            time.sleep(0.05)
        assert addresses(ask_udp(server, "www.example.com.", "A")) == {"198.51.100.80"}
    finally:
        assert stop_server(server) == 0


def test_the_origin_can_be_named_on_the_command_line(tmp_path: Path) -> None:
    zone = tmp_path / "anything.txt"
    zone.write_text(ZONE_FILE.read_text().replace("$ORIGIN example.com.\n", ""))
    server = start_server(tmp_path / "valis.log", f"example.com={zone}")
    try:
        assert addresses(ask_udp(server, "www.example.com.", "A")) == {"192.0.2.80"}
    finally:
        assert stop_server(server) == 0


def test_the_origin_is_taken_from_the_file_name(tmp_path: Path) -> None:
    zone = tmp_path / "example.net.zone"
    zone.write_text(
        ZONE_FILE.read_text()
        .replace("$ORIGIN example.com.\n", "")
        .replace("example.com.", "example.net.")
    )
    server = start_server(tmp_path / "valis.log", str(zone))
    try:
        response = ask_udp(server, "www.example.net.", "A")
        assert response.flags & dns.flags.AA
        assert addresses(response) == {"192.0.2.80"}
    finally:
        assert stop_server(server) == 0


def test_a_missing_zone_file_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "absent.zone"
    done = run_valis("serve", "--zone", str(missing), "--listen", "127.0.0.1:0")
    assert done.returncode == 1
    assert done.stderr.startswith(f"valis: serve: cannot read zone file {missing}")
    assert done.stderr.count("\n") == 1


def test_a_privileged_port_is_refused_without_binding() -> None:
    done = run_valis("serve", "--zone", str(ZONE_FILE), "--listen", "127.0.0.1:53")
    assert done.returncode == 1
    assert "refusing privileged port 53" in done.stderr


def test_workers_answer_on_every_socket_of_the_address(tmp_path: Path) -> None:
    # Two UDP sockets in one SO_REUSEPORT group: the kernel spreads these 64 source
    # ports across both; a socket nobody served would leave its share unanswered.
    server = start_server(tmp_path / "valis.log", extra=("--workers", "2"))
    try:
        for _ in range(64):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(ASK_TIMEOUT)
                sock.bind(("127.0.0.1", 0))
                sock.sendto(query("example.com.", "SOA").to_wire(), ("127.0.0.1", server.port))
                reply = dns.message.from_wire(sock.recvfrom(65535)[0])
            assert reply.rcode() == dns.rcode.NOERROR
    finally:
        assert stop_server(server) == 0
    log = server.log_text()
    assert "(2 UDP workers each)" in log
    assert "stopped on SIGTERM after 65 responses" in log  # and the start's own query

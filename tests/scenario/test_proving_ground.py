"""The proving ground itself: it connects what it says, and leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.conftest import require_root
from tests.scenario.proving_ground import (
    CLIENT_IP,
    GATEWAY,
    STATE_DIR,
    Ground,
    dig,
    host_has_link,
    netns_names,
    run_in,
    sweep_stale,
    tcp_exchange,
)

# A one-shot authoritative responder (dnspython): AA + SOA for example.org., REFUSED else.
RESPONDER = r"""
import socket, sys
import dns.flags, dns.message, dns.rcode, dns.rrset
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((sys.argv[1], 53))
sock.settimeout(20)
print("ready", flush=True)
for _ in range(2):
    data, peer = sock.recvfrom(4096)
    query = dns.message.from_wire(data)
    reply = dns.message.make_response(query)
    if str(query.question[0].name) == "example.org.":
        reply.flags |= dns.flags.AA
        reply.answer.append(dns.rrset.from_text(
            "example.org.", 3600, "IN", "SOA", "ns. host. 1 2 3 4 5"))
    else:
        reply.set_rcode(dns.rcode.REFUSED)
    sock.sendto(reply.to_wire(), peer)
"""


def ground_names(ground: Ground) -> set[str]:
    return {ground.internet, ground.client, ground.unit_netns} & netns_names()


def test_ground_puts_the_client_on_the_gateways_network_and_cleanup_leaves_nothing() -> None:
    require_root()
    ground = Ground().build()
    try:
        assert host_has_link(ground.nic)
        # Nothing listens there: the gateway's reset is the proof it was reached.
        probe = tcp_exchange(ground.client, GATEWAY, 9)
        assert probe["error"] == "ConnectionRefusedError"
        route = run_in(ground.client, ["ip", "-4", "route", "get", GATEWAY]).stdout
        assert f"src {CLIENT_IP}" in route
    finally:
        ground.cleanup()
        ground.cleanup()
    assert ground_names(ground) == set()
    assert not host_has_link(ground.nic)
    assert not (STATE_DIR / ground.tag).exists()


def test_sweep_removes_grounds_whose_owner_died() -> None:
    require_root()
    ground = Ground().build()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    (STATE_DIR / ground.tag).write_text(f"{dead.pid}\n")
    assert ground.tag in sweep_stale()
    assert ground_names(ground) == set()
    assert not host_has_link(ground.nic)


def test_dig_reads_status_flags_and_answer_from_a_responder_across_the_ground() -> None:
    require_root()
    ground = Ground().build()
    responder = subprocess.Popen(
        ["ip", "netns", "exec", ground.internet, sys.executable, "-c", RESPONDER, GATEWAY],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert responder.stdout is not None
        assert responder.stdout.readline().strip() == "ready"
        soa = dig(ground.client, GATEWAY, "example.org.")
        assert soa.status == "NOERROR"
        assert soa.authoritative
        assert len(soa.answer) == 1
        assert "SOA" in soa.answer[0]
        outside = dig(ground.client, GATEWAY, "example.net.")
        assert outside.status == "REFUSED"
        assert not outside.authoritative
    finally:
        deadline = time.monotonic() + 10
        responder.kill()
        responder.wait(timeout=max(0.1, deadline - time.monotonic()))
        if responder.stdout is not None:
            responder.stdout.close()
        ground.cleanup()

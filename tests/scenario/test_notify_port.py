"""NOTIFY goes to the secondary's own port (issue 31): ``valis zone secondary add
ADDR:PORT`` (``[ADDR]:PORT`` for IPv6) keeps the port in operator state (migration 0015),
``zone secondary list`` shows it, and the resident's NOTIFY for the zone's next change
arrives on a loopback listener at that port although the sender's port is 53. A port
that is not one is refused, saying what a port is. Real PostgreSQL, the ``valis``
command, a real UDP socket as the secondary.
"""

from __future__ import annotations

import json
import socket

import dns.message
import dns.opcode
import trio

from tests.scenario.operator_state_helpers import soa_zone
from tests.scenario.pg import PgCluster, valis
from tests.scenario.transfer_wire import KEY_NAME, ZONE
from valis_core.dns.transfer.notify_send import ChangeWatch, NotifySender
from valis_core.dns.zone import ZoneIndex
from valis_core.resident.secondaries import SecondaryReader

BOUND = 30.0
SECRET = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def test_a_port_that_is_not_one_is_refused_saying_what_a_port_is(zone_dsn: str) -> None:
    for wrong, said in (
        ("127.0.0.1:0", "the port '0' is not a whole number from 1 to 65535"),
        ("127.0.0.1:65536", "the port '65536' is not a whole number from 1 to 65535"),
        ("127.0.0.1:dns", "the port 'dns' is not a whole number"),
        ("127.0.0.1:", "the port '' is not a whole number"),
        ("[2001:db8::2]5300", "write an IPv6 address with a port as [ADDR]:PORT"),
        ("[2001:db8::2", "write an IPv6 address with a port as [ADDR]:PORT"),
        ("[192.0.2.x]:53", "is not an IPv4 or IPv6 address"),
    ):
        status, out, err = valis("zone", "secondary", "add", "--dsn", zone_dsn, ZONE, wrong,
                                 "--key-name", KEY_NAME)
        assert (status, out) == (1, ""), wrong
        assert said in err, (wrong, err)
        assert len(err.splitlines()) == 1
    status, out, _ = valis("zone", "secondary", "list", "--dsn", zone_dsn)
    assert (status, out.splitlines()[1:]) == (0, [])  # nothing was stored


def test_list_shows_the_notify_port_given_and_none_for_the_standard_one(zone_dsn: str) -> None:
    for target in ("192.0.2.53:5300", "[2001:db8::0:2]:5301", "192.0.2.54"):
        status, out, err = valis("zone", "secondary", "add", "--dsn", zone_dsn, ZONE, target,
                                 "--key-name", KEY_NAME, "--secret", SECRET)
        assert (status, err) == (0, ""), err
    assert out == f"zone {ZONE}: secondary 192.0.2.54 added, key {KEY_NAME}\n"
    status, out, _ = valis("zone", "secondary", "list", "--dsn", zone_dsn)
    assert [line.split("\t")[1] for line in out.splitlines()[1:]] == [
        "192.0.2.53:5300", "192.0.2.54", "[2001:db8::2]:5301"]
    status, out, _ = valis("zone", "secondary", "list", "--dsn", zone_dsn, "--json")
    assert [(s["address"], s["notify_port"]) for s in json.loads(out)] == [
        ("192.0.2.53", 5300), ("192.0.2.54", None), ("2001:db8::2", 5301)]
    # Listed again without a port: back to 53; removed by its address, with or without it.
    status, out, _ = valis("zone", "secondary", "add", "--dsn", zone_dsn, ZONE, "192.0.2.53",
                           "--key-name", KEY_NAME, "--secret", SECRET)
    assert out == f"zone {ZONE}: secondary 192.0.2.53 updated, key {KEY_NAME}\n"
    status, out, _ = valis("zone", "secondary", "remove", "--dsn", zone_dsn, ZONE,
                           "[2001:db8::2]:5301")
    assert (status, out) == (0, f"zone {ZONE}: secondary 2001:db8::2 removed\n")
    status, out, _ = valis("zone", "secondary", "list", "--dsn", zone_dsn)
    assert [line.split("\t")[1] for line in out.splitlines()[1:]] == ["192.0.2.53", "192.0.2.54"]


async def test_notify_arrives_on_the_port_the_secondary_was_listed_with(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listening:
        await listening.bind(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        assert port != 53
        status, _, err = valis("zone", "secondary", "add", "--dsn", zone_dsn, ZONE,
                               f"127.0.0.1:{port}", "--key-name", KEY_NAME, "--secret", SECRET)
        assert (status, err) == (0, "")
        reader = SecondaryReader(lambda: pg_cluster.connect(zone_dsn, autocommit=True),
                                 refresh=3600.0)
        try:
            sender = NotifySender("127.0.0.1", reader.listed_fenced, attempts=1, timeout=0.05)
            holder = ChangeWatch(ZoneIndex.from_zone_text(soa_zone(ZONE), ZONE))
            holder.changed = sender.changed
            async with trio.open_nursery() as nursery:
                await nursery.start(sender.run)
                holder.swap(ZoneIndex.from_zone_text(soa_zone(ZONE, serial=2), ZONE))
                with trio.fail_after(BOUND):
                    data, peer = await listening.recvfrom(65535)
                nursery.cancel_scope.cancel()
        finally:
            reader.close()
    message = dns.message.from_wire(data, keyring=False)
    assert message.opcode() == dns.opcode.NOTIFY
    assert message.question[0].name.to_text() == ZONE
    assert message.answer[0][0].serial == 2
    assert message.tsig is not None
    assert message.tsig.name.to_text() == KEY_NAME
    assert peer[0] == "127.0.0.1"
    assert sender.stats.sent >= 1

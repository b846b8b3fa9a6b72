"""A zone goes beyond one machine: the operator lists its secondaries with their TSIG keys
(``valis zone secondary``), only those secondaries may transfer it (AXFR, signed), and
they are told of every committed change (NOTIFY) and follow it by incremental transfer
(IXFR from the zone's change journal, whoever wrote the change), or by a whole-zone
transfer once the journal no longer reaches back; a real NSD and a real Knot, each in its
own network namespace, prove it, and follow the node through an evacuation made by
``valis condense --evacuate`` on the proving ground."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from tests.conftest import require_root
from tests.scenario.located_node import ADDRESS_A, ADDRESS_B
from tests.scenario.located_node import Node as EvacuatedNode
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, import_zone, soa_zone
from tests.scenario.pg import RUN_USER, PgCluster, valis
from tests.scenario.proving_ground import Ground, dig, run, run_in, sweep_stale, wait_for
from tests.scenario.resident_harness import (
    REPO,
    Resident,
    make_state_dir,
    resident_runtime,
    site_facts,
)
from tests.scenario.transfer_wire import (
    KEY_NAME,
    NODE_IP,
    SECONDARY_IP,
    SERVERS,
    STRANGER_IP,
    ZONE,
    Wire,
    nsd_conf,
    start_node,
    stop_server,
)
from valis_core.dns.transfer.notify_send import ChangeWatch, NotifySender
from valis_core.dns.zone import ZoneIndex
from valis_core.fence import FenceState
from valis_core.identity.custody import load_keyfile
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence
from valis_core.operator_state.secondaries import (
    Secondary,
    add_secondary,
    remove_secondary,
)
from valis_core.ops.backup import create_backup
from valis_core.ops.condense import CondenseRequest, RequestKind, condense_onto_host
from valis_core.owner.key import derive_owner_tsig
from valis_core.resident.secondaries import SecondaryReader

SECRET = base64.b64encode(bytes(range(32))).decode()


def test_an_operator_lists_adds_and_removes_secondaries_with_their_keys(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    status, _, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE, "192.0.2.53",
                           "--key-name", "xfr")
    assert status == 1
    assert err == f"valis: zone {ZONE} is not in the operator-state database; import it first\n"

    import_zone(pg_cluster, state_dsn, ZONE)
    status, out, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE, "192.0.2.53",
                             "--key-name", "xfr", "--secret", SECRET)
    assert (status, err) == (0, "")
    assert out == f"zone {ZONE}: secondary 192.0.2.53 added, key xfr.\n"
    status, out, _ = valis("zone", "secondary", "add", "--dsn", state_dsn, "EXAMPLE.test",
                           "2001:db8::0:53", "--key-name", "Other.Key.")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"zone {ZONE}: secondary 2001:db8::53 added, key other.key."
    assert lines[1:3] == ['key "other.key." {', "\talgorithm hmac-sha256;"]

    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn, "--json",
                           "--secrets")
    assert status == 0
    listed = json.loads(out)
    assert [(s["address"], s["key_name"], s["algorithm"]) for s in listed] == [
        ("192.0.2.53", "xfr.", "hmac-sha256"), ("2001:db8::53", "other.key.", "hmac-sha256"),
    ]
    assert listed[0]["secret"] == SECRET
    assert len(base64.b64decode(listed[1]["secret"])) == 32

    for wrong, said in (
        (("not-an-address", "--key-name", "k"), "is not an IPv4 or IPv6 address"),
        (("192.0.2.0/24", "--key-name", "k"), "is not an IPv4 or IPv6 address"),
        (("192.0.2.9", "--key-name", "k", "--algorithm", "hmac-md5"), "hmac-sha256, "),
        (("192.0.2.9", "--key-name", "k", "--secret", "c2hvcnQ="), "the TSIG secret is 5 bytes"),
    ):
        status, out, err = valis("zone", "secondary", "add", "--dsn", state_dsn, ZONE, *wrong)
        assert (status, out) == (1, "")
        assert said in err
        assert len(err.splitlines()) == 1

    status, out, _ = valis("zone", "secondary", "remove", "--dsn", state_dsn, ZONE,
                           "192.0.2.53")
    assert (status, out) == (0, f"zone {ZONE}: secondary 192.0.2.53 removed\n")
    status, _, err = valis("zone", "secondary", "remove", "--dsn", state_dsn, ZONE,
                           "192.0.2.53")
    assert status == 1
    assert "has no secondary at 192.0.2.53" in err
    status, out, _ = valis("zone", "secondary", "list", "--dsn", state_dsn)
    assert out.splitlines() == [
        "ZONE\tADDRESS\tKEY\tALGORITHM\tVIA",
        f"{ZONE}\t2001:db8::53\tother.key.\thmac-sha256\t-",
    ]


# --- a real secondary ------------------------------------------------------------------

BOUND = 30.0


# Runs in a namespace with this checkout's interpreter: one AXFR from ``source``, the
# RCODE and answer count of its first message printed (read without checking a TSIG: a
# refusal is unsigned).
_AXFR = r"""
import socket, sys
import dns.message, dns.rcode, dns.tsigkeyring
server, source, zone, key = sys.argv[1:5]
query = dns.message.make_query(zone, "AXFR")
if key:
    name, secret = key.split(":")
    query.use_tsig(dns.tsigkeyring.from_text({name: secret}), name)
data = query.to_wire()
sock = socket.create_connection((server, 53), timeout=10, source_address=(source, 0))
sock.sendall(len(data).to_bytes(2, "big") + data)
got = b""
while len(got) < 2 or len(got) < 2 + int.from_bytes(got[:2], "big"):
    chunk = sock.recv(65535)
    if not chunk:
        break
    got += chunk
response = dns.message.from_wire(got[2:], keyring=False)
print(dns.rcode.to_text(response.rcode()), len(response.answer))
"""

# Runs in the node's namespace: one owner UPDATE, signed with the owner key, adding a
# record; prints the RCODE.
_UPDATE = r"""
import sys
import dns.query, dns.rcode, dns.tsig, dns.update
server, zone, name, secret, algorithm, owner, address = sys.argv[1:8]
key = dns.tsig.Key(name, bytes.fromhex(secret), algorithm)
update = dns.update.UpdateMessage(zone, keyring=key)
update.add(owner, 300, "A", address)
print(dns.rcode.to_text(dns.query.tcp(update, server, port=8053, timeout=10).rcode()))
"""


def ask_secondary(wire: Wire, name: str, rdtype: str = "A") -> tuple[str, ...]:
    try:
        return dig(wire.secondary, SECONDARY_IP, name, rdtype).answer
    except RuntimeError:
        return ()


def owner_update(wire: Wire, node: Resident, owner: str, address: str) -> str:
    """Add a record through the node's owner terminus, as the zone's owner would."""
    key = derive_owner_tsig(load_keyfile(node.state_dir))
    result = run_in(wire.node, [str(REPO / ".venv" / "bin" / "python"), "-c", _UPDATE,
                                NODE_IP, ZONE, str(key.name), key.secret.hex(),
                                str(key.algorithm), owner, address], check=False)
    return result.stdout.strip() or result.stderr.strip()


def follows(wire: Wire, node: Resident, name: str, serial: int, *, how: str, server: str) -> None:
    """Wait until the secondary answers ``name`` at ``serial``, and the node's log says
    which transfer it had (``how``)."""
    wait_for(lambda: ask_secondary(wire, name), BOUND, f"{server} to answer {name}",
             interval=0.1)
    assert dig(wire.secondary, SECONDARY_IP, ZONE, "SOA").answer[0].split()[6] == str(serial)
    wait_for(lambda: f"zone transfer: {how} of {ZONE} serial {serial} to {SECONDARY_IP}"
             in node.stderr(), BOUND, f"the node to log the {how} to {server}", interval=0.1)


def axfr_from(wire: Wire, source: str, key: str = "") -> str:
    result = run_in(wire.secondary, [str(REPO / ".venv" / "bin" / "python"), "-c", _AXFR,
                                      NODE_IP, source, ZONE, key], check=False)
    return result.stdout.strip() or result.stderr.strip()


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_secondary_follows_the_node_by_transfer_and_strangers_are_refused(
    pg_cluster: PgCluster, zone_dsn: str, run_account_dir: Path, wire: Wire, server: str
) -> None:
    conf, command, log_name = SERVERS[server]
    secret = base64.b64encode(bytes(range(1, 33))).decode()
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, Secondary(ZONE, SECONDARY_IP, KEY_NAME, "hmac-sha256",
                                      base64.b64decode(secret)))
    node = start_node(wire, make_state_dir(run_account_dir), site_facts(zone_dsn),
                      run_account_dir)
    directory = Path(tempfile.mkdtemp(prefix=f"{server}-", dir=run_account_dir))
    # NSD asks IXFR over UDP first here (its evacuation below asks over TCP, its default);
    # Knot has no such setting: it asks the SOA over UDP, then transfers over TCP.
    udp = server == "nsd"
    text = nsd_conf(directory, secret, udp=True) if udp else conf(directory, secret)
    (directory / f"{server}.conf").write_text(text)
    secondary = None
    try:
        node.wait_ready()
        # The secondary starts once the node serves (Knot, answered nothing on its first
        # try, waits its retry interval, tens of seconds, before asking again); after its
        # start it asks for the zone and serves what the node sent.
        secondary = subprocess.Popen(
            ["ip", "netns", "exec", wire.secondary, *command,
             str(directory / f"{server}.conf")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: ask_secondary(wire, "www.example.test."), BOUND,
                 f"{server} to load {ZONE} by transfer ({directory / log_name})", interval=0.2)
        assert ask_secondary(wire, "www.example.test.")[0].split()[-1] == "192.0.2.80"

        # An operator import: the node NOTIFYs; the secondary transfers the new version and
        # answers it.
        import_zone(pg_cluster, zone_dsn, ZONE, serial=2,
                    extra=EXAMPLE_WWW + "new IN A 192.0.2.81\n")
        found = wait_for(lambda: ask_secondary(wire, "new.example.test."), BOUND,
                         f"{server} to follow the import", interval=0.1)
        assert found[0].split()[-1] == "192.0.2.81"
        assert dig(wire.secondary, SECONDARY_IP, ZONE, "SOA").answer[0].split()[6] == "2"
        log = node.stderr()
        assert f"notify: {ZONE} serial 2 to {SECONDARY_IP} answered NOERROR" in log

        # Over UDP the difference fits one datagram: it is sent there.
        over = " over UDP" if udp else ":"
        wait_for(lambda: f"zone transfer: IXFR from serial 1 of {ZONE} serial 2 to "
                 f"{SECONDARY_IP}{over}" in node.stderr(), BOUND, "the node to log the IXFR",
                 interval=0.1)

        # The owner terminus writes a record (and raises the serial): the secondary
        # follows by IXFR.
        assert owner_update(wire, node, "upd", "192.0.2.82") == "NOERROR"
        follows(wire, node, "upd.example.test.", 3, how="IXFR from serial 2", server=server)
        assert f"IXFR from serial 2 of {ZONE} serial 3 to {SECONDARY_IP}{over}" in \
            node.stderr()

        # An operator's bulk SQL, not touching the SOA: the commit raises the serial
        # itself, and the secondary follows by IXFR (told TC over UDP: it is too big for a
        # datagram, so over TCP).
        with pg_cluster.connect(zone_dsn) as conn, conn.transaction():
            conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                         " SELECT %s, 'h' || i || '.' || %s, 'A', 300, '198.51.100.' || i"
                         " FROM generate_series(1, 100) AS i", (ZONE, ZONE))
        follows(wire, node, "h100.example.test.", 4, how="IXFR from serial 3", server=server)
        log = node.stderr()
        assert f"IXFR from serial 3 of {ZONE} serial 4 to {SECONDARY_IP}:" in log
        told_tc = (f"zone transfer: IXFR over UDP from serial 3 of {ZONE} serial 4 to "
                   f"{SECONDARY_IP}: answered TC")
        assert (told_tc in log) == udp

        # A change the journal no longer holds (pruned away in its own transaction): the
        # secondary, at serial 4, is sent the whole zone and converges.
        with pg_cluster.connect(zone_dsn) as conn, conn.transaction():
            conn.execute("DELETE FROM records WHERE zone = %s AND owner LIKE 'h%%'", (ZONE,))
            conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                         " VALUES (%s, %s, 'A', 300, '192.0.2.85')", (ZONE, "late." + ZONE))
            conn.execute("UPDATE records SET rdata = regexp_replace(rdata, ' 4 ', ' 5 ')"
                         " WHERE zone = %s AND rtype = 'SOA'", (ZONE,))
            conn.execute("DELETE FROM zone_journal")
        follows(wire, node, "late.example.test.", 5, how="IXFR (whole zone)", server=server)
        assert ask_secondary(wire, "h1.example.test.") == ()
        assert ask_secondary(wire, "upd.example.test.")[0].split()[-1] == "192.0.2.82"

        # valis status says where the secondary stands.
        account = pwd.getpwnam(RUN_USER)
        status = run_in(wire.node, [
            "setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
            "--init-groups", "--", resident_runtime(), "status", "--state-dir",
            str(node.state_dir)], check=False)
        assert f"secondary {SECONDARY_IP} of {ZONE}: serial 5, up to date" in status.stdout

        # Anyone else asking for the zone is refused: no key, another address (REFUSED); a
        # wrong secret is NOTAUTH (BADSIG, RFC 8945 section 5.2.2), as NSD and Knot answer.
        wrong = base64.b64encode(bytes(32)).decode()
        assert axfr_from(wire, SECONDARY_IP) == "REFUSED 0"
        assert axfr_from(wire, SECONDARY_IP, f"{KEY_NAME}:{wrong}") == "NOTAUTH 0"
        assert axfr_from(wire, STRANGER_IP, f"{KEY_NAME}:{secret}") == "REFUSED 0"
        assert axfr_from(wire, SECONDARY_IP, f"{KEY_NAME}:{secret}").startswith("NOERROR")
        dug = run_in(wire.secondary, ["dig", f"@{NODE_IP}", "-b", STRANGER_IP, ZONE, "AXFR",
                                      "-y", f"hmac-sha256:{KEY_NAME}:{secret}"], check=False)
        assert "Transfer failed." in dug.stdout
        log = node.stderr()
        for reason in ("the request is not TSIG-signed", f"the TSIG of key {KEY_NAME} does not "
                       "verify", f"{STRANGER_IP} is not a listed secondary of {ZONE}"):
            assert reason in log
    finally:
        stop_server(secondary)
        node.stop()
        node.notify.close()


@attrs.frozen
class Following:
    """A node serving ``ZONE`` from the database at ``dsn`` and a real secondary (``server``)
    that has loaded it by transfer."""

    wire: Wire
    node: Resident
    server: str
    pg: PgCluster
    dsn: str

    def serial(self) -> int:
        with self.pg.connect(self.dsn) as conn:
            row = conn.execute("SELECT valis_soa_serial(rdata) FROM records"
                               " WHERE zone = %s AND rtype = 'SOA'", (ZONE,)).fetchone()
        assert row is not None
        return int(row[0])

    def caught_up(self) -> int:
        """Wait until the secondary serves the database's serial; that serial."""
        serial = self.serial()
        wait_for(lambda: dig(self.wire.secondary, SECONDARY_IP, ZONE, "SOA").answer[0]
                 .split()[6] == str(serial), BOUND, f"{self.server} to follow serial {serial}",
                 interval=0.1)
        return serial


@pytest.fixture(params=sorted(SERVERS))
def following(
    request: pytest.FixtureRequest, pg_cluster: PgCluster, zone_dsn: str,
    run_account_dir: Path, wire: Wire,
) -> Iterator[Following]:
    server: str = request.param
    conf, command, log_name = SERVERS[server]
    secret = bytes(range(1, 33))
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, Secondary(ZONE, SECONDARY_IP, KEY_NAME, "hmac-sha256", secret))
    node = start_node(wire, make_state_dir(run_account_dir), site_facts(zone_dsn),
                      run_account_dir)
    directory = Path(tempfile.mkdtemp(prefix=f"{server}-", dir=run_account_dir))
    (directory / f"{server}.conf").write_text(conf(directory, base64.b64encode(secret).decode()))
    secondary = None
    try:
        node.wait_ready()
        secondary = subprocess.Popen(
            ["ip", "netns", "exec", wire.secondary, *command, str(directory / f"{server}.conf")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: ask_secondary(wire, "www.example.test."), BOUND,
                 f"{server} to load {ZONE} by transfer ({directory / log_name})", interval=0.2)
        yield Following(wire, node, server, pg_cluster, zone_dsn)
    finally:
        stop_server(secondary)
        node.stop()
        node.notify.close()


def test_a_record_two_rows_spell_stays_on_the_secondary_when_one_row_goes(
    following: Following,
) -> None:
    """The journal compares rows as written; the node serves a record two rows spell
    once. The row removed while the other stays leaves the record served, and the IXFR
    must leave it on the secondary too."""
    first, second = "2001:db8::53", "2001:0db8:0000::53"
    with following.pg.connect(following.dsn) as conn:
        conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                     " VALUES (%s, %s, 'AAAA', 300, %s)", (ZONE, f"v6.{ZONE}", first))
    following.caught_up()
    assert ask_secondary(following.wire, f"v6.{ZONE}", "AAAA")[0].split()[-1] == first
    with following.pg.connect(following.dsn) as conn:
        conn.execute("INSERT INTO records (zone, owner, rtype, ttl, rdata)"
                     " VALUES (%s, %s, 'AAAA', 300, %s)", (ZONE, f"v6.{ZONE}", second))
    following.caught_up()
    with following.pg.connect(following.dsn) as conn:
        conn.execute("DELETE FROM records WHERE zone = %s AND owner = %s AND rdata = %s",
                     (ZONE, f"v6.{ZONE}", first))
    serial = following.caught_up()
    logged = f"zone transfer: IXFR from serial {serial - 1} of {ZONE} serial {serial}"
    wait_for(lambda: logged in following.node.stderr(), BOUND, "the node to log the IXFR",
             interval=0.1)
    assert [answer.split()[-1] for answer in
            ask_secondary(following.wire, f"v6.{ZONE}", "AAAA")] == [first]
    # The node itself answers it too (it read the owner's rows back).
    assert [answer.split()[-1] for answer in
            dig(following.wire.node, NODE_IP, f"v6.{ZONE}", "AAAA").answer] == [first]


async def test_a_node_another_instance_has_superseded_notifies_no_one(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    with pg_cluster.connect(zone_dsn) as conn:
        add_secondary(conn, Secondary(ZONE, "127.0.0.1", KEY_NAME, "hmac-sha256", bytes(32)))
        seed_instance_fence(conn, "node-a@here#1")
        claim_instance_fence(conn, 1, "node-a@there#2")
    reader = SecondaryReader(lambda: pg_cluster.connect(zone_dsn, autocommit=True),
                             FenceState(generation=0, holder="node-a@here#1"))
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listening:
        await listening.bind(("127.0.0.1", 0))
        sender = NotifySender("127.0.0.1", reader.listed_fenced,
                              port=listening.getsockname()[1], timeout=0.05)
        index = ZoneIndex.from_zone_text(soa_zone(ZONE, serial=1), ZONE)
        holder = ChangeWatch(index)
        holder.changed = sender.changed
        with trio.move_on_after(BOUND):
            async with trio.open_nursery() as nursery:
                await nursery.start(sender.run)
                holder.swap(ZoneIndex.from_zone_text(soa_zone(ZONE, serial=2), ZONE))
                while not sender.stats.withheld:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        assert (sender.stats.withheld, sender.stats.sent) == (1, 0)
    # The transfers' reader still lists them (a superseded node stops on its heartbeat).
    assert [s.address for s in await reader.listed()] == ["127.0.0.1"]
    reader.close()


async def test_a_secondary_added_or_removed_is_known_at_once_without_waiting_for_the_refresh(
    pg_cluster: PgCluster, zone_dsn: str
) -> None:
    """The list in memory that decides who may transfer follows ``valis zone secondary
    add`` and ``remove`` when they commit (they announce the change), not only at the
    periodic refresh, here made an hour so that nothing else could bring it."""
    reader = SecondaryReader(lambda: pg_cluster.connect(zone_dsn, autocommit=True),
                             refresh=3600.0)
    added = Secondary(ZONE, "192.0.2.44", KEY_NAME, "hmac-sha256", bytes(32))

    async def until_known(addresses: list[str]) -> None:
        with trio.fail_after(BOUND):
            while [s.address for s in reader.known()] != addresses:
                await trio.sleep(0.01)

    try:
        assert await reader.listed() == ()
        async with trio.open_nursery() as nursery:
            await nursery.start(reader.follow)  # started once it listens
            with pg_cluster.connect(zone_dsn) as conn:
                add_secondary(conn, added)
            await until_known(["192.0.2.44"])
            with pg_cluster.connect(zone_dsn) as conn:
                assert remove_secondary(conn, ZONE, "192.0.2.44")
            await until_known([])
            nursery.cancel_scope.cancel()
    finally:
        reader.close()


# --- evacuation through the real condense ----------------------------------------------


@attrs.define
class Reach:
    """The secondary's namespace, joined to two proving grounds' internets: it is at
    SECONDARY_IP, routed to each ground's unit address through that ground, and answers
    from SECONDARY_IP (the address the node lists it at)."""

    grounds: tuple[Ground, Ground]
    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))

    @property
    def netns(self) -> str:
        return f"vl-sec-{self.tag}"

    def build(self, units: tuple[str, str]) -> None:
        run(["ip", "netns", "add", self.netns])
        run(["ip", "-n", self.netns, "link", "set", "lo", "up"])
        run(["ip", "-n", self.netns, "addr", "add", f"{SECONDARY_IP}/32", "dev", "lo"])
        for i, (ground, unit) in enumerate(zip(self.grounds, units, strict=True)):
            near, far = f"vsn{i}-{self.tag}", f"vsf{i}-{self.tag}"
            inet_ip, sec_ip = f"203.0.113.{4 * i + 1}", f"203.0.113.{4 * i + 2}"
            run(["ip", "link", "add", near, "type", "veth", "peer", "name", far])
            run(["ip", "link", "set", near, "netns", ground.internet])
            run(["ip", "link", "set", far, "netns", self.netns])
            run(["ip", "-n", ground.internet, "addr", "add", f"{inet_ip}/30", "dev", near])
            run(["ip", "-n", self.netns, "addr", "add", f"{sec_ip}/30", "dev", far])
            run(["ip", "-n", ground.internet, "link", "set", near, "up"])
            run(["ip", "-n", self.netns, "link", "set", far, "up"])
            run_in(ground.internet, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
            run(["ip", "-n", ground.internet, "route", "add", f"{SECONDARY_IP}/32", "via",
                 sec_ip])
            run(["ip", "-n", self.netns, "route", "add", f"{unit}/32", "via", inet_ip, "src",
                 SECONDARY_IP])

    def cleanup(self) -> None:
        for pid in run(["ip", "netns", "pids", self.netns], check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        run(["ip", "netns", "del", self.netns], check=False)


def ask_in(netns: str, name: str, rdtype: str = "A") -> tuple[str, ...]:
    try:
        return dig(netns, SECONDARY_IP, name, rdtype).answer
    except RuntimeError:
        return ()


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_an_evacuation_by_condense_moves_the_secondary_to_the_successor(
    pg_cluster: PgCluster, zone_dsn: str, run_account_dir: Path, server: str
) -> None:
    require_root()
    sweep_stale()
    ground_a, ground_b = Ground().build(), Ground().build()
    reach = Reach((ground_a, ground_b))
    nodes: list[EvacuatedNode] = []
    secondary = None
    try:
        reach.build((ADDRESS_A, ADDRESS_B))
        secret = base64.b64encode(bytes(range(1, 33))).decode()
        with pg_cluster.connect(zone_dsn) as conn:
            add_secondary(conn, Secondary(ZONE, SECONDARY_IP, KEY_NAME, "hmac-sha256",
                                          base64.b64decode(secret)))
        a = EvacuatedNode(run_account_dir, ground_a, ADDRESS_A, pg_cluster, dsn=zone_dsn,
                          location="ground-a")
        nodes.append(a)
        condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE]), a.host)
        conf, command, _ = SERVERS[server]
        directory = Path(tempfile.mkdtemp(prefix=f"{server}-", dir=run_account_dir))
        (directory / f"{server}.conf").write_text(conf(directory, secret,
                                                       (ADDRESS_A, ADDRESS_B)))
        secondary = subprocess.Popen(
            ["ip", "netns", "exec", reach.netns, *command, str(directory / f"{server}.conf")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: ask_in(reach.netns, "www.example.test."), BOUND,
                 f"{server} to load {ZONE} from A", interval=0.2)

        # B is condensed from A's backup by the operator's command, which claims the fence
        # and then supervises B's unit; A is fenced out at its next heartbeat.
        archive = run_account_dir / "a.backup"
        create_backup(a.state_dir, archive)
        b = EvacuatedNode(run_account_dir, ground_b, ADDRESS_B, pg_cluster, dsn=zone_dsn,
                          location="ground-b")
        nodes.append(b)
        argv, env = b.condense_evacuate(archive, pg_cluster)
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) as cli:
            try:
                assert cli.stdout is not None
                line = cli.stdout.readline()
                assert line.startswith("valis: condensed (evacuate)"), line

                # A change committed now: the fenced-out predecessor (until its next
                # heartbeat stops it) notifies no one; the successor notifies from its own
                # address, and the secondary follows it by IXFR (the journal is in the
                # shared operator state).
                import_zone(pg_cluster, zone_dsn, ZONE, serial=2,
                            extra=EXAMPLE_WWW + "moved IN A 192.0.2.91\n")
                assert a.unit.wait_exit(BOUND) not in (0, None), a.log.read_text()
                found = wait_for(lambda: ask_in(reach.netns, "moved.example.test."), BOUND,
                                 f"{server} to follow B", interval=0.1)
                assert found[0].split()[-1] == "192.0.2.91"
                wait_for(lambda: f"zone transfer: IXFR from serial 1 of {ZONE} serial 2 to "
                         f"{SECONDARY_IP}" in b.log.read_text(), BOUND, "B to log the IXFR",
                         interval=0.1)
                assert f"notify: {ZONE} serial 2 to {SECONDARY_IP} answered NOERROR" in \
                    b.log.read_text()
                assert f"notify: {ZONE} serial 2" not in a.log.read_text()
                cli.send_signal(signal.SIGTERM)
                assert cli.wait(60) == 0
            finally:
                if cli.poll() is None:
                    cli.kill()
    finally:
        stop_server(secondary)
        for node in nodes:
            node.unit.close()
        reach.cleanup()
        ground_b.cleanup()
        ground_a.cleanup()

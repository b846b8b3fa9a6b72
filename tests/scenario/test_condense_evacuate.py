"""The proving ground's ``evacuate``: two coincident instances of one node at different
network locations (unit addresses 198.51.100.10 and 198.51.100.20, each on its own
ground) sharing ONE operator-state database.

Node A is deployed by ``condense --genesis`` (the library) and signs its two zones (``valis
zone sign``: one with compact denial, one with NSEC3); its backup set is condensed onto B by
``valis condense --from-backup --evacuate`` (the operator's command, which then supervises
B's unit). B answers authoritatively from its client, signed with A's keys: its DO=1 answers
validate under the DS ``valis zone ds`` printed on A, and its DNSKEY RRset is A's byte for
byte. A's next heartbeat is fenced out, so A stops and exits non-zero with the fenced-out
reason and answers no more; restarting A does not take the fence back, nor can A sign
anything new; and B's owner public key is A's. Both units are ``fulcrum launch`` supervised
by ``ProcessUnitController``, as on a host without systemd.
"""

from __future__ import annotations

import io
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.dnssec
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from tests.conftest import require_root
from tests.property.dnssec_check import validate, validate_sections
from tests.scenario.located_node import ADDRESS_A, ADDRESS_B, ZONE, Node
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, import_zone
from tests.scenario.pg import RUN_USER, PgCluster, valis
from tests.scenario.proving_ground import (
    Ground,
    dig,
    run_in,
    sweep_stale,
    wait_for,
)
from valis_core.fence import FENCED_OUT_EXIT_STATUS
from valis_core.identity.instance import holder_name, read_instance
from valis_core.operator_state.fence import read_instance_fence
from valis_core.operator_state.zone_denial import denial_of
from valis_core.ops.backup import create_backup, verify_backup_set
from valis_core.ops.condense import CondenseRequest, RequestKind, condense_onto_host

CHAINED = "chained.test."
EXIT_TIMEOUT = 60.0

# Asks questions (NAME/TYPE) from a client namespace with dnspython, DO=1, over TCP when
# truncated; prints each response's wire form in hex, one a line.
_ASK = r"""
import sys
import dns.message, dns.query
server = sys.argv[1]
for question in sys.argv[2:]:
    name, rdtype = question.split("/")
    query = dns.message.make_query(name, rdtype, want_dnssec=True, use_edns=0, payload=1232)
    response, _ = dns.query.udp_with_fallback(query, server, timeout=2)
    print(response.to_wire().hex())
"""


@pytest.fixture
def grounds() -> Iterator[tuple[Ground, Ground]]:
    require_root()
    sweep_stale()
    first = Ground().build()
    try:
        second = Ground().build()
        try:
            yield first, second
        finally:
            second.cleanup()
    finally:
        first.cleanup()


# How each signed zone denies a name: compact (NOERROR, one NSEC) or from its NSEC3 chain.
DENIAL = {ZONE: (dns.rcode.NOERROR, dns.rdatatype.NSEC),
          CHAINED: (dns.rcode.NXDOMAIN, dns.rdatatype.NSEC3)}


def ask_signed(netns: str, server: str, questions: list[tuple[str, str]]
               ) -> list[dns.message.Message]:
    """DO=1 questions (name, type) asked from ``netns`` by dnspython, the responses
    parsed."""
    asked = run_in(netns, [sys.executable, "-c", _ASK, server,
                           *(f"{name}/{rdtype}" for name, rdtype in questions)])
    return [dns.message.from_wire(bytes.fromhex(line)) for line in asked.stdout.split()]


def zone_ds(state_dir: Path, zone: str) -> dns.rdata.Rdata:
    """The DS ``valis zone ds`` prints for ``zone``: what its parent holds."""
    status, out, err = valis("zone", "ds", zone, "--state-dir", str(state_dir))
    assert status == 0, err
    ds_text = out.splitlines()[0].split(" IN DS ")[1]
    return dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.DS, ds_text)


def answers_under(netns: str, server: str, ds: dict[str, Any]) -> dict[str, bytes]:
    """Ask ``server`` each zone's DNSKEY RRset, a name it holds and one it does not (DO=1):
    the key with the zone's DS must sign the RRset, and every answer must validate under
    that RRset. Returns each zone's DNSKEY RRset in wire form, to compare servers by."""
    questions = [(f"{prefix}{zone}", rdtype) for zone in ds
                 for prefix, rdtype in (("", "DNSKEY"), ("www.", "A"), ("nowhere.", "A"))]
    responses = iter(ask_signed(netns, server, questions))
    served = {}
    for zone, parent_ds in ds.items():
        apex = dns.name.from_text(zone)
        response, www, missing = next(responses), next(responses), next(responses)
        keys = response.find_rrset(response.answer, apex, dns.rdataclass.IN,
                                   dns.rdatatype.DNSKEY)
        sig = response.find_rrset(response.answer, apex, dns.rdataclass.IN,
                                  dns.rdatatype.RRSIG, dns.rdatatype.DNSKEY)
        (anchor,) = [key for key in keys if dns.dnssec.key_id(key) == parent_ds.key_tag]
        assert dns.dnssec.make_ds(apex, anchor, parent_ds.digest_type) == parent_ds
        validate(keys, sig, {apex: dns.rrset.from_rdata(apex, keys.ttl, anchor)},
                 now=time.time())
        assert [rdata.to_text() for rdata in www.answer[0]] == ["192.0.2.80"]
        rcode, denial = DENIAL[zone]
        assert missing.rcode() == rcode
        assert denial in {rrset.rdtype for rrset in missing.authority}
        for signed in (www, missing):
            assert validate_sections(signed, {apex: keys}, now=time.time()) >= 1
        wire = io.BytesIO()
        keys.to_wire(wire)
        served[zone] = wire.getvalue()
    return served


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    made: list[Node] = []
    yield made
    for node in made:
        node.unit.close()


def test_evacuate_moves_the_node_and_its_signing_keys_to_b_and_fences_a_out_for_good(
    grounds: tuple[Ground, Ground], pg_cluster: PgCluster, zone_dsn: str,
    run_account_dir: Path, nodes: list[Node],
) -> None:
    ground_a, ground_b = grounds
    import_zone(pg_cluster, zone_dsn, CHAINED, extra=EXAMPLE_WWW)
    zones = f"{ZONE},{CHAINED}"
    a = Node(run_account_dir, ground_a, ADDRESS_A, pg_cluster, dsn=zone_dsn,
             location="ground-a", zones=zones)
    nodes.append(a)
    condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE, CHAINED]), a.host)
    assert dig(ground_a.client, ADDRESS_A, ZONE).authoritative

    # The operator signs both zones on A and gives the parents their DS.
    for zone, how in ((ZONE, ("--algorithm", "13")),
                      (CHAINED, ("--algorithm", "15", "--denial", "nsec3"))):
        status, _, err = valis("zone", "sign", zone, *how, "--state-dir", str(a.state_dir))
        assert status == 0, err
    ds = {zone: zone_ds(a.state_dir, zone) for zone in (ZONE, CHAINED)}
    wait_for(lambda: all(dig(ground_a.client, ADDRESS_A, zone, "DNSKEY").answer
                         for zone in ds), EXIT_TIMEOUT, "A to serve its zones signed",
             interval=0.2)
    served_by_a = answers_under(ground_a.client, ADDRESS_A, ds)

    archive = run_account_dir / "a.backup"
    create_backup(a.state_dir, archive)
    generation = verify_backup_set(archive).generation

    # B is condensed by the operator's command, which then supervises B's unit.
    b = Node(run_account_dir, ground_b, ADDRESS_B, pg_cluster, dsn=zone_dsn,
             location="ground-b", zones=zones)
    nodes.append(b)
    argv, env = b.condense_evacuate(archive, pg_cluster)
    stderr_path = run_account_dir / "condense-b.stderr"
    with stderr_path.open("w") as stderr, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
    ) as cli:
        try:
            assert cli.stdout is not None
            line = cli.stdout.readline()
            assert line.startswith("valis: condensed (evacuate)"), (
                line, stderr_path.read_text(), b.log.read_text() if b.log.exists() else ""
            )

            answer = dig(ground_b.client, ADDRESS_B, ZONE)
            assert (answer.status, answer.authoritative) == ("NOERROR", True), answer.raw
            # B signs with A's keys: under the DS the parents hold, the same DNSKEY RRsets.
            assert answers_under(ground_b.client, ADDRESS_B, ds) == served_by_a
            assert b.zone_keys() == a.zone_keys()

            # fulcrum passes the fenced-out resident's status through as its own.
            exited = a.unit.wait_exit(EXIT_TIMEOUT)
            assert exited == FENCED_OUT_EXIT_STATUS, a.log.read_text()
            assert "fenced out" in a.log.read_text()
            with pytest.raises(RuntimeError, match="no DNS response"):
                dig(ground_a.client, ADDRESS_A, ZONE, "DNSKEY", timeout=1.0)

            a.unit.restart()
            assert not a.unit.wait_up(EXIT_TIMEOUT), a.log.read_text()
            # Nor can A's operator verbs change what is signed.
            status, _, err = valis("zone", "sign", ZONE, "--denial", "nsec3",
                                   "--state-dir", str(a.state_dir))
            assert status != 0
            assert "superseded" in err
            with pg_cluster.connect(zone_dsn) as conn:
                assert denial_of(conn, ZONE) == "compact"
                fence = read_instance_fence(conn)
            assert fence is not None
            b_holder = holder_name("node-a@ground-b", read_instance(b.state_dir) or "")
            assert (fence.generation, fence.holder) == (generation + 1, b_holder)
            # A's own status says who fenced it out; a backup taken there is refused.
            status, _, err = valis("status", "--state-dir", str(a.state_dir))
            assert status == 1
            assert err.startswith(
                f"valis: fenced out by {b_holder} at generation {generation + 1}: "), err
            status, _, err = valis("backup", "create", "--state-dir", str(a.state_dir),
                                   "--out", str(a.state_dir.parent / "a-after.tar"))
            assert status == 1
            assert "could never be restored" in err, err
            assert cli.poll() is None, "B's unit stopped"
            assert dig(ground_b.client, ADDRESS_B, ZONE).authoritative
            assert b.owner_key() == a.owner_key()
            assert pwd.getpwuid(b.state_dir.stat().st_uid).pw_name == RUN_USER

            cli.send_signal(signal.SIGTERM)
            assert cli.wait(60) == 0, stderr_path.read_text()
        finally:
            if cli.poll() is None:
                cli.kill()


def key_tags(node: Node, zone: str) -> set[int]:
    """The key tags ``node``'s state directory holds for ``zone`` (from the key files'
    names, ``K<zone>+<algorithm>+<tag>.pem``)."""
    prefix = f"K{zone.rstrip('.')}+"
    return {int(name.removesuffix(".pem").rsplit("+", 1)[1])
            for name in node.zone_keys() if name.startswith(prefix)}


def test_an_evacuation_from_a_backup_lacking_a_signing_key_is_refused_before_the_claim(
    grounds: tuple[Ground, Ground], pg_cluster: PgCluster, zone_dsn: str,
    run_account_dir: Path, nodes: list[Node],
) -> None:
    """A's backup sets are taken as its operator changes its signing: OLD before
    example.test. was signed, MID before chained.test.'s rollover began. Condensing B
    from either is refused at the step that proves the zones servable, naming the zone
    and the key its state directory lacks: the fence never moves, so A is not fenced
    out and serves on, and B's unit is never started. From a backup taken after both,
    the same condense into the same state directory finishes, and only then is A
    fenced out."""
    ground_a, ground_b = grounds
    import_zone(pg_cluster, zone_dsn, CHAINED, extra=EXAMPLE_WWW)
    zones = f"{ZONE},{CHAINED}"
    a = Node(run_account_dir, ground_a, ADDRESS_A, pg_cluster, dsn=zone_dsn,
             location="ground-a", zones=zones)
    nodes.append(a)
    condense_onto_host(CondenseRequest(RequestKind.GENESIS, [ZONE, CHAINED]), a.host)
    status, _, err = valis("zone", "sign", CHAINED, "--algorithm", "13",
                           "--state-dir", str(a.state_dir))
    assert status == 0, err

    old = run_account_dir / "old.backup"
    create_backup(a.state_dir, old)
    status, _, err = valis("zone", "sign", ZONE, "--algorithm", "13",
                           "--state-dir", str(a.state_dir))
    assert status == 0, err
    (signed_key,) = key_tags(a, ZONE)
    mid = run_account_dir / "mid.backup"
    create_backup(a.state_dir, mid)
    (chained_old,) = key_tags(a, CHAINED)
    status, out, err = valis("zone", "rollover", CHAINED, "--state-dir", str(a.state_dir))
    assert status == 0, err
    (chained_new,) = key_tags(a, CHAINED) - {chained_old}
    assert f"to {chained_new}, step ds-submit" in out, out
    wait_for(lambda: all(dig(ground_a.client, ADDRESS_A, zone, "DNSKEY").answer
                         for zone in (ZONE, CHAINED)), EXIT_TIMEOUT,
             "A to serve both zones signed", interval=0.2)
    with pg_cluster.connect(zone_dsn) as conn:
        fence_before = read_instance_fence(conn)

    b = Node(run_account_dir, ground_b, ADDRESS_B, pg_cluster, dsn=zone_dsn,
             location="ground-b", zones=zones)
    nodes.append(b)
    refusals = (
        (old, ZONE, [signed_key]),
        (mid, CHAINED, [chained_new]),
    )
    for archive, zone, missing in refusals:
        argv, env = b.condense_evacuate(archive, pg_cluster)
        refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300,
                                 check=False)
        assert refused.returncode != 0, refused.stdout
        reason = " ".join(refused.stderr.split())
        assert f"(prove zone servable {zone}) failed" in reason, reason
        assert (f"the state directory lacks key tag {', '.join(map(str, missing))}"
                in reason), reason
        assert f"zone {zone} is signed in operator state" in reason, reason
        assert "the unit was not started" in reason, reason
        with pg_cluster.connect(zone_dsn) as conn:
            assert read_instance_fence(conn) == fence_before
        assert not b.log.exists(), b.log.read_text()
        # A was never fenced out: it answers both zones signed, and its heartbeat, which
        # a fenced-out node's next beat ends on, keeps it up.
        assert a.unit.is_up(), a.log.read_text()
        for served in (ZONE, CHAINED):
            answer = dig(ground_a.client, ADDRESS_A, served, "DNSKEY")
            assert (answer.status, answer.authoritative) == ("NOERROR", True), answer.raw
    assert "fenced out" not in a.log.read_text()

    # The operator takes a backup that holds every key, and runs the condense again.
    new = run_account_dir / "new.backup"
    create_backup(a.state_dir, new)
    generation = verify_backup_set(new).generation
    argv, env = b.condense_evacuate(new, pg_cluster)
    stderr_path = run_account_dir / "condense-b.stderr"
    with stderr_path.open("w") as stderr, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
    ) as cli:
        try:
            assert cli.stdout is not None
            line = cli.stdout.readline()
            assert line.startswith("valis: condensed (evacuate)"), (
                line, stderr_path.read_text(), b.log.read_text() if b.log.exists() else ""
            )
            for served in (ZONE, CHAINED):
                answer = dig(ground_b.client, ADDRESS_B, served, "DNSKEY")
                assert (answer.status, answer.authoritative) == ("NOERROR", True), answer.raw
            assert b.zone_keys() == a.zone_keys()
            assert a.unit.wait_exit(EXIT_TIMEOUT) not in (0, None), a.log.read_text()
            assert "fenced out" in a.log.read_text()
            with pg_cluster.connect(zone_dsn) as conn:
                fence = read_instance_fence(conn)
            assert fence is not None
            b_holder = holder_name("node-a@ground-b", read_instance(b.state_dir) or "")
            assert (fence.generation, fence.holder) == (generation + 1, b_holder)
            cli.send_signal(signal.SIGTERM)
            assert cli.wait(60) == 0, stderr_path.read_text()
        finally:
            if cli.poll() is None:
                cli.kill()

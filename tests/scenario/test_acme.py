"""The edge's certificate, obtained by the node itself from an ACME CA (pebble) that
validates the DNS-01 challenge against what the node serves: the operator's stories.

The resident runs as the launcher runs it (``--edge-tcp-fd``, the run account), in a
network namespace of its own; pebble runs in another and resolves through the node.
"""

from __future__ import annotations

import datetime
import json
import pwd
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import NameOID

from tests.conftest import require_root
from tests.scenario.edge_ca import install, make_test_ca
from tests.scenario.pebble_ca import NODE_IP, Pebble
from tests.scenario.pg import RUN_USER, PgCluster
from tests.scenario.proving_ground import run_in, wait_for
from tests.scenario.resident_harness import Harness, Resident, make_state_dir, site_facts
from valis_core.acting_as import acting_as
from valis_core.atomic import write_atomic
from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone.serial import raised_serial
from valis_core.edge.certificate import certificate_from_pem
from valis_core.edge.challenge import (
    ChallengeError,
    challenge_name,
    publish_request,
    withdraw_request,
    write_fenced,
)
from valis_core.fence import FencedOut
from valis_core.identity.instance import holder_name, load_or_mint_instance
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence
from valis_core.operator_state.zones import load_zone_rows, set_serial_policy
from valis_core.ops.backup import create_backup, restore_backup, verify_backup_set
from valis_core.state_layout import (
    acme_account_key_path,
    edge_certificate_path,
    edge_key_path,
    head_path,
)
from valis_core.store.head import HEAD_MODE
from valis_core.store.manifest import dumps, loads

ZONE = "example.test."
DOMAIN = "doh.example.test"
EVERY_VERSION_ANSWERS = ["HTTP_2 NOERROR 192.0.2.80", "HTTP_1 NOERROR 192.0.2.80"]
EDGE_FILES = (acme_account_key_path, edge_key_path, edge_certificate_path)
# Short certificate lifetimes (seconds) for the stories that wait for one to come due (a
# third left): long enough to be obtained and served first, short enough not to idle.
RENEWED_LIFETIME = 12
# The failed renewal's certificate must still be valid when DoH is asked after the
# failure: the third left (7 s) covers it on a loaded machine.
FAILED_RENEWAL_LIFETIME = 21

_DOH = r"""
import ssl, sys
import dns.message, dns.query, dns.rcode
query = dns.message.make_query(sys.argv[3], "A")
for version in (dns.query.HTTPVersion.H2, dns.query.HTTPVersion.H1):
    reply = dns.query.https(query, sys.argv[1], bootstrap_address=sys.argv[2], timeout=10,
                            verify=ssl.create_default_context(cafile=sys.argv[4]),
                            http_version=version)
    print(version.name, dns.rcode.to_text(reply.rcode()),
          " ".join(sorted(rdata.to_text() for rrset in reply.answer for rdata in rrset)))
"""

_STATUS = r"""
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
with urllib.request.urlopen(request, timeout=10) as response:
    sys.stdout.write(response.read().decode())
"""


def node_status(pebble: Pebble, resident: Resident) -> dict[str, Any]:
    """The node's /status, asked on its fabric from inside its namespace."""
    url, token = resident.fabric()
    asked = run_in(pebble.node_netns, [sys.executable, "-c", _STATUS, url + "/status", token])
    document: dict[str, Any] = json.loads(asked.stdout)
    return document


def run_account() -> tuple[int, int]:
    account = pwd.getpwnam(RUN_USER)
    return account.pw_uid, account.pw_gid


@pytest.fixture
def pebble(resident_harness: Harness) -> Iterator[Pebble]:
    require_root()
    ca = Pebble(resident_harness.workdir)
    try:
        ca.build()
        yield ca
    finally:
        ca.stop()


def start_node(harness: Harness, pebble: Pebble, dsn: str, state_dir: Path,
               dns_port: int = 0) -> Resident:
    facts = site_facts(dsn, VALIS_SERVED_DOMAIN=DOMAIN,
                       VALIS_ACME_DIRECTORY_URL=pebble.directory_url)
    return harness.start(
        state_dir, facts, edge=True, netns=pebble.node_netns, host=NODE_IP,
        dns_port=dns_port, extra_env={"REQUESTS_CA_BUNDLE": str(pebble.api_root)},
    )


def issued_chain(state_dir: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(edge_certificate_path(state_dir).read_bytes())


def chains_to(chain: list[x509.Certificate], root_pem: bytes) -> bool:
    """Whether each certificate is signed by the next and the last by ``root_pem``."""
    root = x509.load_pem_x509_certificate(root_pem)
    for child, parent in zip(chain, [*chain[1:], root], strict=True):
        child.verify_directly_issued_by(parent)
    return True


def served_index(conn: psycopg.Connection[Any]) -> ZoneIndex:
    """The index a node serving ``ZONE`` from ``conn``'s database would serve."""
    return ZoneIndex.from_records(load_zone_rows(conn, [ZONE])[ZONE])


def challenge_rows(pg: PgCluster, dsn: str) -> list[tuple[str, str]]:
    with pg.connect(dsn) as conn:
        rows = conn.execute("SELECT owner, rdata FROM records WHERE owner ILIKE %s",
                            ("_acme-challenge.%",)).fetchall()
    return [(str(owner), str(rdata)) for owner, rdata in rows]


def obtained(resident_harness: Harness, pebble: Pebble, zone_dsn: str,
             validity: int | None = None) -> tuple[Resident, Path]:
    """A node booted with the edge elected; READY once pebble issued its certificate."""
    state_dir = make_state_dir(resident_harness.workdir)
    resident = start_node(resident_harness, pebble, zone_dsn, state_dir)
    assert resident.port is not None
    pebble.start(resident.port, validity)
    resident.wait_ready()
    return resident, state_dir


def test_a_node_with_an_elected_edge_obtains_its_certificate_validated_against_its_own_zone(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str, pg_cluster: PgCluster
) -> None:
    resident, state_dir = obtained(resident_harness, pebble, zone_dsn)
    chain = issued_chain(state_dir)
    names = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [DOMAIN]
    pebble_root = pebble.issuing_root()
    assert chains_to(chain, pebble_root)
    # pebble really asked the node for the challenge, and the node withdrew it after.
    assert pebble.orders() == 1
    log = resident.stderr()
    assert f"DNS-01 record {challenge_name(DOMAIN)} published in {ZONE}" in log
    assert f"DNS-01 record {challenge_name(DOMAIN)} withdrawn" in log
    assert challenge_rows(pg_cluster, zone_dsn) == []
    for path in EDGE_FILES:
        assert path(state_dir).stat().st_mode & 0o777 == 0o600
    acme = node_status(pebble, resident)["edge"]["acme"]
    assert acme["domain"] == DOMAIN
    assert acme["orders"] == 1
    assert acme["failures_in_a_row"] == 0
    assert acme["last_step"] == "certificate stored"
    assert acme["next_attempt"] > chain[0].not_valid_before_utc.timestamp()
    # The edge serves it: a DoH client trusting pebble's root resolves over it.
    assert resident.edge_port is not None
    root_file = write_root(resident_harness, pebble_root)
    served = pebble.served_leaf(resident.edge_port, DOMAIN, root_file)
    assert served == chain[0].public_bytes(Encoding.DER)
    assert doh_answers(pebble, resident, root_file) == EVERY_VERSION_ANSWERS


def doh_answers(pebble: Pebble, resident: Resident, root_file: Path) -> list[str]:
    """What a DoH client trusting ``root_file`` gets for www over HTTP/2 and HTTP/1.1."""
    url = f"https://{DOMAIN}:{resident.edge_port}/dns-query"
    asked = run_in(pebble.ca_netns, [sys.executable, "-c", _DOH, url, NODE_IP,
                                     "www.example.test.", str(root_file)], check=False)
    return asked.stdout.splitlines()  # empty when the client failed


def test_the_node_renews_before_expiry_and_serves_the_new_certificate_without_a_restart(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str
) -> None:
    # Renewed when a third of RENEWED_LIFETIME is left.
    resident, state_dir = obtained(resident_harness, pebble, zone_dsn,
                                   validity=RENEWED_LIFETIME)
    assert resident.edge_port is not None
    root_file = write_root(resident_harness, pebble.issuing_root())
    first = pebble.served_leaf(resident.edge_port, DOMAIN, root_file)
    assert doh_answers(pebble, resident, root_file) == EVERY_VERSION_ANSWERS
    wait_for(lambda: pebble.orders() >= 2, 60, "the renewal's order")
    renewed = wait_for(
        lambda: (leaf := pebble.served_leaf(resident.edge_port or 0, DOMAIN, root_file))
        != first and leaf,
        30, "the renewed certificate to be served",
    )
    assert renewed
    # The served leaf is the stored one. Read both afresh until they agree: with a
    # lifetime this short the node renews every few seconds, and one renewal may land
    # between the two reads.
    wait_for(
        lambda: pebble.served_leaf(resident.edge_port or 0, DOMAIN, root_file)
        == issued_chain(state_dir)[0].public_bytes(Encoding.DER),
        30, "the served leaf to be the one stored in the state directory",
    )
    assert doh_answers(pebble, resident, root_file) == EVERY_VERSION_ANSWERS
    assert resident.proc.poll() is None
    assert "edge: certificate for doh.example.test obtained" in resident.stderr()


def write_root(harness: Harness, root_pem: bytes) -> Path:
    path = harness.workdir / "pebble-issuing-root.pem"
    path.write_bytes(root_pem)
    path.chmod(0o644)
    return path




def restore_as_condense_does(archive: Path, state_dir: Path, pg: PgCluster, dsn: str) -> None:
    """Restore ``archive`` into ``state_dir`` and claim the fence one generation on for
    its new instance, as ``valis condense`` (restore) does."""
    restored = restore_backup(archive, state_dir, owner=run_account())
    with acting_as(run_account()):
        token = load_or_mint_instance(state_dir)
    generation = restored.generation + 1
    with pg.connect(dsn) as conn:
        claim_instance_fence(conn, generation, holder_name("node-a@loopback", token))
    head = loads(head_path(state_dir).read_bytes())
    with acting_as(run_account()):
        write_atomic(head_path(state_dir), dumps(attrs.evolve(head, generation=generation)),
                     mode=HEAD_MODE)


def test_a_restored_node_serves_the_same_certificate_without_asking_the_ca_again(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str, pg_cluster: PgCluster
) -> None:
    first, origin = obtained(resident_harness, pebble, zone_dsn)
    assert first.port is not None
    assert pebble.orders() == 1
    first.proc.terminate()
    assert first.wait_exit() == 0
    archive = resident_harness.workdir / "backup.tar"
    create_backup(origin, archive)
    carried = {path.path for path in verify_backup_set(archive).manifest.files}
    assert {"edge/acme-account.key", "edge/leaf.key", "edge/leaf.crt"} <= carried

    state_dir = resident_harness.workdir / "restored"
    restore_as_condense_does(archive, state_dir, pg_cluster, zone_dsn)
    for path in EDGE_FILES:
        assert path(state_dir).read_bytes() == path(origin).read_bytes()
    restored = start_node(resident_harness, pebble, zone_dsn, state_dir, dns_port=first.port)
    restored.wait_ready()
    assert "the CA is not asked" in restored.stderr()
    assert pebble.orders() == 1
    assert restored.edge_port is not None
    root_file = write_root(resident_harness, pebble.issuing_root())
    served = pebble.served_leaf(restored.edge_port, DOMAIN, root_file)
    assert served == issued_chain(origin)[0].public_bytes(Encoding.DER)
    for path in EDGE_FILES:
        assert path(state_dir).read_bytes() == path(origin).read_bytes()


def test_a_fenced_out_node_cannot_write_a_challenge_and_the_holder_can(
    zone_dsn: str, pg_cluster: PgCluster
) -> None:
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        old = seed_instance_fence(conn, "node-a@loopback#a")
        moved = claim_instance_fence(conn, old.generation + 1, "node-a@elsewhere#b")
        with pytest.raises(FencedOut):
            write_fenced(conn, old, publish_request(ZONE, DOMAIN, "token-a"), [ZONE],
                         served_index(conn), now=time.time())
        assert challenge_rows(pg_cluster, zone_dsn) == []
        write_fenced(conn, moved, publish_request(ZONE, DOMAIN, "token-b"), [ZONE],
                     served_index(conn), now=time.time())
        assert challenge_rows(pg_cluster, zone_dsn) == [
            (challenge_name(DOMAIN), '"token-b"')
        ]
        with pytest.raises(FencedOut):
            write_fenced(conn, old, withdraw_request(ZONE, DOMAIN), [ZONE],
                         served_index(conn), now=time.time())
        write_fenced(conn, moved, withdraw_request(ZONE, DOMAIN), [ZONE],
                     served_index(conn), now=time.time())
        assert challenge_rows(pg_cluster, zone_dsn) == []


def test_the_challenge_write_raises_the_serial_by_the_zone_policy_as_the_owner_terminus_does(
    zone_dsn: str, pg_cluster: PgCluster
) -> None:
    """Publishing and withdrawing the DNS-01 record go through the owner terminus's write
    path: the zone's serial policy sets each new serial (not a bare increment), and each
    write is one journal entry from the serial before to it."""
    at = 1_900_000_000.0
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        standing = seed_instance_fence(conn, "node-a@loopback#a")
        assert set_serial_policy(conn, ZONE, "unixtime")
        before = soa_serial(conn)
        write_fenced(conn, standing, publish_request(ZONE, DOMAIN, "token-p"), [ZONE],
                     served_index(conn), now=at)
        published = soa_serial(conn)
        write_fenced(conn, standing, withdraw_request(ZONE, DOMAIN), [ZONE],
                     served_index(conn), now=at + 60)
        withdrawn = soa_serial(conn)
        entries = conn.execute(
            "SELECT old_serial, new_serial FROM zone_journal WHERE zone = %s ORDER BY id",
            (ZONE,),
        ).fetchall()
    assert published == raised_serial("unixtime", before, now=at) == int(at)
    assert withdrawn == raised_serial("unixtime", published, now=at + 60) == int(at) + 60
    assert entries[-2:] == [(before, published), (published, withdrawn)]
    assert challenge_rows(pg_cluster, zone_dsn) == []


def test_a_challenge_record_the_zone_could_not_serve_is_refused_with_nothing_written(
    zone_dsn: str, pg_cluster: PgCluster
) -> None:
    """The challenge write is checked against the zone being served as any update is: a
    record that would lie hidden beneath a DNAME is refused, and nothing is written."""
    with pg_cluster.connect(zone_dsn, autocommit=True) as conn:
        standing = seed_instance_fence(conn, "node-a@loopback#a")
        conn.execute(
            "INSERT INTO records (zone, owner, rtype, ttl, rdata)"
            " VALUES (%s, %s, 'DNAME', 300, 'elsewhere.example.')",
            (ZONE, DOMAIN + "."),
        )
        before = soa_serial(conn)
        with pytest.raises(ChallengeError, match="REFUSED"):
            write_fenced(conn, standing, publish_request(ZONE, DOMAIN, "token-d"), [ZONE],
                         served_index(conn), now=time.time())
        assert soa_serial(conn) == before
    assert challenge_rows(pg_cluster, zone_dsn) == []


def soa_serial(conn: psycopg.Connection[Any]) -> int:
    found = conn.execute(
        "SELECT valis_soa_serial(rdata) FROM records WHERE zone = %s AND rtype = 'SOA'",
        (ZONE,),
    ).fetchone()
    assert found is not None
    return int(found[0])


def test_a_node_that_cannot_reach_its_ca_and_holds_no_certificate_stops_at_acme(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str, pg_cluster: PgCluster
) -> None:
    # pebble is never started: its address answers nothing.
    pebble.api_root.write_bytes(make_test_ca().root_pem)
    state_dir = make_state_dir(resident_harness.workdir)
    resident = start_node(resident_harness, pebble, zone_dsn, state_dir)
    assert resident.wait_exit() != 0
    assert not resident.notify.seen("READY")
    last = resident.last_line()
    assert last.startswith("valis: acme: edge: ACME order for doh.example.test at ")
    assert "the node keeps its current certificate" in last
    assert not edge_certificate_path(state_dir).exists()
    assert challenge_rows(pg_cluster, zone_dsn) == []


def test_a_renewal_the_ca_fails_leaves_the_node_serving_its_certificate(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str
) -> None:
    resident, state_dir = obtained(resident_harness, pebble, zone_dsn,
                                   validity=FAILED_RENEWAL_LIFETIME)
    assert resident.edge_port is not None
    root_file = write_root(resident_harness, pebble.issuing_root())
    held = edge_certificate_path(state_dir).read_bytes()
    pebble.stop_ca()
    wait_for(lambda: "edge: renewal failed (1 in a row)" in resident.stderr(), 60,
             "the failed renewal")
    assert resident.proc.poll() is None
    assert "still serving the certificate valid until" in resident.stderr()
    assert edge_certificate_path(state_dir).read_bytes() == held
    assert doh_answers(pebble, resident, root_file) == EVERY_VERSION_ANSWERS


def test_a_held_certificate_for_another_name_is_replaced_at_boot(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str
) -> None:
    state_dir = make_state_dir(resident_harness.workdir)
    install(make_test_ca().issue(("old.example.test",)), state_dir, run_account())
    resident = start_node(resident_harness, pebble, zone_dsn, state_dir)
    assert resident.port is not None
    pebble.start(resident.port)
    resident.wait_ready()
    assert pebble.orders() == 1
    leaf = issued_chain(state_dir)[0]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [DOMAIN]


def due_certificate(state_dir: Path) -> bytes:
    """A valid certificate for the domain with less than a third of its life left,
    installed as the node's; its DER leaf."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, DOMAIN)])
    now = datetime.datetime.now(datetime.UTC)
    leaf = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=10))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(DOMAIN)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    install(certificate_from_pem(leaf.public_bytes(Encoding.PEM), key_pem, origin="test"),
            state_dir, run_account())
    return leaf.public_bytes(Encoding.DER)


def test_a_due_certificate_is_served_at_boot_while_the_ca_is_down(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str
) -> None:
    # pebble is never started: its address answers nothing.
    pebble.api_root.write_bytes(make_test_ca().root_pem)
    state_dir = make_state_dir(resident_harness.workdir)
    leaf = due_certificate(state_dir)
    resident = start_node(resident_harness, pebble, zone_dsn, state_dir)
    resident.wait_ready()
    assert "it is due, so it is renewed in the background" in resident.stderr()
    wait_for(lambda: "edge: renewal failed (1 in a row)" in resident.stderr(), 30,
             "the failed renewal")
    assert resident.proc.poll() is None
    assert resident.edge_port is not None
    assert pebble.served_leaf(resident.edge_port, DOMAIN, cert_file(resident_harness, leaf)
                              ) == leaf
    acme = node_status(pebble, resident)["edge"]["acme"]
    assert acme["failures_in_a_row"] == 1
    assert "ACME order for doh.example.test" in acme["last_error"]
    assert acme["next_attempt"] > time.time()


def cert_file(harness: Harness, der: bytes) -> Path:
    """``der`` as a PEM trust anchor a client can name."""
    path = harness.workdir / "trusted-leaf.pem"
    path.write_bytes(x509.load_der_x509_certificate(der).public_bytes(Encoding.PEM))
    path.chmod(0o644)
    return path


def test_on_demand_the_node_is_ready_at_once_and_the_edge_serves_the_certificate_it_obtains(
    resident_harness: Harness, pebble: Pebble, zone_dsn: str
) -> None:
    state_dir = make_state_dir(resident_harness.workdir)
    facts = site_facts(zone_dsn, VALIS_SERVED_DOMAIN=DOMAIN, VALIS_EDGE_CERT="on-demand",
                       VALIS_ACME_DIRECTORY_URL=pebble.directory_url)
    resident = resident_harness.start(
        state_dir, facts, edge=True, netns=pebble.node_netns, host=NODE_IP,
        extra_env={"REQUESTS_CA_BUNDLE": str(pebble.api_root)},
    )
    assert resident.port is not None
    pebble.start(resident.port)
    resident.wait_ready()
    assert "acme: no certificate yet; asking" in resident.stderr()
    wait_for(lambda: edge_certificate_path(state_dir).exists(), 60, "the certificate")
    assert resident.edge_port is not None
    root_file = write_root(resident_harness, pebble.issuing_root())
    served = wait_for(lambda: doh_answers(pebble, resident, root_file), 30, "DoH answers")
    assert served == EVERY_VERSION_ANSWERS

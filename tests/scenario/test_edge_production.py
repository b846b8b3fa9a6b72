"""The edge on the production path: ``valis condense`` with fulcrum launching the unit,
the DoH edge on port 443 reaching the resident through the push boot's steer, and the
certificate obtained from pebble by the node itself.

pebble runs in its own namespace on ground A's "internet" and resolves through node A's
unit address :53, so the DNS-01 challenge is validated against what the node serves
there. Node A is condensed from genesis by the operator's command (``valis condense
--genesis``, supervising ``fulcrum launch``); a DoH client in A's client namespace,
trusting pebble's root, asks it over HTTP/2 (dnspython) and HTTP/1.1 (curl). Then A's
backup set is condensed onto B at another address on another ground (``--from-backup
--evacuate``): B serves DoH with the certificate it carried, pebble is not asked again,
and A, fenced out, stops and can write no challenge.

The CA's own TLS is a throwaway root, named to the unit by ``REQUESTS_CA_BUNDLE`` in its
environment, as docs/edge.md tells an operator with a private CA to do.
"""

from __future__ import annotations

import base64
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import dns.message
import dns.rcode
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from tests.conftest import require_root
from tests.scenario.operator_state_helpers import EXAMPLE_WWW, import_zone
from tests.scenario.pebble_ca import Pebble
from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import (
    FULCRUM,
    PYTHON,
    Ground,
    dig,
    run_in,
    sweep_stale,
    unit_config_text,
)
from tests.scenario.resident_harness import make_state_dir, resident_runtime, site_facts
from tests.scenario.steer_object import steer_object_path
from valis_core.dns.zone import ZoneIndex
from valis_core.edge.challenge import challenge_name, publish_request, write_fenced
from valis_core.fence import FencedOut, FenceState
from valis_core.identity.instance import holder_name, read_instance
from valis_core.operator_state.fence import read_instance_fence
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.operator_state.zones import load_zone_rows
from valis_core.ops.backup import create_backup, verify_backup_set
from valis_core.state_layout import edge_certificate_path
from valis_core.store.head import read_store_head

ZONE = "example.test."
DOMAIN = "doh.example.test"
OUTSIDE = "elsewhere.invalid."
EDGE = 443
ADDRESS_A = "198.51.100.10"
ADDRESS_B = "198.51.100.20"
CA_ADDRESS = "198.51.100.30"
CONDENSE_TIMEOUT = 180.0
EXIT_TIMEOUT = 60.0

# Runs in a client namespace: one DoH question over HTTP/2 (dnspython), the reply's
# rcode and answer data on one line.
_DOH_H2 = r"""
import ssl, sys
import dns.message, dns.query, dns.rcode
url, address, name, cafile = sys.argv[1:5]
query = dns.message.make_query(name, "A")
reply = dns.query.https(query, url, bootstrap_address=address, timeout=10,
                        verify=ssl.create_default_context(cafile=cafile),
                        http_version=dns.query.HTTPVersion.H2)
print(dns.rcode.to_text(reply.rcode()),
      " ".join(sorted(rdata.to_text() for rrset in reply.answer for rdata in rrset)))
"""

_PEER_CERT = r"""
import socket, ssl, sys
context = ssl.create_default_context(cafile=sys.argv[4])
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as raw:
    with context.wrap_socket(raw, server_hostname=sys.argv[3]) as tls:
        sys.stdout.write(tls.getpeercert(binary_form=True).hex())
"""


@attrs.define
class Node:
    """One location: a ground, a state directory, ``valis condense`` supervising fulcrum."""

    ground: Ground
    address: str
    state_dir: Path
    log: Path
    cli: subprocess.Popen[str] | None = None
    stderr: Path | None = None

    @property
    def location(self) -> str:
        return f"ground-{self.address.rsplit('.', 1)[1]}"

    def unit_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@attrs.frozen
class World:
    workdir: Path
    pg: PgCluster
    dsn: str
    pebble: Pebble
    grounds: tuple[Ground, Ground]


@pytest.fixture(scope="module")
def world(pg_cluster: PgCluster) -> Iterator[World]:
    """Two grounds, pebble on A's, one operator-state database holding the zone."""
    require_root()
    sweep_stale()
    ensure_system_user(RUN_USER)
    workdir = Path(tempfile.mkdtemp(prefix="vl-edge-", dir="/tmp"))
    workdir.chmod(0o755)
    dsn = pg_cluster.new_database("edge")
    with pg_cluster.connect(dsn) as conn:
        migrate(conn)
    import_zone(pg_cluster, dsn, ZONE, extra=EXAMPLE_WWW)
    first = Ground().build()
    second: Ground | None = None
    pebble = Pebble(workdir, node_ip=ADDRESS_A, ca_ip=CA_ADDRESS)
    try:
        second = Ground().build()
        pebble.join(first.internet)
        pebble.start(53)
        yield World(workdir, pg_cluster, dsn, pebble, (first, second))
    finally:
        pebble.stop()
        for ground in (second, first):
            if ground is not None:
                ground.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Node]]:
    """The nodes condensed in this module; each command (and its unit) stopped after."""
    made: dict[str, Node] = {}
    yield made
    for node in made.values():
        if node.cli is not None and node.cli.poll() is None:
            node.cli.send_signal(signal.SIGTERM)
            try:
                node.cli.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                node.cli.kill()
                node.cli.wait()
        if node.cli is not None and node.cli.stdout is not None:
            node.cli.stdout.close()


def condense(world: World, ground: Ground, address: str, start: list[str]) -> Node:
    """``valis condense START...`` for a unit fulcrum launches on ``ground`` at ``address``
    with the edge elected on 443 behind the steer; returns once it says it condensed."""
    valis = resident_runtime()
    node = Node(ground, address, make_state_dir(world.workdir), Path())
    node.log = world.workdir / f"unit-{node.location}.log"
    config = world.workdir / f"launcher-{node.location}.toml"
    config.write_text(unit_config_text(
        ground, [valis], unit_ip=address, edge_port=EDGE,
        catchall_object_path=str(steer_object_path()),
    ))
    config.chmod(0o644)
    facts = world.workdir / f"site-facts-{node.location}.env"
    write_site_facts(facts, site_facts(
        world.dsn, VALIS_LOCATION=node.location, VALIS_SERVED_DOMAIN=DOMAIN,
        VALIS_ACME_DIRECTORY_URL=world.pebble.directory_url,
    ))
    unit = ["/bin/sh", "-c", 'exec "$@" >>"$UNIT_LOG" 2>&1', "sh", FULCRUM, "launch",
            "--config", str(config)]
    argv = [
        str(Path(sys.executable).parent / "valis"), "condense", *start,
        "--site-facts", str(facts), "--state-dir", str(node.state_dir),
        "--unit-command", shlex.join(unit), "--dns-address", f"{address}:53",
        "--ask-in-netns", ground.client, "--launcher-config", str(config),
        "--binary", valis,
        "--pg-socket-dir", str(world.pg.cluster.socket_dir),
        "--pg-port", str(world.pg.cluster.port),
    ]  # fmt: skip
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "UNIT_LOG": str(node.log),
           "REQUESTS_CA_BUNDLE": str(world.pebble.api_root)}
    node.stderr = world.workdir / f"condense-{node.location}.stderr"
    with node.stderr.open("w") as stderr:
        node.cli = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                    env=env)
    assert node.cli.stdout is not None
    # Bounded by the condense plan's own read-back timeout; the unit log says why not.
    line = node.cli.stdout.readline()
    assert line.startswith("valis: condensed"), (
        line, node.stderr.read_text(), node.unit_log(), world.pebble.log()[-2000:]
    )
    return node


def root_file(world: World) -> Path:
    """pebble's issuing root as a PEM file a client can trust."""
    path = world.workdir / "pebble-issuing-root.pem"
    if not path.exists():
        path.write_bytes(world.pebble.issuing_root())
        path.chmod(0o644)
    return path


def doh_h2(world: World, node: Node, name: str) -> str:
    """What dnspython's DoH client (HTTP/2) in the node's client namespace gets."""
    asked = run_in(node.ground.client, [
        sys.executable, "-c", _DOH_H2, f"https://{DOMAIN}:{EDGE}/dns-query", node.address,
        name, str(root_file(world)),
    ], check=False)
    assert asked.returncode == 0, asked.stderr
    return asked.stdout.strip()


def curl(world: World, node: Node, version: str, *args: str) -> tuple[str, bytes]:
    """``curl VERSION --cacert pebble's root ARGS`` at the node's edge from its client;
    the status code and the body."""
    body = world.workdir / "curl.body"
    body.unlink(missing_ok=True)
    got = run_in(node.ground.client, [
        "curl", "--silent", "--show-error", "--max-time", "10", version,
        "--cacert", str(root_file(world)), "--resolve", f"{DOMAIN}:{EDGE}:{node.address}",
        "--output", str(body), "--write-out", "%{http_code}", *args,
    ], check=False)
    assert got.returncode == 0, got.stderr
    return got.stdout, body.read_bytes() if body.exists() else b""


def doh_get(name: str) -> str:
    wire = dns.message.make_query(name, "A").to_wire()
    encoded = base64.urlsafe_b64encode(wire).rstrip(b"=").decode()
    return f"https://{DOMAIN}:{EDGE}/dns-query?dns={encoded}"


def served_leaf(world: World, node: Node) -> bytes:
    """The DER leaf the node's edge presents for the domain to its client, verified
    against pebble's root."""
    asked = run_in(node.ground.client, [PYTHON, "-c", _PEER_CERT, node.address, str(EDGE),
                                        DOMAIN, str(root_file(world))])
    return bytes.fromhex(asked.stdout.strip())


def challenge_rows(world: World) -> list[tuple[str, str]]:
    with world.pg.connect(world.dsn) as conn:
        rows = conn.execute("SELECT owner, rdata FROM records WHERE owner ILIKE %s",
                            ("_acme-challenge.%",)).fetchall()
    return [(str(owner), str(rdata)) for owner, rdata in rows]


@pytest.fixture(scope="module")
def node_a(world: World, nodes: dict[str, Node]) -> Node:
    """Node A, condensed from genesis on ground A by the operator's command: what the
    evacuation to B starts from, built here rather than by the genesis test."""
    nodes["a"] = condense(world, world.grounds[0], ADDRESS_A, ["--genesis"])
    return nodes["a"]


def test_a_node_condensed_from_genesis_obtains_its_certificate_and_serves_doh_on_443(
    world: World, node_a: Node
) -> None:
    ground = world.grounds[0]
    a = node_a

    # The node obtained its certificate from pebble, which validated the DNS-01 record
    # against the node's :53, and withdrew the record after.
    log = a.unit_log()
    assert f"DNS-01 record {challenge_name(DOMAIN)} published in {ZONE}" in log, log
    assert f"DNS-01 record {challenge_name(DOMAIN)} withdrawn" in log, log
    assert world.pebble.orders() == 1
    assert challenge_rows(world) == []
    chain = x509.load_pem_x509_certificates(edge_certificate_path(a.state_dir).read_bytes())
    assert served_leaf(world, a) == chain[0].public_bytes(Encoding.DER)

    # DoH at the unit address's 443, steered to the resident: HTTP/2 and HTTP/1.1.
    assert doh_h2(world, a, "www.example.test.") == "NOERROR 192.0.2.80"
    status, body = curl(world, a, "--http1.1", doh_get("www.example.test."))
    assert status == "200", (status, body)
    reply = dns.message.from_wire(body)
    assert [rdata.to_text() for rrset in reply.answer for rdata in rrset] == ["192.0.2.80"]

    # A name outside the served zones: the same REFUSED as :53.
    assert doh_h2(world, a, OUTSIDE) == "REFUSED"
    assert dig(ground.client, ADDRESS_A, OUTSIDE, "A").status == "REFUSED"

    # Malformed requests get 400, over either version, and the edge serves on.
    status, _ = curl(world, a, "--http1.1", f"https://{DOMAIN}:{EDGE}/dns-query?dns=!!!")
    assert status == "400"
    status, _ = curl(world, a, "--http2", "--data-binary", "junk",  # shorter than a header
                     "--header", "Content-Type: application/dns-message",
                     f"https://{DOMAIN}:{EDGE}/dns-query")
    assert status == "400"
    assert doh_h2(world, a, "www.example.test.") == "NOERROR 192.0.2.80"
    assert a.cli is not None
    assert a.cli.poll() is None


def test_evacuated_to_b_the_node_serves_doh_with_its_certificate_and_a_writes_no_challenge(
    world: World, nodes: dict[str, Node], node_a: Node
) -> None:
    a = node_a
    archive = world.workdir / "a.backup"
    create_backup(a.state_dir, archive)
    generation = verify_backup_set(archive).generation
    leaf = edge_certificate_path(a.state_dir).read_bytes()

    b = nodes["b"] = condense(world, world.grounds[1], ADDRESS_B,
                              ["--from-backup", str(archive), "--evacuate"])

    # B serves the certificate it carried, without asking the CA.
    assert edge_certificate_path(b.state_dir).read_bytes() == leaf
    assert "the CA is not asked" in b.unit_log()
    assert world.pebble.orders() == 1
    der = x509.load_pem_x509_certificates(leaf)[0].public_bytes(Encoding.DER)
    assert served_leaf(world, b) == der
    assert doh_h2(world, b, "www.example.test.") == "NOERROR 192.0.2.80"
    status, _ = curl(world, b, "--http1.1", doh_get("www.example.test."))
    assert status == "200"

    # A is fenced out: it stops, and its standing can write no challenge.
    assert a.cli is not None
    assert a.cli.wait(EXIT_TIMEOUT) != 0
    assert "fenced out" in a.unit_log()
    published = f"DNS-01 record {challenge_name(DOMAIN)} published"
    assert a.unit_log().count(published) == 1  # its genesis order's, and none since
    head = read_store_head(a.state_dir)
    assert head is not None
    assert head.generation == generation
    standing = FenceState(generation, holder_name(f"node-a@{a.location}",
                                                  read_instance(a.state_dir) or ""))
    with world.pg.connect(world.dsn, autocommit=True) as conn:
        fence = read_instance_fence(conn)
        assert fence is not None
        assert fence.generation == generation + 1
        index = ZoneIndex.from_records(load_zone_rows(conn, [ZONE])[ZONE])
        with pytest.raises(FencedOut):
            write_fenced(conn, standing, publish_request(ZONE, DOMAIN, "from-a"), [ZONE],
                         index, now=0.0)
    assert challenge_rows(world) == []
    assert b.cli is not None
    assert b.cli.poll() is None, b.unit_log()

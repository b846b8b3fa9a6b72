"""The two-host topology's seam: a node on one host reaches operator state on a database
host over TLS by its client certificate, and by nothing less.

The node's host is a namespace on the proving ground's internet; the database host
another (``two_hosts.DatabaseHost``). The run account connects with the certificate DSN
``valis provision --database-host`` writes (``sslmode=verify-full``, the CA, the client
certificate and key in the state directory) and is the role ``valis``; a certificate of
another CA, a DSN that does not verify the server's name, and a TCP DSN without the
certificate shape are all refused, the last by valis before any packet is sent.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, ensure_system_user, run_as, runtime_bin
from tests.scenario.proving_ground import Ground, sweep_stale
from tests.scenario.resident_harness import make_state_dir
from tests.scenario.two_hosts import (
    DATABASE_ADDRESS,
    SERVER_USER,
    DatabaseHost,
    certificate_dsn,
    ground_with_database,
    now,
    place_client_bundle,
)
from valis_core.operator_state.database_host import (
    HostOutcome,
    HostRequest,
    client_bundle,
    read_client_bundle,
    serve_database_host,
)
from valis_core.operator_state.host_cluster import ServerAccess
from valis_core.operator_state.local_cluster import LocalCluster
from valis_core.operator_state.tls_access import TlsAccess
from valis_core.operator_state.tls_material import Issued, issue_client, make_ca


@pytest.fixture(scope="module")
def db_host() -> Iterator[DatabaseHost]:
    require_root()
    with ground_with_database() as host:
        yield host


@pytest.fixture(scope="module")
def node_host(db_host: DatabaseHost) -> str:
    """A node's host on the same internet (its netns), where its verbs run."""
    return db_host.ground.add_host("a", "198.51.100.31")


def zone_list(netns: str, dsn: str) -> tuple[int, str]:
    done = run_as(RUN_USER, [str(runtime_bin() / "valis"), "zone", "list", "--dsn", dsn],
                  netns=netns, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_the_run_account_reaches_the_database_host_by_its_client_certificate(
    db_host: DatabaseHost, node_host: str, open_base: Path
) -> None:
    state_dir = make_state_dir(open_base)
    dsn = db_host.client_bundle(state_dir, node="origin-1")
    status, out = zone_list(node_host, dsn)
    assert status == 0, out
    assert "ZONE" in out  # the listing's header: connected, authenticated, schema current


def test_a_certificate_of_another_ca_is_refused_by_the_database_host(
    db_host: DatabaseHost, node_host: str, open_base: Path
) -> None:
    state_dir = make_state_dir(open_base)
    stranger = make_ca("somebody else", now())
    # The server's CA to verify it by, but a client certificate the server never issued.
    place_client_bundle(state_dir, db_host.ca.cert_pem,
                        issue_client(stranger, RUN_USER, "intruder", now()))
    status, out = zone_list(node_host, certificate_dsn(state_dir))
    assert status != 0
    assert "certificate" in out.lower(), out


def test_a_server_the_node_cannot_verify_by_name_is_refused(
    db_host: DatabaseHost, node_host: str, open_base: Path
) -> None:
    state_dir = make_state_dir(open_base)
    db_host.client_bundle(state_dir)
    # The server's certificate names 198.51.100.5; dialling it as another name fails
    # verify-full although the address, the CA and the client certificate are right.
    dsn = certificate_dsn(state_dir).replace(
        f"@{DATABASE_ADDRESS}:", "@db-not-named-in-its-certificate:"
    ) + f"&hostaddr={DATABASE_ADDRESS}"
    status, out = zone_list(node_host, dsn)
    assert status != 0
    assert "does not match host name" in out, out


def test_a_tcp_dsn_without_a_client_certificate_is_refused_before_connecting(
    db_host: DatabaseHost, node_host: str, open_base: Path
) -> None:
    state_dir = make_state_dir(open_base)
    db_host.client_bundle(state_dir)
    dsn = f"postgresql://{RUN_USER}@{DATABASE_ADDRESS}:5432/valis_state?sslmode=require"
    status, out = zone_list(node_host, dsn)
    assert status != 0
    assert "DSN refused" in out, out
    assert "only sslmode=verify-full" in out, out


@pytest.fixture
def plain_server() -> Iterator[tuple[Ground, LocalCluster]]:
    """A host's own PostgreSQL before ``valis db host``: on its socket only, its
    superuser by peer, running in a database host's netns on a fresh ground."""
    require_root()
    sweep_stale()
    ensure_system_user(RUN_USER)
    ground = Ground().build()
    root = Path(tempfile.mkdtemp(prefix="valis-pghost-", dir="/tmp"))
    try:
        cluster = LocalCluster(root=root, server_user=SERVER_USER,
                               netns=ground.add_host("db", DATABASE_ADDRESS))
        cluster.initialize({}, durable=False)
        cluster.start()
        try:
            yield ground, cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ground.cleanup()


def test_valis_db_host_makes_a_servers_own_postgresql_admit_nodes_by_certificate(
    plain_server: tuple[Ground, LocalCluster], open_base: Path
) -> None:
    ground, cluster = plain_server
    server = ServerAccess(str(cluster.socket_dir), cluster.port, SERVER_USER)
    ca_dir = open_base / "operator-state-ca"
    request = HostRequest((DATABASE_ADDRESS,), DATABASE_ADDRESS,
                          TlsAccess("198.51.100.0/24"), ca_dir)
    first = serve_database_host(server, request, now())
    assert first.restart_needed  # a new listen address takes a restart
    assert any("hostssl  valis_state  valis  198.51.100.0/24  cert" in line
               for line in first.changed), first.changed
    cluster.stop()
    cluster.start()
    assert serve_database_host(server, request, now()) == HostOutcome((), False)

    # A node host, given a bundle, migrates the schema and reads it over TLS.
    node_host = ground.add_host("a", "198.51.100.31")
    state_dir = make_state_dir(open_base)
    bundle = read_client_bundle(client_bundle(ca_dir, RUN_USER, "origin-1", now()),
                                source="origin-1.pem")
    place_client_bundle(state_dir, bundle.ca_pem, Issued(bundle.cert_pem, bundle.key_pem))
    dsn = certificate_dsn(state_dir)
    migrated = run_as(RUN_USER, [str(runtime_bin() / "valis"), "db", "migrate", "--dsn", dsn],
                      netns=node_host, timeout=60)
    assert migrated.returncode == 0, migrated.stderr
    status, out = zone_list(node_host, dsn)
    assert status == 0, out

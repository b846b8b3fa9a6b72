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

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, run_as, runtime_bin
from tests.scenario.resident_harness import make_state_dir
from tests.scenario.two_hosts import (
    DATABASE_ADDRESS,
    DatabaseHost,
    certificate_dsn,
    ground_with_database,
    now,
    place_client_bundle,
)
from valis_core.operator_state.tls_material import issue_client, make_ca


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

"""Two hosts and a database host on one proving ground: the two-host topology in namespaces.

``DatabaseHost`` stands a database host up on a ground's internet (its own netns at
198.51.100.5): a private cluster whose TLS listener admits the role ``valis`` by a client
certificate of the host's CA only (``operator_state.tls_access``), its server certificate
issued for that address, so a node's ``sslmode=verify-full`` proves it. The cluster's
UNIX socket stays on this machine for the test's own administration (migrating, importing
zones, reading the fence); nodes reach it only over TLS.

``client_bundle`` gives a state directory the client certificate a node reaches the
database with (``operator-state-tls/``, the run account's, 0600) and returns the
certificate DSN naming those files: what ``valis provision --database-host`` leaves on a
node.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs

from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import Ground, sweep_stale
from valis_core.operator_state.local_cluster import ClusterTls, LocalCluster
from valis_core.operator_state.schema import migrate
from valis_core.operator_state.tls_access import TlsAccess
from valis_core.operator_state.tls_material import Issued, issue_client, issue_server, make_ca
from valis_core.state_layout import (
    TLS_CA,
    TLS_CLIENT_CERT,
    TLS_CLIENT_KEY,
    operator_state_tls_dir,
)

DATABASE_ADDRESS = "198.51.100.5"
DATABASE_PORT = 5432
SERVER_USER = "postgres"


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def certificate_dsn(state_dir: Path, *, host: str = DATABASE_ADDRESS,
                    port: int = DATABASE_PORT, database: str = "valis_state",
                    sslmode: str = "verify-full") -> str:
    """The certificate DSN naming the client certificate under ``state_dir``."""
    tls = operator_state_tls_dir(state_dir)
    query = "&".join(f"{key}={quote(str(value), safe='/')}" for key, value in (
        ("sslmode", sslmode), ("sslrootcert", tls / TLS_CA),
        ("sslcert", tls / TLS_CLIENT_CERT), ("sslkey", tls / TLS_CLIENT_KEY),
        ("connect_timeout", 10),
    ))
    return f"postgresql://{RUN_USER}@{host}:{port}/{database}?{query}"


def place_client_bundle(state_dir: Path, ca_pem: bytes, client: Issued) -> None:
    """``operator-state-tls/`` under ``state_dir`` holding the CA and the client's
    certificate and key, the run account's alone."""
    account = ensure_system_user(RUN_USER)
    tls = operator_state_tls_dir(state_dir)
    tls.mkdir(mode=0o700, exist_ok=True)
    os.chown(tls, account.pw_uid, account.pw_gid)
    for name, data in ((TLS_CA, ca_pem), (TLS_CLIENT_CERT, client.cert_pem),
                       (TLS_CLIENT_KEY, client.key_pem)):
        path = tls / name
        path.write_bytes(data)
        os.chown(path, account.pw_uid, account.pw_gid)
        path.chmod(0o600)


@attrs.frozen
class DatabaseHost:
    """A database host on ``ground``: ``netns`` at ``DATABASE_ADDRESS``, ``pg`` its
    cluster (administered over the socket), ``ca`` the CA of both its certificates."""

    ground: Ground
    netns: str
    pg: PgCluster
    ca: Issued

    def client_bundle(self, state_dir: Path, *, node: str = "node") -> str:
        """A client certificate of this host's CA placed in ``state_dir``; its DSN."""
        place_client_bundle(state_dir, self.ca.cert_pem,
                            issue_client(self.ca, RUN_USER, node, now()))
        return certificate_dsn(state_dir)

    def new_database(self, prefix: str = "t") -> tuple[str, str]:
        """A fresh migrated database: (its socket DSN for the test, its name)."""
        socket_dsn = self.pg.new_database(prefix)
        with self.pg.connect(socket_dsn) as conn:
            migrate(conn)
        return socket_dsn, socket_dsn.partition("?")[0].rsplit("/", 1)[1]


@contextlib.contextmanager
def database_host(ground: Ground) -> Iterator[DatabaseHost]:
    """A database host on ``ground`` (root only); stopped and removed afterwards."""
    ensure_system_user(RUN_USER)
    netns = ground.add_host("db", DATABASE_ADDRESS)
    ca = make_ca("proving ground", now())
    tls = ClusterTls(listen=DATABASE_ADDRESS, server=issue_server(ca, [DATABASE_ADDRESS], now()),
                     ca_pem=ca.cert_pem, access=TlsAccess("198.51.100.0/24"))
    root = Path(tempfile.mkdtemp(prefix="valis-pgtls-", dir="/tmp"))
    cluster = LocalCluster(root=root, server_user=SERVER_USER, tls=tls, netns=netns)
    try:
        cluster.initialize({RUN_USER: [RUN_USER]}, durable=False)
        cluster.start()
        cluster.ensure_role(RUN_USER)
        cluster.ensure_database("valis_state", owner=RUN_USER)
        pg = PgCluster(cluster=cluster)
        with pg.connect() as conn:
            migrate(conn)
        yield DatabaseHost(ground, netns, pg, ca)
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def ground_with_database() -> Iterator[DatabaseHost]:
    """A fresh proving ground with a database host on it; both removed afterwards."""
    sweep_stale()
    ground = Ground().build()
    try:
        with database_host(ground) as host:
            yield host
    finally:
        ground.cleanup()

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

import attrs

from tests.scenario.pg import RUN_USER, PgCluster, ensure_system_user
from tests.scenario.proving_ground import Ground, sweep_stale
from valis_core.operator_state.dsn import CertificateFiles, render_certificate_dsn
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


def certificate_dsn(state_dir: Path, *, database: str = "valis_state") -> str:
    """The certificate DSN naming the client certificate under ``state_dir``, as
    ``valis provision --database-host`` writes it."""
    tls = operator_state_tls_dir(state_dir)
    files = CertificateFiles(*(str(tls / name) for name in (TLS_CA, TLS_CLIENT_CERT,
                                                            TLS_CLIENT_KEY)))
    return render_certificate_dsn(DATABASE_ADDRESS, DATABASE_PORT, files, role=RUN_USER,
                                  database=database)


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
    cluster (administered over the socket; its ``valis_state`` migrated, the one database
    nodes are admitted to), ``ca`` the CA of both its certificates."""

    ground: Ground
    netns: str
    pg: PgCluster
    ca: Issued

    def client_bundle(self, state_dir: Path, *, node: str = "node") -> str:
        """A client certificate of this host's CA placed in ``state_dir``; its DSN."""
        place_client_bundle(state_dir, self.ca.cert_pem,
                            issue_client(self.ca, RUN_USER, node, now()))
        return certificate_dsn(state_dir)


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


@attrs.frozen
class HostNode:
    """One location of a node on its own host: ``host`` (a netns on the ground's
    internet made by ``Ground.add_host``) holding the node's dedicated ``nic``, where the
    operator's ``valis condense`` runs and, under it, fulcrum; the unit's own netns is
    ``unit_netns`` at ``address``. ``label`` names the host (``a``, ``b``)."""

    ground: Ground
    label: str
    host: str
    nic: str
    address: str
    state_dir: Path
    workdir: Path

    @classmethod
    def on(cls, ground: Ground, label: str, host_address: str, address: str,
           workdir: Path) -> HostNode:
        """A host ``label`` on ``ground`` with its NIC and a fresh state directory."""
        from tests.scenario.resident_harness import make_state_dir

        host = ground.add_host(label, host_address)
        return cls(ground, label, host, ground.add_nic(label, host), address,
                   make_state_dir(workdir), workdir)

    @property
    def location(self) -> str:
        return f"host-{self.label}"

    @property
    def unit_netns(self) -> str:
        return f"vlu{self.label}-{self.ground.tag}"

    @property
    def config(self) -> Path:
        return self.workdir / f"launcher-{self.location}.toml"

    @property
    def facts_file(self) -> Path:
        return self.workdir / f"site-facts-{self.location}.env"

    @property
    def log(self) -> Path:
        return self.workdir / f"unit-{self.location}.log"

    def write_files(self, dsn: str, zones: str) -> None:
        """The host's launcher config and the site facts naming ``dsn``."""
        from tests.scenario.proving_ground import unit_config_text
        from tests.scenario.resident_harness import resident_runtime, site_facts
        from valis_core.operator_state.site_facts_file import write_site_facts

        self.config.write_text(unit_config_text(
            self.ground, [resident_runtime()], unit_ip=self.address,
            netns_name=self.unit_netns, public_interface=self.nic))
        self.config.chmod(0o644)
        write_site_facts(self.facts_file, site_facts(dsn, zones, VALIS_LOCATION=self.location))

    def condense_argv(self, *how: str) -> list[str]:
        """``valis condense HOW...`` as the operator runs it on this host, supervising
        the unit (fulcrum, its output appended to ``log``)."""
        import shlex
        import sys

        from tests.scenario.proving_ground import FULCRUM
        from tests.scenario.resident_harness import resident_runtime

        unit = ["/bin/sh", "-c", f'exec "$@" >>{shlex.quote(str(self.log))} 2>&1', "sh",
                FULCRUM, "launch", "--config", str(self.config)]
        return [
            "ip", "netns", "exec", self.host,
            str(Path(sys.executable).parent / "valis"), "condense", *how,
            "--site-facts", str(self.facts_file), "--state-dir", str(self.state_dir),
            "--unit-command", shlex.join(unit), "--dns-address", f"{self.address}:53",
            "--ask-in-netns", self.ground.client, "--launcher-config", str(self.config),
            "--binary", resident_runtime(),
        ]  # fmt: skip

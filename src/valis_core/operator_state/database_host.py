"""The database host of the two-host topology, and the client bundles nodes carry.

``serve_database_host`` makes a PostgreSQL server (reached as its superuser over its own
socket, ``host_cluster.superuser``) admit nodes on other hosts: the role and database,
a private CA kept by root under ``ca_dir``, a server certificate for the names nodes
dial, the TLS settings (``ALTER SYSTEM``), and the ``hostssl ... cert`` line ahead of any
other TCP line for the database and role. It is idempotent: a second run changes
nothing and says so. A ``pg_hba.conf`` the server cannot load is never left behind (the
old text is put back and the server reloaded on it). ``listen_addresses`` takes a
restart, which the outcome reports rather than performs: the caller knows how its
server is started.

``client_bundle`` issues a node its client certificate (CN = the role) as one PEM file
(the certificate, its key, the CA certificate); ``read_client_bundle`` takes one apart
and checks it fits together, for ``valis provision --database-bundle``.
"""

from __future__ import annotations

import datetime
import os
import pwd
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import psycopg
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from valis_core.atomic import write_atomic
from valis_core.clock import Clock, monotonic
from valis_core.errors import ValisError
from valis_core.operator_state import host_cluster
from valis_core.operator_state.host_cluster import ServerAccess, superuser
from valis_core.operator_state.tls_access import TlsAccess, hba_admits, tls_settings, with_hba_line
from valis_core.operator_state.tls_material import (
    Issued,
    issue_client,
    issue_server,
    issued_by,
    make_ca,
)

DEFAULT_CA_DIR = Path("/etc/valis/operator-state-ca")
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
SERVER_CERT = "valis-server.crt"
SERVER_KEY = "valis-server.key"
SERVER_CA = "valis-ca.crt"
#: a server certificate this close to its end is issued again
RENEW_BEFORE = datetime.timedelta(days=30)


class DatabaseHostError(ValisError):
    """The database host could not be set up, or a client bundle is not one."""


@attrs.frozen
class HostRequest:
    """What the database host serves: the ``names`` nodes dial (the server certificate
    names each; ``verify-full`` checks it), the ``listen`` addresses, who is admitted."""

    names: tuple[str, ...]
    listen: str
    access: TlsAccess
    ca_dir: Path = DEFAULT_CA_DIR


@attrs.frozen
class HostOutcome:
    """What a run changed (empty: nothing to change) and whether the server must be
    restarted for it (a new ``listen_addresses``)."""

    changed: tuple[str, ...]
    restart_needed: bool


def _write(path: Path, data: bytes, mode: int, owner: tuple[int, int]) -> None:
    write_atomic(path, data, mode=mode, owner=owner)


def load_or_make_ca(ca_dir: Path, now: datetime.datetime) -> tuple[Issued, bool]:
    """The CA under ``ca_dir`` (root's: the key 0600), made when absent; (CA, made)."""
    cert, key = ca_dir / CA_CERT, ca_dir / CA_KEY
    if cert.exists() and key.exists():
        return Issued(cert.read_bytes(), key.read_bytes()), False
    if cert.exists() or key.exists():
        raise DatabaseHostError(
            f"database host: {ca_dir} holds only one of {CA_CERT} and {CA_KEY}; restore the "
            "other from a backup of this host, or move the directory aside to make a new CA "
            "(every node's client bundle must then be issued again)"
        )
    ca_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ca_dir, 0o700)
    ca = make_ca(os.uname().nodename, now)
    _write(key, ca.key_pem, 0o600, (0, 0))
    _write(cert, ca.cert_pem, 0o644, (0, 0))
    return ca, True


def _covers(cert_pem: bytes, names: Sequence[str], ca: Issued, now: datetime.datetime) -> bool:
    """Whether a server certificate is the CA's, names every one of ``names`` and stays
    valid past ``RENEW_BEFORE``."""
    if not issued_by(cert_pem, ca.cert_pem):
        return False
    cert = x509.load_pem_x509_certificate(cert_pem)
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return False
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    held = {str(value).lower() for value in alt.get_values_for_type(x509.DNSName)}
    held |= {str(value) for value in alt.get_values_for_type(x509.IPAddress)}
    return all(name.rstrip(".").lower() in held for name in names)


def _show(conn: psycopg.Connection[Any], setting: str) -> str:
    row = conn.execute("SELECT setting FROM pg_settings WHERE name = %s", (setting,)).fetchone()
    return "" if row is None else str(row[0])


def serve_database_host(server: ServerAccess, request: HostRequest,
                        now: datetime.datetime) -> HostOutcome:
    """Make the server at ``server`` the database host ``request`` describes."""
    changed: list[str] = []
    access = request.access
    try:
        owner = pwd.getpwnam(server.owner)
    except KeyError:
        raise DatabaseHostError(
            f"database host: the server's account {server.owner!r} does not exist"
        ) from None
    ca, made = load_or_make_ca(request.ca_dir, now)
    if made:
        changed.append(f"made the CA {request.ca_dir / CA_CERT}")
    with superuser(server) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                        (access.role,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {access.role} LOGIN")
            changed.append(f"created the role {access.role} (no password: certificates)")
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                        (access.database,)).fetchone() is None:
            conn.execute(f"CREATE DATABASE {access.database} OWNER {access.role}")
            changed.append(f"created the database {access.database}")
        config_dir = Path(_show(conn, "config_file")).parent
        files = {name: config_dir / name for name in (SERVER_CERT, SERVER_KEY, SERVER_CA)}
        ids = (owner.pw_uid, owner.pw_gid)
        held = files[SERVER_CERT].read_bytes() if files[SERVER_CERT].exists() else b""
        if not held or not files[SERVER_KEY].exists() or not _covers(held, request.names, ca,
                                                                      now):
            leaf = issue_server(ca, request.names, now)
            _write(files[SERVER_KEY], leaf.key_pem, 0o600, ids)
            _write(files[SERVER_CERT], leaf.cert_pem, 0o644, ids)
            changed.append(f"issued the server certificate {files[SERVER_CERT]} for "
                           f"{', '.join(request.names)}")
        if not files[SERVER_CA].exists() or files[SERVER_CA].read_bytes() != ca.cert_pem:
            _write(files[SERVER_CA], ca.cert_pem, 0o644, ids)
            changed.append(f"placed the CA certificate {files[SERVER_CA]}")
        wanted = tls_settings(listen=request.listen, cert_file=str(files[SERVER_CERT]),
                              key_file=str(files[SERVER_KEY]), ca_file=str(files[SERVER_CA]))
        for name, literal in wanted.items():
            if _show(conn, name) != literal.strip("'").replace("''", "'"):
                conn.execute(f"ALTER SYSTEM SET {name} = {literal}")
                changed.append(f"set {name} = {literal}")
        # A hostssl line is refused while TLS is off: TLS is on before the line goes in.
        host_cluster.reload(conn)
        _await_setting(conn, "ssl", "on")
        _admit(conn, access, changed)
        host_cluster.reload(conn)
        restart = conn.execute(
            "SELECT bool_or(pending_restart) FROM pg_settings").fetchone()
    return HostOutcome(tuple(changed), bool(restart and restart[0]))


_RELOAD_WAIT_S = 10.0


def _await_setting(
    conn: psycopg.Connection[Any], name: str, value: str, ticks: Clock = monotonic
) -> None:
    """Wait (bounded) until this session has taken a reloaded setting (a backend reads
    the configuration again between statements, after the postmaster's signal)."""
    deadline = ticks() + _RELOAD_WAIT_S
    while _show(conn, name) != value:
        if ticks() > deadline:
            raise DatabaseHostError(
                f"database host: the server did not take {name} = {value} on reload within "
                f"{_RELOAD_WAIT_S:g} s; see its log (a certificate or key it cannot read?)"
            )
        time.sleep(0.05)


def _admit(conn: psycopg.Connection[Any], access: TlsAccess, changed: list[str]) -> None:
    """The certificate line in the server's pg_hba.conf, ahead of other TCP lines; an
    edit the server cannot load is undone before the error is raised."""
    path = Path(_show(conn, "hba_file"))
    text = host_cluster.read_conf(path)
    if hba_admits(text, access):
        return
    host_cluster.install_hba(conn, path, with_hba_line(text, access))
    changed.append(f"added to {path}: {access.hba_line}")


# -- client bundles --------------------------------------------------------------------


@attrs.frozen
class ClientBundle:
    """A node's way in: the CA that proves the database host, the client certificate
    and its key (all PEM)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def client_bundle(ca_dir: Path, role: str, node: str, now: datetime.datetime) -> bytes:
    """A client certificate for ``node`` (CN ``role``) from the CA under ``ca_dir``, as
    one PEM file: the certificate, its key, the CA certificate."""
    cert, key = ca_dir / CA_CERT, ca_dir / CA_KEY
    try:
        ca = Issued(cert.read_bytes(), key.read_bytes())
    except OSError as exc:
        raise DatabaseHostError(
            f"database host: cannot read the CA under {ca_dir} ({exc.strerror or exc}); run "
            "valis db host on the database host first, as root"
        ) from None
    client = issue_client(ca, role, node, now)
    return client.cert_pem + client.key_pem + ca.cert_pem


def read_client_bundle(data: bytes, *, source: str) -> ClientBundle:
    """The three parts of a client bundle, checked: one key, the client certificate it
    belongs to, and the CA certificate that issued it."""
    def bad(why: str) -> DatabaseHostError:
        return DatabaseHostError(f"{source}: not a client bundle: {why}; issue one with "
                                 "valis db client-bundle on the database host")

    blocks = [(match.group(1), match.group(0)) for match in _PEM_BLOCK.finditer(data)]
    keys = [block for label, block in blocks if label.endswith(b"PRIVATE KEY")]
    if len(keys) != 1:
        raise bad(f"it holds {len(keys)} private keys, not one")
    key_pem = keys[0] + b"\n"
    try:
        certs = [x509.load_pem_x509_certificate(block) for label, block in blocks
                 if label == b"CERTIFICATE"]
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise bad("a certificate or its private key cannot be read (or is encrypted)") from None

    def is_ca(cert: x509.Certificate) -> bool:
        try:
            return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            return False

    leaves = [cert for cert in certs if not is_ca(cert)]
    cas = [cert for cert in certs if is_ca(cert)]
    if len(leaves) != 1 or len(cas) != 1:
        raise bad(f"it holds {len(leaves)} client and {len(cas)} CA certificates, not one each")
    leaf, ca = leaves[0], cas[0]
    if leaf.public_key().public_bytes(*_SPKI) != key.public_key().public_bytes(*_SPKI):
        raise bad("its key is not the client certificate's")
    pem = serialization.Encoding.PEM
    if not issued_by(leaf.public_bytes(pem), ca.public_bytes(pem)):
        raise bad("its CA did not issue its client certificate")
    return ClientBundle(ca.public_bytes(pem), leaf.public_bytes(pem), key_pem)


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----.+?-----END \1-----", re.DOTALL)
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

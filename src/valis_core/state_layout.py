"""Where everything lives under a node's state directory: names and paths, nothing else.

One module owns the layout so the readers and writers of each file (backup, the store
head, custody, the configuration store, condense, the resident) agree by construction,
and so a capability that adds durable state (the edge's ACME keys, zone-signing keys)
gets its place here first. Pure: it joins paths and never touches the disk.

The backup-critical set (``ops.backup``) is the owner seed, the store head, the
configuration store, the edge's keys, the zone-signing keys and the operator-state client
certificate; everything else here is made again by condense or by the resident.
"""

from __future__ import annotations

from pathlib import Path

KEYFILE = "owner.key"
"""The owner Ed25519 seed (32 raw bytes, 0600): the node's identity. Backed up."""

STORE_HEAD = "store/manifest.json"
"""The store head: the manifest saying which generation this store is. Backed up."""

CONFIG_STORE = "config"
"""The configuration store directory (the site facts, copied once at first boot). Backed
up."""

CONFIG_FILE = "site-facts.env"
"""The configuration store's one file, under ``CONFIG_STORE``."""

EDGE_KEYS: tuple[str, ...] = ("edge/acme-account.key", "edge/leaf.key")
"""The edge's ACME account key and TLS leaf key, when the node serves the edge. Backed up."""

EDGE_KEY = "edge/leaf.key"
"""The TLS leaf's private key (PEM), one of ``EDGE_KEYS``; the edge serves with it."""

EDGE_CERTIFICATE = "edge/leaf.crt"
"""The leaf certificate and its chain (PEM, leaf first), issued for ``EDGE_KEY``. Backed
up with the keys so a restored node serves the same certificate without asking the CA."""

ACME_ACCOUNT_KEY = "edge/acme-account.key"
"""The node's ACME account key (PEM), one of ``EDGE_KEYS``: the CA knows the node by it."""

EDGE_BACKED_UP: tuple[str, ...] = (*EDGE_KEYS, EDGE_CERTIFICATE)
"""The edge's files in the backup set: both keys and the chain issued for the leaf."""

SIGNING_KEYS = "dnssec"
"""The directory of the zone-signing keys, when the node signs its zones. Backed up."""

OPERATOR_STATE_TLS = "operator-state-tls"
"""The client certificate a node reaches a database host with (a certificate DSN names
these files: ``docs/operator-state.md``, "Two hosts"), when operator state is not on this
host's socket. Backed up: the successor of an evacuation reaches the database with it."""

TLS_CA = "ca.crt"
"""Under ``OPERATOR_STATE_TLS``: the CA that issued the database host's certificate."""

TLS_CLIENT_CERT = "client.crt"
"""Under ``OPERATOR_STATE_TLS``: the node's client certificate (its subject is the role)."""

TLS_CLIENT_KEY = "client.key"
"""Under ``OPERATOR_STATE_TLS``: the client certificate's private key (0600)."""

INSTANCE = "instance"
"""This condensed state directory's instance token (the fence holder's suffix). Never
backed up: a restore is a new instance."""

MODULES = "modules"
"""The installed modules the head pins. Made again from the private dist."""

MODULES_RECORD = "valis-modules.json"
"""Under ``MODULES``: which pins were installed there."""

FABRIC_TOKEN = "fabric.token"
"""The fabric's capability token, minted at every boot."""

FABRIC_INFO = "fabric.json"
"""Where the fabric listens (its address and port), written at every boot."""

FENCED_OUT = "fenced-out.json"
"""The verdict a resident left when it stopped fenced out: who holds the fence at which
generation, and the store generation it was refused at. Removed when an instance of this
directory next passes the fence; never backed up."""


def keyfile_path(state_dir: Path) -> Path:
    return state_dir / KEYFILE


def head_path(state_dir: Path) -> Path:
    return state_dir / STORE_HEAD


def config_store_path(state_dir: Path) -> Path:
    """The configuration store's file."""
    return state_dir / CONFIG_STORE / CONFIG_FILE


def edge_key_paths(state_dir: Path) -> tuple[Path, ...]:
    return tuple(state_dir / name for name in EDGE_KEYS)


def edge_key_path(state_dir: Path) -> Path:
    return state_dir / EDGE_KEY


def edge_certificate_path(state_dir: Path) -> Path:
    return state_dir / EDGE_CERTIFICATE


def acme_account_key_path(state_dir: Path) -> Path:
    return state_dir / ACME_ACCOUNT_KEY


def signing_keys_dir(state_dir: Path) -> Path:
    return state_dir / SIGNING_KEYS


def operator_state_tls_dir(state_dir: Path) -> Path:
    return state_dir / OPERATOR_STATE_TLS


def instance_path(state_dir: Path) -> Path:
    return state_dir / INSTANCE


def modules_dir(state_dir: Path) -> Path:
    return state_dir / MODULES


def fabric_token_path(state_dir: Path) -> Path:
    return state_dir / FABRIC_TOKEN


def fabric_info_path(state_dir: Path) -> Path:
    return state_dir / FABRIC_INFO


def fenced_out_path(state_dir: Path) -> Path:
    return state_dir / FENCED_OUT

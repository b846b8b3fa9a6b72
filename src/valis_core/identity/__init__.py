"""Custody of the node's owner Ed25519 identity."""

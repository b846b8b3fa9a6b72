"""The node's durable store: manifest and store head."""

from valis_core.store.head import read_store_head
from valis_core.store.manifest import (
    Manifest,
    ManifestError,
    ModulePin,
    make_default_manifest,
)

__all__ = ["Manifest", "ManifestError", "ModulePin", "make_default_manifest", "read_store_head"]

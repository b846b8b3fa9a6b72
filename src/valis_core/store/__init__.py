"""The node's durable store: manifest and store head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.store.head import read_store_head
    from valis_core.store.manifest import Manifest, ManifestError, ModulePin, make_default_manifest

__all__ = [
    "Manifest",
    "ManifestError",
    "ModulePin",
    "make_default_manifest",
    "read_store_head",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "Manifest": "valis_core.store.manifest",
        "ManifestError": "valis_core.store.manifest",
        "ModulePin": "valis_core.store.manifest",
        "make_default_manifest": "valis_core.store.manifest",
        "read_store_head": "valis_core.store.head",
    },
)

"""Where a state directory's modules are installed, and the record of which pins they are.

Shared by the installer, which writes them, and the resident, which only checks them at
boot: the resident has no business importing the installer (its index client, wheel
reader and HTTP fetcher) to do that.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from valis_core.state_layout import MODULES, MODULES_RECORD, modules_dir
from valis_core.store.manifest import ModulePin, normalize_name

MODULES_DIR = MODULES
INSTALLED_RECORD = MODULES_RECORD
"""In the modules directory: the pins installed there, as the resident checks them."""

__all__ = ["INSTALLED_RECORD", "MODULES_DIR", "installed_record", "modules_dir"]


def installed_record(pins: Iterable[ModulePin]) -> bytes:
    rows = [
        {"name": pin.name, "version": pin.version, "sha256": pin.sha256}
        for pin in sorted(pins, key=lambda pin: normalize_name(pin.name))
    ]
    return (json.dumps(rows, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")

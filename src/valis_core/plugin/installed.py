"""Where a state directory's modules are installed, and the record of which pins they are.

Shared by the installer, which writes them, and the resident, which only checks them at
boot: the resident has no business importing the installer (its index client, wheel
reader and HTTP fetcher) to do that.
"""

from __future__ import annotations

from collections.abc import Iterable

from valis_core.documents import Document
from valis_core.errors import ValisError
from valis_core.state_layout import MODULES, MODULES_RECORD, modules_dir
from valis_core.store.manifest import ModulePin, normalize_name

MODULES_DIR = MODULES
INSTALLED_RECORD = MODULES_RECORD
"""In the modules directory: the pins installed there, as the resident checks them."""

__all__ = ["INSTALLED_RECORD", "MODULES_DIR", "installed_record", "modules_dir"]


class InstalledRecordError(ValisError):
    """An installed-modules record that is not one."""


DOCUMENT: Document[tuple[ModulePin, ...]] = Document(
    kind=tuple[ModulePin, ...],
    name=INSTALLED_RECORD,
    error=InstalledRecordError,
    remedy="condense the node again to reinstall its modules",
    compact=True,
)
"""The installed-modules record as a JSON document (``valis_core.documents``): the pins
in name order, compact. The resident compares it byte for byte with the one its store
head's pins render to."""


def installed_record(pins: Iterable[ModulePin]) -> bytes:
    return DOCUMENT.render(tuple(sorted(pins, key=lambda pin: normalize_name(pin.name))))

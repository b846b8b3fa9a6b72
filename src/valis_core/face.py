"""A package's face, imported when first used.

Each package's ``__init__`` names its supported surface but must not import it eagerly:
a pure core imported through its package (``valis_core.operator_state.site_facts``,
``valis_core.dns.wire``) would otherwise pay for psycopg, dnspython's whole reader or
trio at every start-up, and the resident must not load the serving stack before its
codec stage checks it. ``lazy_attributes`` gives the package a PEP 562 ``__getattr__``
that imports a name's home module on first access.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``homes`` maps each exported name to the
    module that defines it."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        # Kept on the package, so later reads (``wire.from_text`` on a hot path) are a
        # plain attribute lookup rather than another call here.
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__

"""The compiled UDP fast path: whether this build has it, and the table it answers from.

A Python server pays a few microseconds of interpreter work per datagram before any
answering starts: a socket call in, a socket call out, the header checks. The C
extension ``valis_core.dns._fastpath`` (source ``_fastpath.c``, built by ``setup.py``
when ``make venv`` installs the package and by ``make build`` in the tree it freezes)
takes that work for the common case. Its ``Pump`` receives a batch with one
``recvmmsg``, answers in C every query whose question is in the ``Table`` and takes the
plain path (class IN, no EDNS options, no TSIG; ``answer``'s module docstring lists the
rest), hands the others back to ``answer``, and sends the whole batch with one
``sendmmsg``. The table holds the very entries ``answer`` keeps in the snapshot's
response cache, copied in after Python answered the question once, and belongs to one
snapshot: a new snapshot gets an empty table, so a reload never mixes versions.

``answer`` stays the reference: ``tests/property/test_fastpath.py`` checks that what C
answers is byte for byte what ``answer`` gives. Without the extension (the package
imported from a tree nobody built) the server serves on the pure-Python path, slower,
and says so once in its log.
"""

from __future__ import annotations

import functools
import logging

log = logging.getLogger(__name__)

try:
    import valis_core.dns._fastpath  # noqa: F401 - whether it loads is the question
except ImportError:  # not built: the pure-Python path serves
    COMPILED = False
else:
    COMPILED = True
"""Whether the compiled UDP fast path is in this build."""

def path_name() -> str:
    """Which path serves UDP in this build, as ``valis selftest`` reports it."""
    return "compiled" if COMPILED else "pure Python (the compiled helper is not built)"


@functools.cache
def tell_once() -> None:
    """Log, once per process, that UDP is served on the slower pure-Python path."""
    if COMPILED:
        return
    log.warning(
        "the compiled UDP fast path (valis_core.dns._fastpath) is not built: UDP is served "
        "on the pure-Python path, correct but at more CPU per query; `make venv` (or "
        "`pip install -e .`) builds it"
    )

"""The resident's heap and Python's cyclic garbage collector: kept off the path from a
commit to its answer.

The collector's oldest generation is walked whole when it runs, and it runs when a
quarter as many objects again have survived into it as it held. A node of 10^5 small
zones holds some 1.2 million tracked objects (each zone version's tables, its index,
its lineage), so such a collection took 0.5 s on two busy cores, and one landing
between a commit and its answer was the worst case of a change there
(``benchmarks/reload_latency.py``, 10^5 zones of 10; a zone of 10^6 records holds few:
its records are ``bytes``, which the collector does not track). A full load built
that heap while the collector walked it again and again as it grew: eleven full
collections, 1.8 to 2.9 s of a 15 to 27 s load.

``HeapPolicy`` is what a zone source does about it around a full load (the boot's, a
replacement source's, the re-read of every zone after a reconnect):

- ``bulk()`` pauses the collector while the load builds (nothing it makes is garbage
  until the load is over), and after it, when ``freeze`` is set, collects once and
  moves every object left into the permanent generation (``gc.freeze``), which later
  collections do not walk.
- Why only after full loads: frozen objects are still freed by their reference counts
  (a zone version replaced by a change is freed as before), but a frozen object that
  later becomes part of an unreachable cycle is never collected. Collecting first means
  nothing already garbage is frozen; freezing only what a full load made (the heap of
  a node at rest) bounds what can leak to cycles among those objects, each load's once,
  and a zone version holds none (attrs slots classes, tuples and dicts of bytes). A
  change's new objects are not frozen: they age through the generations as any other,
  so a node that has changed most of its zones since its last full load collects them
  as Python always does.
- Why not in every process: the resident's heap is the served zones; a test run or a
  one-shot verb (``condense``) has other long-lived objects, and freezing them there
  buys nothing. The resident and the benchmarks that measure it pass
  ``RESIDENT_HEAP``; the default (``PLAIN_HEAP``) pauses the collector for a load and
  freezes nothing.

Pausing nests (a count): the collector is enabled again when the outermost pause ends,
if it was enabled when the first began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

import attrs

_lock = threading.Lock()
_paused = 0
_was_enabled = True


@attrs.frozen
class HeapPolicy:
    """What a full load does with the collector (the module doc)."""

    freeze: bool = False
    """After the load: collect once and ``gc.freeze()`` what is left."""

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        """The collector paused for the ``with`` block; afterwards, with ``freeze``,
        one full collection and every surviving object frozen."""
        _pause()
        try:
            yield
        finally:
            _resume()
        if self.freeze:
            gc.collect()
            gc.freeze()


PLAIN_HEAP = HeapPolicy()
"""Every other process's: the collector paused for a load, nothing frozen."""
RESIDENT_HEAP = HeapPolicy(freeze=True)
"""The resident's policy (and its benchmarks'): freeze after every full load."""


def _pause() -> None:
    global _paused, _was_enabled  # noqa: PLW0603 - the collector itself is one per process
    with _lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1


def _resume() -> None:
    global _paused  # noqa: PLW0603
    with _lock:
        _paused -= 1
        if _paused == 0 and _was_enabled:
            gc.enable()

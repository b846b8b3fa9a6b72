"""``valis --resident ...``: the production entry the launcher execs.

Not a subcommand: the launcher's argv is flags only (``--resident``, ``--ports``, the
descriptor flags, and any flag a newer launcher adds), so ``valis`` hands the whole argv
here whenever ``--resident`` is in it, before its own parser could refuse a flag it does
not know.
"""

from __future__ import annotations

from valis_core.resident.run import run_resident as _bring_up_and_serve


def run_resident(argv: list[str]) -> int:
    """Run the resident on ``argv`` (without the program name); its exit status."""
    return _bring_up_and_serve(argv)

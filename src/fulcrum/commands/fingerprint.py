"""``fulcrum fingerprint``: print the digest of the code fulcrum runs.

``valis apply`` compares the staged version's with the serving version's: equal, the
delivery can be handed over to without restarting the unit (``fulcrum.fingerprint``).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fingerprint",
        help="print the digest of the code fulcrum runs (valis apply compares them)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=run)


def run(_args: argparse.Namespace) -> int:
    from fulcrum.fingerprint import fingerprint

    print(fingerprint())
    return 0

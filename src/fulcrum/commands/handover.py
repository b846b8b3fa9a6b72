"""``fulcrum handover --config PATH``: hand the running unit over to a new resident.

The unit's ``ExecReload=`` (``systemctl reload fulcrum-valis``). The running fulcrum of
the config's netns starts a new resident (the program ``valis-command`` names now: after
``valis apply`` switched ``current``, the new version's) beside the serving one, on the
same descriptors; once it says READY the old one stops reading, drains and exits, and
only then does the new one write. Prints what happened and exits 0; when the new
resident does not come up the old one goes on serving, and this says why and exits 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from valis_core.launcher_config import DEFAULT_PATH


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "handover",
        help="start a new resident beside the serving one and hand over to it (reload)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_PATH,
                        help=f"launcher config (default {DEFAULT_PATH})")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", default=None,
                        help="how long to wait for fulcrum's answer (default 115)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fulcrum.handover import REPLY_TIMEOUT, handover_path, request_handover
    from valis_core.launcher_config_file import load_launcher_config

    cfg = load_launcher_config(args.config)
    timeout = REPLY_TIMEOUT if args.timeout is None else args.timeout
    print(f"fulcrum: {request_handover(handover_path(cfg.netns_name), timeout)}")
    return 0

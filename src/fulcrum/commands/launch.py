"""``fulcrum launch --config PATH``: run the unit until it is stopped or its resident exits.

The exit status is 0 for a stop carried out (SIGTERM/SIGINT forwarded and obeyed),
otherwise the resident's own (``128 + n`` for a death by signal ``n``), and 1 when a
bring-up stage fails. ``VALIS_*`` variables, ``NOTIFY_SOCKET``, systemd's unit
directories and ``REQUESTS_CA_BUNDLE`` in fulcrum's environment are passed on to the
resident, with a fixed ``PATH``; nothing else is. An
operator-state DSN among them that names a TCP host or carries a password is refused
before anything is set up (``valis_core.operator_state.dsn``), as the resident would.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from valis_core.launcher_config import DEFAULT_PATH


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "launch",
        help="prepare the unit's netns, bind :53, run and supervise the resident",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_PATH,
        help=f"launcher config (default {DEFAULT_PATH})",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        metavar="SECONDS",
        help="how long the resident gets to stop before SIGKILL (default: fulcrum's stop "
        "timeout, 20 seconds)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fulcrum.launch import STOP_TIMEOUT, launch
    from valis_core.launcher_config_file import load_launcher_config
    from valis_core.operator_state.dsn import check_operator_dsn
    from valis_core.operator_state.site_facts import DSN_KEY

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fulcrum: %(message)s"))
    logger = logging.getLogger("fulcrum")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    if DSN_KEY in os.environ:
        check_operator_dsn(os.environ[DSN_KEY], source=f"${DSN_KEY} in fulcrum's environment")
    cfg = load_launcher_config(args.config)
    return launch(
        cfg,
        os.environ,
        stop_timeout=STOP_TIMEOUT if args.stop_timeout is None else args.stop_timeout,
    )

"""The resident process's own stages: its launch argv read (``launch argv``), root refused
(``privilege``) and the serving stack checked (``codec``); and ``log_as``, logging set
as the argv, the config store or a reload says.

Nothing of the serving stack is imported before the ``codec`` stage has checked it, so
a build without it fails closed with the codec's own message rather than a traceback.
"""

from __future__ import annotations

import os

import attrs

from valis_core.boot import Boot, BringUpError
from valis_core.boot import boot_log as log
from valis_core.launch import parse_launch_argv
from valis_core.resident.log_format import configure_logging, log_format_argument


def log_as(boot: Boot, level: str, fmt: str) -> None:
    """Log at ``level`` in ``fmt``, unless ``--log-format`` on the argv chose the format."""
    configure_logging(level, log_format_argument(boot.argv) or fmt, boot.environ)


async def launch_argv(boot: Boot) -> Boot:
    return attrs.evolve(boot, record=parse_launch_argv(boot.argv))


async def refuse_root(boot: Boot) -> Boot:
    if os.geteuid() == 0:
        raise BringUpError(
            "privilege",
            "the resident refuses to run as root (euid 0); the launcher drops to the run "
            "account (setpriv) before it execs valis",
        )
    # Until the store is read, the environment's format (the first-boot seed's) stands.
    log_as(boot, "info", boot.environ.get("VALIS_LOG_FORMAT", "text"))
    return boot


async def check_codec(boot: Boot) -> Boot:
    # Imported here, not at the top: this is the check that the stack exists.
    from valis_core.dns.serve.selftest import run_selftest

    log.info("codec: %s", run_selftest())
    return boot

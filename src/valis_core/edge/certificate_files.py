"""Following the certificate files: what the ACME side writes is what the edge serves.

The ACME side replaces ``edge/leaf.crt`` and ``edge/leaf.key`` atomically (each a new
inode) and may also hand the new certificate to the slot itself; this follower is the
path that needs no coupling: every ``POLL_INTERVAL`` seconds it compares the files'
identities with those it loaded last and, when they changed and load as a pair, swaps
them in. A half-replaced pair (the key written, the chain not yet) is tried again at the
next look, never served.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from valis_core.edge.certificate import (
    CertificateSlot,
    EdgeCertificateError,
    load_edge_certificate,
)
from valis_core.state_layout import edge_certificate_path, edge_key_path

log = logging.getLogger("valis.resident.edge")

POLL_INTERVAL = 5.0
"""Seconds between two looks at the certificate files."""

_Identity = tuple[tuple[int, int, int, int] | None, ...]


def files_identity(state_dir: Path) -> _Identity:
    """Inode, device, size and mtime of the chain and key files (``None`` if absent)."""
    found: list[tuple[int, int, int, int] | None] = []
    for path in (edge_certificate_path(state_dir), edge_key_path(state_dir)):
        try:
            st = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns))
    return tuple(found)


async def follow_certificate_files(
    state_dir: Path,
    slot: CertificateSlot,
    *,
    interval: float = POLL_INTERVAL,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Swap into ``slot`` each new pair the files hold, until cancelled."""
    loaded = files_identity(state_dir) if slot.current() is not None else None
    task_status.started()
    problem: str | None = None
    while True:
        seen = files_identity(state_dir)
        if seen != loaded and None not in seen:
            try:
                certificate = load_edge_certificate(state_dir)
            except EdgeCertificateError as exc:
                if str(exc) != problem:  # said once per distinct problem
                    log.warning("edge: %s", exc)
                problem = str(exc)
            else:
                if certificate is not None and certificate == slot.current():
                    loaded, problem = seen, None  # already served (swapped in by its writer)
                elif certificate is not None:
                    slot.swap(certificate)
                    loaded, problem = seen, None
                    log.info("edge: serving the certificate valid until %s",
                             certificate.not_after.isoformat())
        await trio.sleep(interval)

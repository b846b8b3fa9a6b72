"""Acting as the run account for a while, from a root process.

Root writing into a directory the run account owns would follow whatever that account
put there (a symlink in place of a directory just made, say). Taking the account's
effective ids for the act lets the kernel hold root to what the account may do, and
what is made is the account's without a chown. The saved ids stay root's, so the
process takes root back afterwards; from a process that is not root this does nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def acting_as(account: tuple[int, int] | None) -> Iterator[None]:
    """Run the block with ``account``'s (uid, gid) as the effective ids when root."""
    if account is None or os.geteuid() != 0:
        yield
        return
    uid, gid = account
    groups = os.getgroups()
    os.setgroups([])
    os.setegid(gid)
    try:
        os.seteuid(uid)
        try:
            yield
        finally:
            os.seteuid(0)
    finally:
        os.setegid(0)
        os.setgroups(groups)

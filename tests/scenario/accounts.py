"""The run account the scenario tests drop to: the real ``valis`` system user.

Creating it is idempotent and tolerant of a concurrent creator (another test process
racing to make the same account gets ``useradd`` exit status 9, "already in use").
"""

from __future__ import annotations

import grp
import pwd
import subprocess

RUN_ACCOUNT = "valis"
_USERADD_NAME_IN_USE = 9


def ensure_run_account(name: str = RUN_ACCOUNT) -> tuple[int, int]:
    """Make sure the system user and group ``name`` exist; return (uid, gid)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        result = subprocess.run(
            [
                "useradd", "--system", "--user-group", "--no-create-home",
                "--shell", "/usr/sbin/nologin", name,
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if result.returncode not in (0, _USERADD_NAME_IN_USE):
            raise RuntimeError(f"useradd {name} failed: {result.stderr.strip()}") from None
        entry = pwd.getpwnam(name)
    grp.getgrnam(name)  # --user-group made it; a missing group is a broken host
    return entry.pw_uid, entry.pw_gid

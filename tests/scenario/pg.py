"""Reaching the private PostgreSQL cluster as a given OS account.

Peer authentication asks the kernel which uid connected (``SO_PEERCRED``, which reports
the *effective* uid at ``connect()``), so a root test process reaches the ``valis`` role
by connecting while its effective uid is ``valis``'s, and restores root at once; the
established connection keeps the identity it was proven with. Subprocesses (the CLI)
are run under ``setpriv`` instead, as the real account.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import psycopg

from valis_core.operator_state.local_cluster import LocalCluster

RUN_USER = "valis"
ACCOUNTS_LOCK = "/tmp/valis-test-accounts.lock"
VENV_BIN = Path(sys.executable).parent
_EUID_LOCK = threading.Lock()
_DATABASE_NUMBERS = itertools.count(1)


def runtime_bin() -> Path:
    """The bin directory of a valis environment the run account can traverse.

    This checkout's own .venv may sit under a directory the run account cannot enter
    (a clone under a 0700 home), so commands run as another account come from there.
    """
    from tests.scenario.resident_harness import resident_runtime

    return Path(resident_runtime()).parent


def ensure_system_user(name: str = RUN_USER) -> pwd.struct_passwd:
    """Create the run account as a system user with its own group, if it is absent.
    Sessions run side by side take turns (``useradd`` refuses while another holds the
    account files' lock)."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    with open(ACCOUNTS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
        return _useradd(name)


def _useradd(name: str) -> pwd.struct_passwd:
    result = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # Exit status 9: someone else created it meanwhile, which is just as good.
    if result.returncode not in (0, 9):
        raise RuntimeError(f"useradd {name} failed: {result.stderr.strip()}")
    return pwd.getpwnam(name)


@contextlib.contextmanager
def effective_user(name: str) -> Iterator[None]:
    """Run the body with the effective uid/gid of ``name`` (root only), then restore."""
    account = pwd.getpwnam(name)
    with _EUID_LOCK:
        saved_uid, saved_gid = os.geteuid(), os.getegid()
        os.setegid(account.pw_gid)
        try:
            os.seteuid(account.pw_uid)
            try:
                yield
            finally:
                os.seteuid(saved_uid)
        finally:
            os.setegid(saved_gid)


def connect_as(user: str, dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection that PostgreSQL's peer check sees as coming from OS account ``user``."""
    with effective_user(user):
        return psycopg.connect(dsn, **kwargs)


def run_as(
    user: str, argv: Sequence[str], *, input_text: str | None = None, timeout: float = 120,
    netns: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the real OS account ``user`` (setpriv), capturing its output; in
    the network namespace ``netns`` when one is named."""
    account = pwd.getpwnam(user)
    env = {
        "PATH": f"{runtime_bin()}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/nonexistent",
        "LC_ALL": "C.UTF-8",
    }
    return subprocess.run(
        [
            *(["ip", "netns", "exec", netns] if netns else []),
            "setpriv",
            f"--reuid={account.pw_uid}",
            f"--regid={account.pw_gid}",
            "--init-groups",
            "--",
            *argv,
        ],
        input=input_text,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=timeout,
        check=False,
    )


def valis(*argv: str, input_text: str | None = None) -> tuple[int, str, str]:
    """The ``valis`` CLI run as the run account, as an operator would with ``sudo -u``:
    its exit status, stdout and stderr."""
    result = run_as(RUN_USER, [str(runtime_bin() / "valis"), *argv], input_text=input_text)
    return result.returncode, result.stdout, result.stderr


SENT = "valis_test_sent"


def notes_so_far(listening: psycopg.Connection[Any], writer: psycopg.Connection[Any],
                 bound: float = 10.0) -> list[psycopg.Notify]:
    """The notes ``listening`` (autocommit) has been sent since the last call, up to now:
    ``writer`` (autocommit, on the same database) sends a note on ``SENT``, which the
    listener hears after every note committed before it, so no wait is guessed.
    ``bound`` seconds without it is an error."""
    listening.execute(f"LISTEN {SENT}")  # at once (autocommit), before the note is sent
    writer.execute(f"NOTIFY {SENT}")
    heard: list[psycopg.Notify] = []
    for note in listening.notifies(timeout=bound):
        if note.channel == SENT:
            return heard
        heard.append(note)
    raise AssertionError(f"no note on {SENT} within {bound:g} s; heard before it: {heard}")


@attrs.frozen
class PgCluster:
    """The session's cluster: role ``valis`` owning database ``valis_state``."""

    cluster: LocalCluster
    run_user: str = RUN_USER
    database: str = "valis_state"

    @property
    def dsn(self) -> str:
        return self.cluster.dsn(self.run_user, self.database)

    def connect(self, dsn: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection as the run account (``valis``) to ``dsn`` (default: ``self.dsn``)."""
        return connect_as(self.run_user, dsn or self.dsn, **kwargs)

    def new_database(self, prefix: str = "t") -> str:
        """A fresh empty database owned by ``valis``; returns its DSN."""
        name = f"{prefix}_{os.getpid()}_{next(_DATABASE_NUMBERS)}"
        self.cluster.ensure_database(name, owner=self.run_user)
        return self.cluster.dsn(self.run_user, name)


@contextlib.contextmanager
def private_cluster(server_user: str = "postgres") -> Iterator[PgCluster]:
    """A private cluster (root only): initdb under /tmp as ``server_user``, socket only,
    peer auth where OS ``valis`` (a real system user, created if absent) is role
    ``valis``, owner of database ``valis_state``. Stopped and removed afterwards."""
    ensure_system_user(RUN_USER)
    root = Path(tempfile.mkdtemp(prefix="valis-pg-", dir="/tmp"))
    cluster = LocalCluster(root=root, server_user=server_user)
    try:
        cluster.initialize({RUN_USER: [RUN_USER]}, durable=False)
        cluster.start()
        cluster.ensure_role(RUN_USER)
        cluster.ensure_database("valis_state", owner=RUN_USER)
        yield PgCluster(cluster=cluster)
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)

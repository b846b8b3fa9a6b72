"""What a host probe reports: the read-only questions host assessment asks of one host
(``HostProbe``) and the plain values it answers with. ``ops.local_probe`` asks them of
this host; tests answer them from a table."""

from __future__ import annotations

import datetime
import stat
from collections.abc import Callable
from typing import Literal, Protocol

import attrs

PathKind = Literal["dir", "file", "socket", "symlink", "other"]


# -- what a probe reports --------------------------------------------------------------


@attrs.frozen
class Account:
    """A run account as the host's user database resolves it."""

    name: str
    uid: int
    gid: int
    groups: frozenset[int] = frozenset()
    """Every group id the account holds: primary and supplementary."""


@attrs.frozen
class PathStat:
    """What ``stat(2)`` says about a path (symlinks followed unless ``kind`` says so)."""

    kind: PathKind
    uid: int
    gid: int
    mode: int
    """Permission bits only (``S_IMODE``)."""


@attrs.frozen
class BpfOutcome:
    """What the kernel said when asked to load BPF: ``ok`` is None when it could not be
    asked (not privileged), and ``reason`` says what it said."""

    ok: bool | None
    reason: str = ""


@attrs.frozen
class SelfTestOutcome:
    """How the binary's serving self-test ended: its exit status (None if it never ran)."""

    exit_status: int | None
    output: str = ""


class HostProbe(Protocol):
    """The read-only questions assessment asks of one host; each answer is a plain value."""

    def network_namespaces_supported(self) -> bool:
        """The kernel gives processes network namespaces."""

    def sk_lookup_supported(self) -> BpfOutcome:
        """The kernel loads an eBPF sk_lookup program (libbpf's own probe; nothing stays)."""

    def bpf_object_loads(self, path: str) -> BpfOutcome:
        """The BPF object at ``path`` opens and loads into the kernel, released at once."""

    def find_program(self, name: str) -> str | None:
        """The absolute path of the program ``name`` in the system paths, or None."""

    def account(self, name: str) -> Account | None:
        """The account called ``name``, or None."""

    def group_id(self, name: str) -> int | None:
        """The id of the group called ``name``, or None."""

    def stat(self, path: str) -> PathStat | None:
        """``stat`` of ``path`` following symlinks, or None if it does not exist."""

    def resolve(self, path: str) -> str:
        """``path`` with every symlink resolved (as far as it exists)."""

    def read_text(self, path: str) -> str | None:
        """The text of the file at ``path``, or None when it is absent or unreadable."""

    def interpreter(self, path: str) -> str | None:
        """The program a ``#!`` line at the start of ``path`` names, or None if it has none."""

    def self_test(self, command: tuple[str, ...]) -> SelfTestOutcome:
        """Run ``command`` (the binary and its ``selftest`` argument) and report how it ended."""

    def unix_socket_accepts(self, path: str) -> bool:
        """A stream ``connect(2)`` to the UNIX socket at ``path`` succeeds (nothing sent)."""

    def tcp_accepts(self, host: str, port: int) -> bool:
        """A TCP connection to ``host`` (name or address) port ``port`` is accepted within a
        few seconds (nothing sent)."""

    def now(self) -> datetime.datetime:
        """The host's wall clock, in UTC (certificates are judged by it)."""


def path_kind(mode: int) -> PathKind:
    """The ``PathKind`` of a full ``st_mode``."""
    kinds: tuple[tuple[Callable[[int], bool], PathKind], ...] = (
        (stat.S_ISDIR, "dir"),
        (stat.S_ISREG, "file"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    return "other"

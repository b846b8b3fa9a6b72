"""The launch record: what the launcher tells the resident on its argv.

fulcrum execs valis with ``--resident``, ``--control-socket PATH``, ``--ports 53,443``
(the whole SET of served ports in one comma-joined token) and, only when it bound
something to hand down, ``--dns-udp-fd N`` (or, for N UDP sockets on the DNS address,
``--dns-udp-fds N,M,...``: the DNS workers, ``VALIS_DNS_WORKERS``), ``--dns-tcp-fd N``,
``--owner-fd N`` and ``--edge-tcp-fd N``. One UDP socket is always written
``--dns-udp-fd``, as before workers; several are written ``--dns-udp-fds`` only, so a
resident older than the workers finds no UDP descriptor and refuses to boot rather than
serving one socket of a group the kernel spreads queries across. The descriptor flags
say what was bound; ``--ports`` says what is served. The two are independent: a port may
appear in both, or in either alone, and the resident later asks each descriptor what it
is bound to rather than trusting the flag.
The resident's own flags, ``--state-dir PATH`` and ``--log-format FORMAT``, are in the
same table: no launcher emits them (a development launcher, a test or an operator adds
them), and an older resident passes them over like any flag it does not know.
``--successor`` (a switch, right behind ``--resident``) tells a resident fulcrum starts
beside the one serving (a handover) that it writes nothing until fulcrum grants it the
write turn (``valis_core.fence``, ``TURN_TRANSITIONS``).

Everything that reads or writes this argv lives in this module, and the flags are one
table (``_FLAGS``): parsing and rendering both walk it, and one token reader
(``_tokens``) splits an argv into flags and values for every reader of it
(``parse_launch_argv``; ``is_resident_launch``, which ``valis`` asks before its own
parser sees the argv), so a flag cannot be read one way here and another way there.

Parsing rules (argv here never includes the program name):

- ``--flag value`` and ``--flag=value`` mean the same thing.
- A flag this version does not read is passed over together with the value token
  behind it: ``--name=value`` is one token; ``--name value`` skips the next token too,
  unless that token itself starts with ``--`` (then ``--name`` was a bare switch). The
  launcher and the resident can therefore be deployed in either order: an argv naming
  a retired flag yields the same record as the argv without it.
- A known flag with a malformed value, a known flag given twice, a value flag with no
  value, and a stray positional token (one not standing behind an unknown flag) raise
  ``LaunchArgError`` naming the flag and the token. A stray token is refused rather
  than ignored because nothing this version or an older one emits puts it there.
- ``--ports`` absent gives the empty set; ``--ports`` present with an empty token is a
  malformed value. The record itself does not demand ``--ports``: whether a launch
  without it may serve is decided at bring-up, not here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from valis_core.errors import ValisError

#: Descriptor numbers are C ``int``s.
MAX_FD = 2**31 - 1
MAX_PORT = 65535

_DIGITS = re.compile(r"[0-9]{1,10}")


class LaunchArgError(ValisError):
    """The launch argv cannot be read into a launch record.

    ``flag`` is the flag at fault (``None`` for a stray positional token) and ``token``
    is the argv token that could not be read.
    """

    def __init__(self, flag: str | None, token: str, problem: str) -> None:
        self.flag = flag
        self.token = token
        self.problem = problem
        subject = f"{flag} got {token!r}" if flag is not None else f"stray token {token!r}"
        super().__init__(
            f"launch argv: {subject}: {problem}; the launcher built an argv this resident "
            f"cannot boot from — check the launcher config and the fulcrum/valis versions"
        )


def _check_fd(_: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is None:
        return
    if type(value) is not int or not 0 <= value <= MAX_FD:
        raise ValueError(f"{attribute.name} must be a descriptor number 0..{MAX_FD}")


def _check_fds(
    _: object, attribute: attrs.Attribute[tuple[int, ...]], value: tuple[int, ...]
) -> None:
    if type(value) is not tuple:
        raise TypeError(f"{attribute.name} must be a tuple of descriptor numbers")
    for fd in value:
        if type(fd) is not int or not 0 <= fd <= MAX_FD:
            raise ValueError(f"{attribute.name} must hold descriptor numbers 0..{MAX_FD}")
    if len(set(value)) != len(value):
        raise ValueError(f"{attribute.name} names a descriptor twice")


def _check_ports(
    _: object, attribute: attrs.Attribute[frozenset[int]], value: frozenset[int]
) -> None:
    if type(value) is not frozenset:
        raise TypeError(f"{attribute.name} must be a frozenset of ports")
    for port in value:
        if type(port) is not int or not 1 <= port <= MAX_PORT:
            raise ValueError(f"{attribute.name}: {port!r} is not a port 1..{MAX_PORT}")


def _check_path(
    _: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is None:
        return
    if type(value) is not str or not value.startswith("/") or "\0" in value:
        raise ValueError(f"{attribute.name} must be an absolute path without NUL")


@attrs.frozen
class LaunchRecord:
    """What one launch of the resident was told: a value, read once from argv."""

    resident: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    successor: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """``--successor``: started beside the resident it takes over from (a handover)."""
    control_socket: str | None = attrs.field(default=None, validator=_check_path)
    ports: frozenset[int] = attrs.field(default=frozenset(), validator=_check_ports)
    dns_udp_fds: tuple[int, ...] = attrs.field(default=(), validator=_check_fds)
    """The DNS UDP sockets, one per worker (``()``: none handed down)."""
    dns_tcp_fd: int | None = attrs.field(default=None, validator=_check_fd)
    owner_fd: int | None = attrs.field(default=None, validator=_check_fd)
    edge_tcp_fd: int | None = attrs.field(default=None, validator=_check_fd)
    state_dir: str | None = attrs.field(default=None, validator=_check_path)
    """``--state-dir``: the resident's state directory (else ``$STATE_DIRECTORY``)."""
    log_format: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    """``--log-format``: as written; the resident applies it when it is a format it knows."""

    @property
    def dns_udp_fd(self) -> int | None:
        """The first DNS UDP socket (``None``: none handed down)."""
        return self.dns_udp_fds[0] if self.dns_udp_fds else None


# --- value readers and writers: a reader returns the value or raises ValueError with
# --- the problem as its message; the caller names the flag and the token.


def _read_fd(token: str) -> int:
    if _DIGITS.fullmatch(token) is None or int(token) > MAX_FD:
        raise ValueError(f"expected a descriptor number 0..{MAX_FD}")
    return int(token)


def _read_one_fd(token: str) -> tuple[int, ...]:
    return (_read_fd(token),)


def _read_fds(token: str) -> tuple[int, ...]:
    items = token.split(",")
    if len(items) < 2:
        raise ValueError(
            "expected two or more descriptor numbers comma-joined (one is --dns-udp-fd)"
        )
    fds = tuple(_read_fd(item) for item in items)
    if len(set(fds)) != len(fds):
        raise ValueError("a descriptor is named twice")
    return fds


def _read_ports(token: str) -> frozenset[int]:
    if token == "":
        raise ValueError("the port set is empty; a resident serves at least one port")
    ports: set[int] = set()
    for item in token.split(","):
        if _DIGITS.fullmatch(item) is None or not 1 <= int(item) <= MAX_PORT:
            raise ValueError(
                f"{item!r} is not a port 1..{MAX_PORT} "
                f"(expected the whole set comma-joined, e.g. 53,443)"
            )
        ports.add(int(item))
    return frozenset(ports)


def _read_path(token: str) -> str:
    if not token.startswith("/") or "\0" in token:
        raise ValueError("expected an absolute path without NUL")
    return token


def _read_word(token: str) -> str:
    return token


def _show_int(value: Any) -> str:
    return str(value)


def _show_fds(value: Any) -> str:
    return ",".join(str(fd) for fd in value)


def _one(value: Any) -> bool:
    return len(value) == 1


def _several(value: Any) -> bool:
    return len(value) > 1


def _show_ports(value: Any) -> str:
    return ",".join(str(port) for port in sorted(value))


def _show_path(value: Any) -> str:
    return str(value)


class _Kind(enum.Enum):
    SWITCH = "switch"  # present or absent, takes no value
    VALUE = "value"  # takes exactly one value token


@attrs.frozen
class _Flag:
    field: str
    kind: _Kind
    read: Callable[[str], Any] | None = None
    show: Callable[[Any], str] | None = None
    #: the field's value when the flag is absent; render omits a flag holding it
    absent: Any = None
    #: for a field two flags write: whether this flag writes the value (else the other)
    writes: Callable[[Any], bool] | None = None


# The flag table, in the canonical order render_launch_argv writes them.
_FLAGS: dict[str, _Flag] = {
    "--resident": _Flag("resident", _Kind.SWITCH, absent=False),
    "--successor": _Flag("successor", _Kind.SWITCH, absent=False),
    "--control-socket": _Flag("control_socket", _Kind.VALUE, _read_path, _show_path),
    "--ports": _Flag("ports", _Kind.VALUE, _read_ports, _show_ports, absent=frozenset()),
    "--dns-udp-fd": _Flag(
        "dns_udp_fds", _Kind.VALUE, _read_one_fd, _show_fds, absent=(), writes=_one
    ),
    "--dns-udp-fds": _Flag(
        "dns_udp_fds", _Kind.VALUE, _read_fds, _show_fds, absent=(), writes=_several
    ),
    "--dns-tcp-fd": _Flag("dns_tcp_fd", _Kind.VALUE, _read_fd, _show_int),
    "--owner-fd": _Flag("owner_fd", _Kind.VALUE, _read_fd, _show_int),
    "--edge-tcp-fd": _Flag("edge_tcp_fd", _Kind.VALUE, _read_fd, _show_int),
    "--state-dir": _Flag("state_dir", _Kind.VALUE, _read_path, _show_path),
    "--log-format": _Flag("log_format", _Kind.VALUE, _read_word, str),
}


def _is_flag(token: str) -> bool:
    return token.startswith("--")


@attrs.frozen
class _Token:
    """One flag as written (``token``), its name, and its value token when it has one
    (inline after ``=``, or the next token); ``name`` is ``None`` for a stray token."""

    token: str
    name: str | None
    value: str | None = None
    inline: bool = False


def _tokens(argv: Sequence[str]) -> Iterator[_Token]:
    """Split ``argv`` by the table's rules: a value flag (and an unknown flag) takes the
    next token as its value unless it is written ``--name=value`` or the next token is
    itself a ``--flag``; a switch takes none."""
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not _is_flag(token):
            yield _Token(token, None)
            continue
        name, eq, inline = token.partition("=")
        spec = _FLAGS.get(name)
        if eq:
            yield _Token(token, name, inline, inline=True)
        elif (spec is None or spec.kind is _Kind.VALUE) and i < len(argv) and not _is_flag(
            argv[i]
        ):
            yield _Token(token, name, argv[i])
            i += 1
        else:
            yield _Token(token, name)


def is_resident_launch(argv: Sequence[str]) -> bool:
    """Whether ``argv`` launches the resident: the ``--resident`` switch is on it.

    Asked before anything else reads the argv, and judging nothing else in it: a launch
    argv the resident cannot read is refused by the resident's first stage, naming the
    flag, not by a command-line parser that knows no launch flags."""
    return any(token.name == "--resident" for token in _tokens(argv))


def parse_launch_argv(argv: Sequence[str]) -> LaunchRecord:
    """Read the launcher's argv (without the program name) into a launch record."""
    values: dict[str, Any] = {}
    for token in _tokens(argv):
        if token.name is None:
            raise LaunchArgError(None, token.token, "expected a --flag here")
        spec = _FLAGS.get(token.name)
        if spec is None:
            continue  # not ours: passed over with the value token behind it
        if spec.field in values:
            raise LaunchArgError(
                token.name, token.token,
                "given twice (or beside its other spelling, as --dns-udp-fd and "
                "--dns-udp-fds); the launcher passes each flag once",
            )
        if spec.kind is _Kind.SWITCH:
            if token.inline:
                raise LaunchArgError(token.name, token.token, "takes no value")
            values[spec.field] = True
            continue
        if token.value is None:
            raise LaunchArgError(token.name, token.token, "needs a value")
        assert spec.read is not None
        try:
            values[spec.field] = spec.read(token.value)
        except ValueError as exc:
            raise LaunchArgError(token.name, token.value, str(exc)) from None
    return LaunchRecord(**values)


def render_launch_argv(record: LaunchRecord) -> list[str]:
    """The canonical argv for a record: table order, ports sorted, absent flags omitted,
    the UDP descriptors in their order (the first is worker 0).

    ``parse_launch_argv(render_launch_argv(r)) == r`` for every record.
    """
    argv: list[str] = []
    for name, spec in _FLAGS.items():
        value = getattr(record, spec.field)
        if value == spec.absent or (spec.writes is not None and not spec.writes(value)):
            continue
        argv.append(name)
        if spec.kind is _Kind.VALUE:
            assert spec.show is not None
            argv.append(spec.show(value))
    return argv

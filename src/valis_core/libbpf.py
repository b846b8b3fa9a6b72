"""Debian's libbpf (``libbpf1``) through ctypes: the few calls the sk_lookup steer needs.

fulcrum's steer (``fulcrum.steer``) opens, loads and attaches the steer object with
these; ``valis assess`` asks the same library whether the kernel has the sk_lookup
program type and whether the object loads, so both programs judge the object by one
loader. Every failure is a ``BpfError`` naming the call and the errno's text.

libbpf prints its own diagnostics (the verifier's log among them) through a global
print callback. While a call runs, the callback installed here keeps the last lines it
printed so that an error can carry libbpf's own explanation: a verifier refusal is
otherwise only "Permission denied". libbpf's globals are not thread-safe; the callers
use it from one thread.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from valis_core.errors import ValisError

log = logging.getLogger(__name__)

LIBRARY = "libbpf.so.1"
#: ``enum bpf_prog_type``'s ``BPF_PROG_TYPE_SK_LOOKUP`` (Linux >= 5.9).
PROG_TYPE_SK_LOOKUP = 30
#: ``bpf_map_update_elem`` flags.
BPF_ANY = 0
_LEVEL_WARN = 0
_LIBBPF_ERRNO_BASE = 4000
_LOG_END = "-- END PROG LOAD LOG --"
_VERIFIER_STATISTICS = ("processed ", "verification time", "stack depth", "mark_precise")
#: libbpf's lines that only repeat that something failed, or are beside the point.
_UNEXPLAINING = ("failed to load object", "Failed to bump RLIMIT_MEMLOCK")
_KEPT_LINES = 40
_LINE_LIMIT = 300

_PrintFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class BpfError(ValisError):
    """A libbpf call failed; the message names the call, the errno and libbpf's reason."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno


class LibbpfMissing(BpfError):
    """libbpf itself cannot be loaded on this host."""


class _Diagnostics:
    """The lines libbpf printed during the current call, the last ``_KEPT_LINES`` kept."""

    def __init__(self) -> None:
        self.lines: deque[tuple[int, str]] = deque(maxlen=_KEPT_LINES)

    def explanation(self) -> str | None:
        """What libbpf said that explains a failure: the verifier's verdict when a program
        was refused, else its first warning beyond "failed to load"."""
        warnings = [line for level, line in self.lines if level == _LEVEL_WARN]
        if _LOG_END in warnings:
            end = len(warnings) - 1 - warnings[::-1].index(_LOG_END)
            for line in reversed(warnings[:end]):
                if "PROG LOAD LOG" in line:
                    break
                if not line.startswith(_VERIFIER_STATISTICS):
                    return f"the verifier: {line}"
        for line in warnings:
            said = line.removeprefix("libbpf: ")
            if not said.startswith(_UNEXPLAINING) and said != line:
                return said
        return None


_current = _Diagnostics()


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _print(level: int, fmt: bytes | None, args: int | None) -> int:
    buf = ctypes.create_string_buffer(_LINE_LIMIT * 4)
    if fmt is not None:
        _libc().vsnprintf(buf, ctypes.c_size_t(len(buf)), ctypes.c_char_p(fmt),
                          ctypes.c_void_p(args))
    for raw in buf.value.decode("utf-8", "replace").splitlines():
        line = raw.strip()[:_LINE_LIMIT]
        if line:
            _current.lines.append((level, line))
            log.debug("%s", line)
    return 0


_printer = _PrintFn(_print)  # kept alive for as long as libbpf may call it


@functools.cache
def library() -> ctypes.CDLL:
    """libbpf, with its prototypes declared and its printing routed here."""
    try:
        lib = ctypes.CDLL(LIBRARY, use_errno=True)
    except OSError:
        raise LibbpfMissing(
            f"{LIBRARY} cannot be loaded; install Debian's libbpf1 (apt-get install libbpf1)"
        ) from None
    ptr, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for name, restype, argtypes in (
        ("bpf_object__open_file", ptr, [cp, ptr]),
        ("bpf_object__load", i, [ptr]),
        ("bpf_object__close", None, [ptr]),
        ("bpf_object__find_program_by_name", ptr, [ptr, cp]),
        ("bpf_object__find_map_by_name", ptr, [ptr, cp]),
        ("bpf_map__fd", i, [ptr]),
        ("bpf_program__attach_netns", ptr, [ptr, i]),
        ("bpf_link__fd", i, [ptr]),
        ("bpf_link__disconnect", None, [ptr]),
        ("bpf_link__destroy", i, [ptr]),
        ("bpf_link_detach", i, [i]),
        ("bpf_map_update_elem", i, [i, ptr, ptr, ctypes.c_uint64]),
        ("libbpf_probe_bpf_prog_type", i, [i, ptr]),
        ("libbpf_set_print", ptr, [_PrintFn]),
        ("libbpf_strerror", i, [i, cp, ctypes.c_size_t]),
    ):
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    lib.libbpf_set_print(_printer)
    return lib


@contextmanager
def _call() -> Iterator[_Diagnostics]:
    """Collect libbpf's lines for one call (or a few made as one step)."""
    _current.lines.clear()
    yield _current


def _failure(what: str, errno: int, diagnostics: _Diagnostics) -> BpfError:
    reason = _strerror(errno) if errno else "failed"
    said = diagnostics.explanation()
    tail = f" ({said})" if said else ""
    return BpfError(f"{what}: {reason}{tail}", errno)


def _strerror(errno: int) -> str:
    """The errno's text; libbpf's own codes (4000 and up) by libbpf's table."""
    if errno < _LIBBPF_ERRNO_BASE:
        return os.strerror(errno)
    buf = ctypes.create_string_buffer(_LINE_LIMIT)
    library().libbpf_strerror(errno, buf, len(buf))
    return buf.value.decode("utf-8", "replace") or f"libbpf error {errno}"


def _errno_of(result: int) -> int:
    """libbpf 1.x returns ``-errno``; a plain -1 means it is in ``errno``."""
    if result < -1:
        return -result
    return ctypes.get_errno() or -result


def open_object(path: str) -> int:
    """``bpf_object__open_file``: the object's handle, not yet in the kernel."""
    lib = library()
    with _call() as diagnostics:
        ctypes.set_errno(0)
        handle = lib.bpf_object__open_file(os.fsencode(path), None)
        if not handle:
            raise _failure(f"opening {path}", ctypes.get_errno(), diagnostics)
    return int(handle)


def load_object(handle: int, path: str) -> None:
    """``bpf_object__load``: create the maps and load every program into the kernel."""
    with _call() as diagnostics:
        ctypes.set_errno(0)
        result = library().bpf_object__load(ctypes.c_void_p(handle))
        if result != 0:
            raise _failure(f"loading {path} into the kernel", _errno_of(result), diagnostics)


def close_object(handle: int) -> None:
    """``bpf_object__close``: release the programs and maps (an attached link stays)."""
    library().bpf_object__close(ctypes.c_void_p(handle))


def find_program(handle: int, name: str) -> int | None:
    found = library().bpf_object__find_program_by_name(ctypes.c_void_p(handle), name.encode())
    return int(found) if found else None


def map_fd(handle: int, name: str) -> int | None:
    """The descriptor of the loaded map ``name``, or None when the object has none."""
    lib = library()
    found = lib.bpf_object__find_map_by_name(ctypes.c_void_p(handle), name.encode())
    if not found:
        return None
    fd = int(lib.bpf_map__fd(ctypes.c_void_p(found)))
    return fd if fd >= 0 else None


def attach_netns(program: int, netns_fd: int, what: str) -> int:
    """``bpf_program__attach_netns``: the link's handle."""
    with _call() as diagnostics:
        ctypes.set_errno(0)
        link = library().bpf_program__attach_netns(ctypes.c_void_p(program), netns_fd)
        if not link:
            raise _failure(what, ctypes.get_errno(), diagnostics)
    return int(link)


def destroy_link(link: int) -> None:
    """Detach the link and free it, closing its descriptor exactly once.

    ``bpf_link_detach`` detaches the program even if another descriptor of the link
    exists somewhere. The link is then disconnected (libbpf will not touch the fd) and
    destroyed, and its descriptor closed here: with libbpf 1.1, ``bpf_link__destroy``
    after ``bpf_link__disconnect`` leaves the fd open, and an open link fd keeps the
    program attached.
    """
    lib = library()
    handle = ctypes.c_void_p(link)
    fd = int(lib.bpf_link__fd(handle))
    if fd >= 0:
        lib.bpf_link_detach(fd)
    lib.bpf_link__disconnect(handle)
    lib.bpf_link__destroy(handle)
    if fd >= 0:
        os.close(fd)


def update_element(fd: int, key: bytes, value: bytes, what: str) -> None:
    """``bpf_map_update_elem(fd, &key, &value, BPF_ANY)``: insert or replace in place.

    ``key`` and ``value`` are the map's C layout, packed by the caller.
    """
    key_buffer = ctypes.create_string_buffer(key, len(key))
    value_buffer = ctypes.create_string_buffer(value, len(value))
    with _call() as diagnostics:
        ctypes.set_errno(0)
        result = library().bpf_map_update_elem(
            fd, ctypes.addressof(key_buffer), ctypes.addressof(value_buffer), BPF_ANY
        )
        if result != 0:
            raise _failure(what, _errno_of(result), diagnostics)


def sk_lookup_supported() -> bool:
    """Whether the running kernel loads an sk_lookup program (libbpf's own probe)."""
    with _call() as diagnostics:
        ctypes.set_errno(0)
        result = int(library().libbpf_probe_bpf_prog_type(PROG_TYPE_SK_LOOKUP, None))
        if result < 0:
            raise _failure(
                "probing the kernel for the sk_lookup program type", _errno_of(result),
                diagnostics,
            )
    return result == 1

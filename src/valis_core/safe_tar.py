"""Reading and writing the tar archives valis exchanges (deliveries, backup sets) safely.

Reading: every member must be a regular file or a directory at a plain relative path;
an absolute path, a ``..`` component, a path too long or too deep to unpack, a link, a
device, a fifo, a sparse file or a name seen twice is a ``TarDefect`` naming the member.
``members`` also refuses an archive cut short: the end-of-archive blocks must be
present, and a compressed stream is read to its end so its own trailer (and checksum)
is checked. Nothing here writes a file; callers
turn a ``TarDefect`` into their own refusal.

Writing: ``file_info`` gives a member header with no trace of the machine or the moment
it was made (zero mtime, root ownership), so equal contents give equal archives.
"""

from __future__ import annotations

import lzma
import tarfile
import zlib
from collections.abc import Iterable, Iterator

READ_ERRORS = (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)
"""What reading a damaged or truncated archive (of any compression) can raise; tarfile
lets a ValueError out of some malformed PAX records (GNU sparse maps, record lengths)."""

MAX_NAME_BYTES = 255
"""The longest path component a Linux filesystem takes (NAME_MAX)."""
MAX_DEPTH = 64
MAX_PATH_BYTES = 1024

_CHUNK = 1 << 20


class TarDefect(Exception):
    """One thing wrong with an archive; ``member`` names where it was found, if anywhere."""

    def __init__(self, member: str | None, problem: str) -> None:
        self.member = member
        self.problem = problem
        where = f"member {member!r} " if member is not None else "the archive "
        super().__init__(where + problem)


def member_path(name: str) -> str:
    """``name`` as a plain relative path (``./`` and empty components dropped), or a
    ``TarDefect`` if it is absolute, climbs with ``..`` or is unusable."""
    if name.startswith("/"):
        raise TarDefect(name, "is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise TarDefect(name, "has a '..' component")
    if not parts or "\0" in name or "\\" in name:
        raise TarDefect(name, "is not a usable path")
    path = "/".join(parts)
    encoded = path.encode("utf-8", "surrogatepass")
    if (
        len(parts) > MAX_DEPTH
        or len(encoded) > MAX_PATH_BYTES
        or any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in parts)
    ):
        raise TarDefect(
            name,
            f"is too long or too deep to unpack (at most {MAX_DEPTH} components of "
            f"{MAX_NAME_BYTES} bytes, {MAX_PATH_BYTES} bytes in all)",
        )
    return path


def file_beneath_file(paths: Iterable[str]) -> tuple[str, str] | None:
    """A file and another path beneath it, if plain relative ``paths`` hold such a pair:
    one name cannot be both a file and a directory when unpacked."""
    listed = set(paths)
    for path in sorted(listed):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in listed:
                return parent, path
    return None


def is_plain_relative(path: str) -> bool:
    """Whether ``path`` is already a plain relative path (what ``member_path`` returns)."""
    try:
        return member_path(path) == path
    except TarDefect:
        return False


def members(archive: tarfile.TarFile, *, limit: int) -> Iterator[tuple[str, tarfile.TarInfo]]:
    """Every member with its plain relative path, in archive order; at most ``limit``."""
    seen: set[str] = set()
    last: str | None = None
    while True:
        try:
            member = archive.next()
        except READ_ERRORS as exc:
            raise TarDefect(None, f"is damaged or truncated {_after(last)} ({exc})") from None
        if member is None:
            _check_complete(archive, last)
            return
        if len(seen) >= limit:
            raise TarDefect(None, f"has more than {limit} members")
        path = member_path(member.name)
        if member.issym() or member.islnk():
            raise TarDefect(member.name, f"is a link (to {member.linkname!r})")
        if not (member.isreg() or member.isdir()) or member.issparse():
            raise TarDefect(member.name, "is a device, fifo or other special file")
        if path in seen:
            raise TarDefect(member.name, "appears twice")
        seen.add(path)
        last = member.name
        yield path, member


def read_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A regular member's whole content, or a ``TarDefect`` if it is cut short."""
    handle = archive.extractfile(member)
    if handle is None:
        raise TarDefect(member.name, "is not a regular file")
    try:
        data = handle.read()
    except READ_ERRORS as exc:
        raise TarDefect(member.name, f"is truncated or damaged ({exc})") from None
    if len(data) != member.size:
        raise TarDefect(member.name, f"is truncated ({len(data)} of {member.size} bytes)")
    return data


def chunks(archive: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    """A regular member's content in bounded chunks; a ``TarDefect`` if it is cut short."""
    handle = archive.extractfile(member)
    if handle is None:
        raise TarDefect(member.name, "is not a regular file")
    got = 0
    try:
        while chunk := handle.read(_CHUNK):
            got += len(chunk)
            yield chunk
    except READ_ERRORS as exc:
        raise TarDefect(member.name, f"is truncated or damaged ({exc})") from None
    if got != member.size:
        raise TarDefect(member.name, f"is truncated ({got} of {member.size} bytes)")


def _after(last: str | None) -> str:
    return f"after member {last!r}" if last is not None else "at its first member"


def _check_complete(archive: tarfile.TarFile, last: str | None) -> None:
    stream = archive.fileobj
    if stream is None:
        raise TarDefect(None, "is not open for reading")
    try:
        stream.seek(archive.offset)
        marker = stream.read(2 * tarfile.BLOCKSIZE)
        while stream.read(_CHUNK):
            pass
    except READ_ERRORS as exc:
        raise TarDefect(None, f"is truncated or damaged {_after(last)} ({exc})") from None
    if marker != bytes(2 * tarfile.BLOCKSIZE):
        raise TarDefect(None, f"ends without its end-of-archive blocks {_after(last)}: truncated")


def file_info(path: str, size: int, mode: int) -> tarfile.TarInfo:
    """A regular-file member header that depends only on ``path``, ``size`` and ``mode``."""
    info = tarfile.TarInfo(path)
    info.size = size
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.type = tarfile.REGTYPE
    return info

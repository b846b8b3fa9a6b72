"""A module wheel, checked whole before a byte of it is installed.

Pure: the wheel's bytes and its pin in, the files to install out. A wheel is accepted
only when its sha256 is the pin's, its one ``.dist-info`` names the pinned project and
version, every member is a regular file at a plain relative path (no absolute path, no
``..``, no link), no name appears twice, and its ``RECORD`` lists every member with a
matching hash and size and nothing else. A module is importable code: ``.data``
members are accepted for ``purelib`` and ``platlib`` (installed at the root like the
rest) and refused for scripts, headers and data, which would land outside the node's
module directory.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import stat
import zipfile
from collections.abc import Iterable
from email.parser import HeaderParser

import attrs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_version

from valis_core.errors import ValisError
from valis_core.safe_tar import TarDefect, member_path
from valis_core.store.manifest import ModulePin, normalize_name

MAX_MEMBERS = 20_000
MAX_UNPACKED = 256 << 20
"""Bounds on what one module wheel may unpack to (a zip bomb is refused, not expanded)."""

_SIGNATURES = ("RECORD.jws", "RECORD.p7s")


class WheelError(ValisError):
    """A module wheel that must not be installed."""


@attrs.frozen
class WheelContents:
    """What installing a wheel writes: ``files`` as (relative path, bytes), in wheel order,
    and the requirements its metadata declares."""

    name: str
    version: str
    files: tuple[tuple[str, bytes], ...]
    requires: tuple[Requirement, ...]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _fail(pin: ModulePin, problem: str) -> WheelError:
    return WheelError(
        f"module wheel {pin.name}=={pin.version}: {problem}; the wheel is refused and "
        "nothing of it installed"
    )


def _members(archive: zipfile.ZipFile, pin: ModulePin) -> dict[str, bytes]:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _fail(pin, f"has more than {MAX_MEMBERS} members")
    if sum(info.file_size for info in infos) > MAX_UNPACKED:
        raise _fail(pin, f"unpacks to more than {MAX_UNPACKED >> 20} MiB")
    members: dict[str, bytes] = {}
    for info in infos:
        try:
            path = member_path(info.filename)
        except TarDefect as exc:
            raise _fail(pin, f"member {info.filename!r} {exc.problem}") from None
        kind = stat.S_IFMT(info.external_attr >> 16)
        if info.is_dir():
            continue
        if kind not in (0, stat.S_IFREG):
            raise _fail(pin, f"member {path!r} is not a regular file (a link or device)")
        if path in members:
            raise _fail(pin, f"member {path!r} appears twice")
        try:
            members[path] = archive.read(info)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise _fail(pin, f"member {path!r} cannot be read ({exc})") from None
    return members


def _dist_info(members: dict[str, bytes], pin: ModulePin) -> str:
    tops = {path.split("/", 1)[0] for path in members if path.split("/", 1)[0].endswith(
        ".dist-info"
    )}
    if len(tops) != 1:
        raise _fail(pin, f"has {len(tops)} .dist-info directories, not exactly one")
    top = tops.pop()
    name, _, version = top[: -len(".dist-info")].partition("-")
    if normalize_name(name) != normalize_name(pin.name) or canonicalize_version(
        version
    ) != canonicalize_version(pin.version):
        raise _fail(pin, f"its metadata directory {top} names another project or version")
    return top


def _check_record(members: dict[str, bytes], dist_info: str, pin: ModulePin) -> None:
    record_path = f"{dist_info}/RECORD"
    try:
        text = members[record_path].decode("utf-8")
        rows = list(csv.reader(io.StringIO(text)))
    except KeyError:
        raise _fail(pin, "has no RECORD") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _fail(pin, f"its RECORD is unreadable ({exc})") from None
    listed: set[str] = set()
    exempt = {record_path} | {f"{dist_info}/{name}" for name in _SIGNATURES}
    for row in rows:
        if not row:
            continue
        if len(row) != 3:
            raise _fail(pin, f"its RECORD has a malformed row {row!r}")
        path, digest, size = row
        if path in exempt:
            continue
        if path not in members:
            raise _fail(pin, f"its RECORD lists {path!r}, which the wheel does not hold")
        if path in listed:
            raise _fail(pin, f"its RECORD lists {path!r} twice")
        data = members[path]
        if digest != _record_hash(data) or size != str(len(data)):
            raise _fail(pin, f"member {path!r} does not match its RECORD hash and size")
        listed.add(path)
    unlisted = sorted(set(members) - listed - exempt)
    if unlisted:
        raise _fail(pin, f"member {unlisted[0]!r} is not in its RECORD")


def _metadata(members: dict[str, bytes], dist_info: str, pin: ModulePin) -> tuple[
    Requirement, ...
]:
    try:
        wheel = HeaderParser().parsestr(members[f"{dist_info}/WHEEL"].decode("utf-8"))
        metadata = HeaderParser().parsestr(members[f"{dist_info}/METADATA"].decode("utf-8"))
    except KeyError as exc:
        raise _fail(pin, f"has no {exc.args[0]}") from None
    except UnicodeDecodeError:
        raise _fail(pin, "its WHEEL or METADATA is not UTF-8") from None
    if not str(wheel.get("Wheel-Version", "")).startswith("1."):
        raise _fail(pin, f"is wheel format {wheel.get('Wheel-Version')!r}, not 1.x")
    if normalize_name(str(metadata.get("Name", ""))) != normalize_name(pin.name) or (
        canonicalize_version(str(metadata.get("Version", "")))
        != canonicalize_version(pin.version)
    ):
        raise _fail(pin, "its METADATA names another project or version")
    requires = []
    for line in metadata.get_all("Requires-Dist") or ():
        try:
            requires.append(Requirement(str(line)))
        except InvalidRequirement as exc:
            raise _fail(pin, f"declares an unreadable requirement {line!r} ({exc})") from None
    return tuple(requires)


def _placed(path: str, data_dir: str, pin: ModulePin) -> str:
    if not path.startswith(data_dir + "/"):
        return path
    _, _, rest = path.partition("/")
    scheme, _, inner = rest.partition("/")
    if scheme not in ("purelib", "platlib") or not inner:
        raise _fail(
            pin,
            f"installs {path!r} into its {scheme!r} scheme; a module may only carry "
            "importable code",
        )
    return inner


def read_wheel(data: bytes, pin: ModulePin) -> WheelContents:
    """The files installing ``data`` as ``pin`` writes, or a ``WheelError`` saying why not."""
    if sha256_hex(data) != pin.sha256:
        raise _fail(
            pin,
            f"its sha256 is {sha256_hex(data)}, the manifest pins {pin.sha256} (the dist "
            "served other bytes than the pinned wheel)",
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = _members(archive, pin)
    except zipfile.BadZipFile as exc:
        raise _fail(pin, f"is not a zip archive ({exc})") from None
    dist_info = _dist_info(members, pin)
    _check_record(members, dist_info, pin)
    requires = _metadata(members, dist_info, pin)
    data_dir = dist_info[: -len(".dist-info")] + ".data"
    files: dict[str, bytes] = {}
    for path, content in members.items():
        target = _placed(path, data_dir, pin)
        if target in files:
            raise _fail(pin, f"installs {target!r} twice")
        files[target] = content
    for target in files:
        parent = target.rpartition("/")[0]
        while parent:
            if parent in files:
                raise _fail(pin, f"installs {parent!r} both as a file and as a directory")
            parent = parent.rpartition("/")[0]
    return WheelContents(
        name=pin.name, version=pin.version, files=tuple(files.items()), requires=requires
    )


def make_wheel(
    name: str,
    version: str,
    files: Iterable[tuple[str, bytes]],
    *,
    requires: Iterable[str] = (),
    entry_points: str = "",
) -> tuple[str, bytes]:
    """A pure-Python wheel of ``files`` (paths at the install root): its file name and
    bytes. Equal arguments give equal bytes. For publishing small modules, and for the
    dist probe's known-bad control."""
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    dist_info = f"{stem}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {line}\n" for line in requires
    )
    members = [
        *files,
        (f"{dist_info}/METADATA", metadata.encode("utf-8")),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: valis\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ]
    if entry_points:
        members.append((f"{dist_info}/entry_points.txt", entry_points.encode("utf-8")))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in members:
        writer.writerow([path, _record_hash(data), str(len(data))])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    members.append((f"{dist_info}/RECORD", record.getvalue().encode("utf-8")))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in members:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return f"{stem}-py3-none-any.whl", buffer.getvalue()

"""Deliveries: a versioned tarball proved sound, staged beside the others, switched in.

A delivery (``valis-serving-<version>.tar.gz``) carries ``MANIFEST.json``: its version and
every file with its sha256 and mode. ``assert_delivery_sound`` refuses the whole delivery
before anything is written when any member is unlisted, any listed file is missing or
differs from its hash, or any member is unsafe to unpack (an absolute path, a ``..``
component, a link, a device or fifo, a duplicate name).

``apply_delivery`` stages ``<root>/versions/<version>/`` (a sibling temporary directory
renamed into place, so a version directory is whole or absent), proves the run account
can reach what was staged (the ``reachable`` check it is given: the o+x chain of every
directory on the way to each executable), switches the
``<root>/current`` symlink atomically (a new link under a temporary name renamed over the
old), restarts the unit through its ``UnitController`` and reads back that it came up. If
it did not, ``current`` is switched back and the previous version restarted; the
delivery is reported as refused either way. An apply killed part way (SIGKILL, a power
cut) leaves a staging directory or a temporary link at most; the next apply onto the same
root removes them first (applies to one root run one at a time).

Modes are set explicitly, never left to the umask: every directory apply makes is 0755 and
every file gets the mode its manifest entry says. Under an operator's ``umask 077`` the
version would otherwise be root's alone, and the launcher's exec of the resident as the
run account would fail at boot rather than here.

``build_delivery`` is the deterministic writer of the same format (sorted members, zero
mtimes, root ownership, a gzip header without a timestamp, compression level
``GZIP_LEVEL``): equal inputs give equal bytes.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import re
import secrets
import shutil
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO

import attrs

from valis_core import documents, safe_tar
from valis_core.apply.change import Change, change_kind, fulcrum_fingerprint, staged_digests
from valis_core.apply.unit_control import UnitController
from valis_core.atomic import fsync_dir, write_atomic
from valis_core.documents import Document, is_sha256, shown
from valis_core.errors import ValisError
from valis_core.safe_tar import TarDefect

MANIFEST_NAME = "MANIFEST.json"
FORMAT = 1
VERSIONS_DIR = "versions"
CURRENT_LINK = "current"
DEFAULT_UP_TIMEOUT = 60.0
MAX_MEMBERS = 10_000
MAX_MANIFEST_BYTES = 4 << 20
MAX_TOTAL_BYTES = 4 << 30
_CHUNK = 1 << 20
# Level 6 (zlib's default) packs the bundle's ~72 MB of tar within 0.3 % of level 9 in
# well under half the time; the level is part of the bytes, so builders must agree on it.
GZIP_LEVEL = 6
_ALLOWED_MODE_BITS = 0o755
DIR_MODE = 0o755
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_STAGING_RE = re.compile(r"\..+\.[0-9a-f]{12}\.staging")
_LINK_TEMP_RE = re.compile(rf"\.{CURRENT_LINK}\.[0-9a-f]{{12}}\.tmp")


class DeliveryError(ValisError):
    """A delivery refused, or an apply that did not leave the new version serving."""


Reachable = Callable[[Path], str | None]
"""Why the run account cannot reach (traverse every directory on the way to) a path;
None when it can. Given by the caller, which knows the account and how to ask the host."""


def _check_path(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str:
        raise TypeError(f"path {shown(value)} is not a string")
    if not safe_tar.is_plain_relative(value):
        raise ValueError(f"path {value!r} is not a plain relative path")
    if value == MANIFEST_NAME:
        raise ValueError(f"path {value!r} lists the manifest itself")


def _check_sha256(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not is_sha256(value):
        raise ValueError(f"sha256 {shown(value)} is not 64 lowercase hex digits")


def _check_mode(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 0 <= value <= 0o7777:
        raise ValueError(f"mode {shown(value)} is not a file mode")
    if value & ~_ALLOWED_MODE_BITS:
        raise ValueError(f"mode {value:04o} is outside 0755; only modes within it are delivered")


def _check_version(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or not _VERSION_RE.fullmatch(value):
        raise ValueError(
            f"version {shown(value)} is not a version name (letters, digits, . _ + -)"
        )


@attrs.frozen
class DeliveryFile:
    """One file a delivery carries: its relative path, content hash and mode."""

    path: str = attrs.field(validator=_check_path)
    sha256: str = attrs.field(validator=_check_sha256)
    mode: int = attrs.field(validator=_check_mode)
    """In JSON as four octal digits (``"0644"``)."""


def _in_path_order(files: Iterable[DeliveryFile]) -> tuple[DeliveryFile, ...]:
    return tuple(sorted(files, key=lambda entry: entry.path))


def _check_files(
    _: object, attribute: attrs.Attribute[tuple[DeliveryFile, ...]], value: tuple[DeliveryFile, ...]
) -> None:
    paths = [entry.path for entry in value]
    twice = sorted({path for path in paths if paths.count(path) > 1})
    if twice:
        raise ValueError(f"files lists {twice[0]!r} twice")
    clash = safe_tar.file_beneath_file(paths)
    if clash is not None:
        raise ValueError(f"files lists {clash[0]!r} as a file and also {clash[1]!r} beneath it")


@attrs.frozen
class DeliveryManifest:
    """What ``MANIFEST.json`` says: the version and every file, in path order."""

    version: str = attrs.field(validator=_check_version)
    files: tuple[DeliveryFile, ...] = attrs.field(converter=_in_path_order, validator=_check_files)


def _read_mode(value: object) -> int:
    if type(value) is not str or not re.fullmatch(r"0[0-7]{3}", value):
        raise ValueError(f'mode {shown(value)} is not four octal digits like "0644"')
    return int(value, 8)


documents.register_field(DeliveryFile, "mode", _read_mode, lambda mode: f"{mode:04o}")

DOCUMENT: Document[DeliveryManifest] = Document(
    kind=DeliveryManifest,
    name=f"delivery refused: member {MANIFEST_NAME!r}",
    error=DeliveryError,
    remedy="nothing was written (rebuild the delivery with `make dist`)",
    format=FORMAT,
    indent=1,
)
"""``MANIFEST.json`` as a JSON document (``valis_core.documents``)."""


@attrs.frozen
class AppliedDelivery:
    """A delivery now serving: the version switched to and the one it replaced."""

    version: str
    path: Path
    previous: str | None
    #: how it was applied: handed over to, or the unit restarted (``apply.change``)
    change: Change | None = None


# -- soundness (reads only) -----------------------------------------------------------


def _refusal(member: str, problem: str) -> DeliveryError:
    return DeliveryError(
        f"delivery refused: member {member!r} {problem}; nothing was written "
        "(rebuild the delivery with `make dist`)"
    )


def _parse_manifest(data: bytes) -> DeliveryManifest:
    return DOCUMENT.read(data)


def _open_tar(fileobj: IO[bytes]) -> tarfile.TarFile:
    fileobj.seek(0)
    try:
        return tarfile.open(fileobj=fileobj, mode="r:*")
    except safe_tar.READ_ERRORS as exc:
        raise DeliveryError(
            f"delivery refused: not a readable tar archive ({exc}); nothing was written"
        ) from None


def _defect(defect: TarDefect) -> DeliveryError:
    if defect.member is not None:
        return _refusal(defect.member, defect.problem)
    return DeliveryError(f"delivery refused: the archive {defect.problem}; nothing was written")


def _members(archive: tarfile.TarFile) -> Iterator[tuple[str, tarfile.TarInfo]]:
    try:
        yield from safe_tar.members(archive, limit=MAX_MEMBERS)
    except TarDefect as defect:
        raise _defect(defect) from None


def _chunks(archive: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    try:
        yield from safe_tar.chunks(archive, member)
    except TarDefect as defect:
        raise _defect(defect) from None


def _digest(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    digest = hashlib.sha256()
    for chunk in _chunks(archive, member):
        digest.update(chunk)
    return digest.hexdigest()


def check_delivery(fileobj: IO[bytes]) -> DeliveryManifest:
    """Prove the delivery in ``fileobj`` sound and return its manifest; reads only."""
    with _open_tar(fileobj) as archive:
        regular: dict[str, tarfile.TarInfo] = {}
        directories: set[str] = set()
        manifest_data: bytes | None = None
        total = 0
        for path, member in _members(archive):
            if member.isdir():
                directories.add(path)
                continue
            total += member.size
            if total > MAX_TOTAL_BYTES:
                raise DeliveryError(f"delivery refused: more than {MAX_TOTAL_BYTES} bytes")
            if path == MANIFEST_NAME:
                if member.size > MAX_MANIFEST_BYTES:
                    raise _refusal(member.name, "is too large to be a manifest")
                manifest_data = b"".join(_chunks(archive, member))
            else:
                regular[path] = member
        if manifest_data is None:
            raise DeliveryError(
                f"delivery refused: it has no {MANIFEST_NAME}; nothing was written "
                "(rebuild the delivery with `make dist`)"
            )
        manifest = _parse_manifest(manifest_data)
        listed = {entry.path: entry for entry in manifest.files}
        for path in sorted(regular.keys() - listed.keys()):
            raise _refusal(regular[path].name, f"is not listed in {MANIFEST_NAME}")
        for path in sorted(listed.keys() - regular.keys()):
            raise _refusal(path, f"is listed in {MANIFEST_NAME} but missing from the archive")
        for path in sorted(directories & listed.keys()):
            raise _refusal(path, "is listed as a file but is a directory")
        for entry in manifest.files:
            actual = _digest(archive, regular[entry.path])
            if actual != entry.sha256:
                raise _refusal(
                    entry.path,
                    f"has sha256 {actual}, but {MANIFEST_NAME} says {entry.sha256}",
                )
        return manifest


def assert_delivery_sound(tarball: Path) -> DeliveryManifest:
    """Prove the delivery at ``tarball`` sound (see the module doc); reads only."""
    with _open_delivery(tarball) as handle:
        return check_delivery(handle)


@contextlib.contextmanager
def _open_delivery(tarball: Path) -> Iterator[IO[bytes]]:
    try:
        handle = open(tarball, "rb")  # noqa: SIM115 - handed out by this context manager
    except OSError as exc:
        raise DeliveryError(
            f"delivery {tarball}: cannot read it: {exc.strerror or exc}"
        ) from exc
    with handle:
        yield handle


# -- applying (writes) -----------------------------------------------------------------


def _staged_matches(directory: Path, manifest: DeliveryManifest) -> bool:
    """Whether an existing version directory holds exactly the manifest's files."""
    present = {
        str(path.relative_to(directory))
        for path in directory.rglob("*")
        if not path.is_dir() or path.is_symlink()
    }
    if present != {entry.path for entry in manifest.files}:
        return False
    for entry in manifest.files:
        path = directory / entry.path
        if path.is_symlink() or not path.is_file():
            return False
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != entry.sha256:
            return False
    return True


def _stage(handle: IO[bytes], manifest: DeliveryManifest, versions: Path) -> Path:
    """Unpack the manifest's files into ``versions/<version>``, whole or not at all."""
    final = versions / manifest.version
    if final.exists() or final.is_symlink():
        if final.is_dir() and not final.is_symlink() and _staged_matches(final, manifest):
            return final
        raise DeliveryError(
            f"apply: {final} already exists with other content; a version is delivered "
            "once — remove that directory or deliver a new version"
        )
    temp = versions / f".{manifest.version}.{secrets.token_hex(6)}.staging"
    os.mkdir(temp, DIR_MODE)
    try:
        listed = {entry.path: entry for entry in manifest.files}
        with _open_tar(handle) as archive:
            for path, member in _members(archive):
                entry = listed.get(path)
                if entry is None or not member.isreg():
                    continue
                _unpack(archive, member, entry, temp)
        for directory in sorted({p for p in temp.rglob("*") if p.is_dir()}, reverse=True):
            os.chmod(directory, DIR_MODE)
            fsync_dir(directory)
        os.chmod(temp, DIR_MODE)
        fsync_dir(temp)
        os.rename(temp, final)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync_dir(versions)
    return final


def _unpack(
    archive: tarfile.TarFile, member: tarfile.TarInfo, entry: DeliveryFile, root: Path
) -> None:
    target = root / entry.path
    target.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)  # chmod after _stage
    digest = hashlib.sha256()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, 0o600)
    try:
        for chunk in _chunks(archive, member):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fchmod(fd, entry.mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    if digest.hexdigest() != entry.sha256:
        raise DeliveryError(
            f"apply: {entry.path} changed while it was being staged (the tarball was "
            "modified during apply); nothing was switched"
        )


def _sweep_interrupted(root: Path, versions: Path) -> None:
    """Remove what a killed apply left: a half-staged version, a link never switched in."""
    for entry in versions.iterdir():
        if _STAGING_RE.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
    for entry in root.iterdir():
        if _LINK_TEMP_RE.fullmatch(entry.name) and entry.is_symlink():
            entry.unlink(missing_ok=True)


def current_version(root: Path) -> str | None:
    """The version ``<root>/current`` points at, or None when there is none."""
    link = root / CURRENT_LINK
    if not link.is_symlink():
        return None
    return Path(os.readlink(link)).name


def _switch(root: Path, version: str | None) -> None:
    """Point ``<root>/current`` at ``versions/<version>`` atomically (None removes it)."""
    link = root / CURRENT_LINK
    if version is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
    else:
        temp = root / f".{CURRENT_LINK}.{secrets.token_hex(6)}.tmp"
        os.symlink(f"{VERSIONS_DIR}/{version}", temp)
        try:
            os.replace(temp, link)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
    fsync_dir(root)


def _came_up(controller: UnitController, timeout: float) -> bool:
    try:
        controller.restart()
    except ValisError:
        return False
    return controller.wait_up(timeout)


def _change(manifest: DeliveryManifest, root: Path, previous: str | None,
            may_hand_over: bool) -> Change:
    if previous is None:
        return change_kind({}, None)
    if not may_hand_over:
        return Change(False, "the unit is restarted (it is not running, it is supervised "
                             "directly, or --restart asks for it)")
    new = {entry.path: entry.sha256 for entry in manifest.files}
    serving = root / VERSIONS_DIR / previous
    fingerprints = (fulcrum_fingerprint(root / VERSIONS_DIR / manifest.version),
                    fulcrum_fingerprint(serving))
    return change_kind(new, staged_digests(serving, new), fingerprints)


def _make_directories(path: Path) -> None:
    """``path`` and any missing parent, each made 0755 whatever the umask (existing
    directories keep the mode their owner gave them: the reachability check judges them)."""
    missing: list[Path] = []
    for directory in (path, *path.parents):
        if directory.is_dir():
            break
        missing.append(directory)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)
        os.chmod(directory, DIR_MODE)


def _check_reachable(staged: Path, manifest: DeliveryManifest, reachable: Reachable) -> None:
    """Refuse a staged version whose executables the run account cannot reach."""
    directories: dict[Path, Path] = {}
    for entry in manifest.files:
        if entry.mode & 0o111:
            path = staged / entry.path
            directories.setdefault(path.parent, path)
    for path in directories.values():
        problem = reachable(path)
        if problem is not None:
            raise DeliveryError(
                f"apply: {problem}; nothing was switched (the run account must reach the "
                "staged version to run it: fix that, then apply again)"
            )


def stage_delivery(
    tarball: Path, root: Path, *, reachable: Reachable | None = None
) -> tuple[DeliveryManifest, Path]:
    """Prove ``tarball`` sound and stage it as ``<root>/versions/<version>`` (whole or
    absent; an identical staged copy is kept), then, given ``reachable``, prove the run
    account can reach each staged executable. Switches nothing and starts nothing."""
    link = root / CURRENT_LINK
    with _open_delivery(tarball) as handle:
        manifest = check_delivery(handle)
        if (link.exists() or link.is_symlink()) and not link.is_symlink():
            raise DeliveryError(
                f"apply: {link} exists and is not a symlink; move it aside so the switch "
                "can be atomic"
            )
        versions = root / VERSIONS_DIR
        _make_directories(versions)
        _sweep_interrupted(root, versions)
        staged = _stage(handle, manifest, versions)
    if reachable is not None:
        _check_reachable(staged, manifest, reachable)
    return manifest, staged


def switch_current(root: Path, version: str) -> None:
    """Point ``<root>/current`` at the staged ``version``, atomically (as apply does)."""
    _switch(root, version)


def apply_delivery(
    tarball: Path,
    root: Path,
    controller: UnitController,
    *,
    timeout: float = DEFAULT_UP_TIMEOUT,
    reachable: Reachable | None = None,
    hand_over: Callable[[], None] | None = None,
    restart: bool = False,
) -> AppliedDelivery:
    """Prove ``tarball`` sound, stage it under ``root``, switch to it and bring it up.

    With ``hand_over`` (the unit's reload: fulcrum's handover), a delivery that changes
    nothing fulcrum runs by (``apply.change``) is handed over to while the unit runs:
    a new version that does not come up leaves the old one serving, ``current``
    switched back, and raises ``DeliveryError`` saying why. Otherwise (or with
    ``restart``) the unit is restarted.

    Raises ``DeliveryError`` if the delivery is unsound (nothing written), if ``reachable``
    says the run account cannot reach a staged executable (nothing switched), or if the
    new version did not come up within ``timeout`` (``current`` switched back, the
    previous version restarted; the message says whether it came back).
    """
    link = root / CURRENT_LINK
    manifest, staged = stage_delivery(tarball, root, reachable=reachable)
    previous = current_version(root)
    change = _change(manifest, root, previous, hand_over is not None and not restart
                     and controller.is_up())
    _switch(root, manifest.version)
    if change.handover and hand_over is not None:
        try:
            hand_over()
        except ValisError as exc:
            _switch(root, previous)
            raise DeliveryError(
                f"apply: version {manifest.version} did not come up: {exc}; switched back "
                f"to {previous}, which kept serving throughout (nothing was restarted)"
            ) from None
        return AppliedDelivery(manifest.version, staged, previous, change)
    if _came_up(controller, timeout):
        return AppliedDelivery(manifest.version, staged, previous, change)
    _switch(root, previous)
    if previous is None:
        controller.stop()
        raise DeliveryError(
            f"apply: version {manifest.version} did not come up within {timeout:g}s; "
            f"there was no previous version, so {link} was removed and the unit stopped "
            "(read the unit's log for why it failed)"
        )
    if _came_up(controller, timeout):
        outcome = f"switched back to {previous}, which came up again"
    else:
        outcome = f"switched back to {previous}, which did NOT come up either: the unit is down"
    raise DeliveryError(
        f"apply: version {manifest.version} did not come up within {timeout:g}s; {outcome} "
        "(read the unit's log for why the new version failed)"
    )


# -- building -------------------------------------------------------------------------


def render_manifest(version: str, files: Mapping[str, tuple[bytes, int]]) -> bytes:
    """The canonical ``MANIFEST.json`` for ``files`` (path → (content, mode)); what apply
    would refuse is refused here, so it is never built."""
    try:
        manifest = DeliveryManifest(
            version,
            tuple(
                DeliveryFile(path, hashlib.sha256(data).hexdigest(), mode)
                for path, (data, mode) in files.items()
            ),
        )
    except (ValueError, TypeError) as exc:
        raise DOCUMENT.refusal(str(exc)) from None
    return DOCUMENT.render(manifest)


def build_delivery_bytes(version: str, files: Mapping[str, bytes | tuple[bytes, int]]) -> bytes:
    """A delivery tarball (gzip) of ``files``: path → content, or (content, mode)."""
    normalised = {
        path: (value, 0o644) if isinstance(value, bytes) else value
        for path, value in files.items()
    }
    manifest = render_manifest(version, normalised)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, (data, mode) in [(MANIFEST_NAME, (manifest, 0o644)), *sorted(normalised.items())]:
            archive.addfile(safe_tar.file_info(path, len(data), mode), io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=GZIP_LEVEL, mtime=0)


def build_delivery(
    files: Mapping[str, bytes | tuple[bytes, int]], version: str, out: Path
) -> DeliveryManifest:
    """Write the delivery for ``files`` to ``out`` atomically; deterministic bytes."""
    data = build_delivery_bytes(version, files)
    write_atomic(out, data, mode=0o644)
    return check_delivery(io.BytesIO(data))

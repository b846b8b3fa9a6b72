"""Condensing modules: the wheels a store head pins, fetched from the node's registered
private dist and installed into the state directory's ``modules`` directory.

Nothing is resolved: each pin names an exact version and wheel hash, and a module's own
requirements must already be met, by the runtime valis runs in or by another pinned
module; an unmet one refuses the install (naming it) rather than fetching something
unpinned. Every wheel is fetched and checked whole (``plugin.wheel``) before anything is
written; the files are written to a fresh directory beside ``modules``, made durable,
and only then put in its place, with a record of the pins installed that the resident
compares with its head at boot. A refusal leaves the state directory as it was.
"""

from __future__ import annotations

import http.client
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from packaging.tags import Tag, sys_tags
from packaging.version import InvalidVersion, Version

from valis_core.acting_as import acting_as
from valis_core.atomic import fsync_dir
from valis_core.errors import ValisError
from valis_core.plugin.dist_home import ALLOW_INSECURE, is_plain_http
from valis_core.plugin.installed import (
    INSTALLED_RECORD,
    MODULES_DIR,
    installed_record,
    modules_dir,
)
from valis_core.plugin.simple_index import (
    DistError,
    DistFile,
    choose_wheels,
    parse_project_page,
    project_url,
)
from valis_core.plugin.wheel import WheelContents, read_wheel, sha256_hex
from valis_core.store.manifest import ModulePin, normalize_name

MAX_FETCH = 256 << 20

Fetch = Callable[[str], bytes]
"""The bytes at a URL of the private dist, or a ``DistError`` naming it (``DistMissing``
when the dist says there is nothing there)."""


class ModuleInstallError(ValisError):
    """The checked modules could not be written into the state directory."""


class DistMissing(DistError):
    """The private dist has nothing at a URL (HTTP 404 or 410, or no such file)."""


class _NoDowngrade(urllib.request.HTTPRedirectHandler):
    """Redirects followed, except from https to plain http: an https dist that sends its
    bytes over http would lose what https gave."""

    def redirect_request(  # noqa: PLR0917 (urllib's own signature)
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
        headers: http.client.HTTPMessage, newurl: str,
    ) -> urllib.request.Request | None:
        if not is_plain_http(req.full_url) and is_plain_http(newurl):
            raise DistError(
                f"the private dist redirected {req.full_url} to plain http ({newurl}); "
                "refusing the downgrade: publish every file over https"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_NoDowngrade)


def fetch_url(url: str, *, timeout: float = 30.0) -> bytes:
    """GET ``url`` (http, https or file), at most ``MAX_FETCH`` bytes; a redirect from
    https to plain http is refused. A file URL of a directory reads its ``index.html``,
    as a static web server publishing it would."""
    if url.startswith("file:") and url.endswith("/"):
        url += "index.html"
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            data: bytes = response.read(MAX_FETCH + 1)
    except urllib.error.HTTPError as exc:
        kind = DistMissing if exc.code in (404, 410) else DistError
        raise kind(f"the private dist answered {exc.code} for {url}") from exc
    except FileNotFoundError as exc:
        raise DistMissing(f"the private dist has no {url}") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, FileNotFoundError):
            raise DistMissing(f"the private dist has no {url}") from exc
        raise DistError(f"the private dist cannot be reached at {url}: {exc.reason}") from exc
    except OSError as exc:
        raise DistError(f"the private dist cannot be reached at {url}: {exc}") from exc
    if len(data) > MAX_FETCH:
        raise DistError(f"{url} is larger than {MAX_FETCH >> 20} MiB; refusing it")
    return data


def _candidates(
    index_url: str, name: str, version: str, *, sha256: str | None, fetch: Fetch,
    supported: Sequence[Tag],
) -> tuple[DistFile, ...]:
    page_url = project_url(index_url, name)
    try:
        page = fetch(page_url).decode("utf-8", errors="replace")
    except DistMissing as exc:
        raise DistError(
            f"the private dist {index_url} offers no wheel of {name} (it has no page "
            f"{page_url}); publish {name}=={version} there or register the dist that has it"
        ) from exc
    files = parse_project_page(page, page_url)
    return choose_wheels(files, name, version, supported, index_url=index_url, sha256=sha256)


def _refuse_plain_http(url: str, name: str, version: str) -> None:
    if is_plain_http(url):
        raise DistError(
            f"pinning {name}=={version}: {url} is plain http, so the pin would record "
            "whatever anyone on the path served; publish the dist over https (or as a file "
            f"URL), or pass {ALLOW_INSECURE} to accept that"
        )


def resolve_pin(
    index_url: str, name: str, version: str, *, fetch: Fetch = fetch_url,
    supported: Sequence[Tag] | None = None, allow_insecure: bool = False,
) -> tuple[ModulePin, WheelContents]:
    """Pin ``name==version`` to the wheel the dist offers for it now, checked whole (a
    genesis deploy's modules; from then on the pin, not the dist, says which bytes the
    node runs). Neither its page nor its wheel is taken over plain http unless
    ``allow_insecure``: nothing else vouches for the bytes pinned."""
    if not allow_insecure:
        _refuse_plain_http(project_url(index_url, name), name, version)
    tags = list(sys_tags()) if supported is None else supported
    file = _candidates(index_url, name, version, sha256=None, fetch=fetch, supported=tags)[0]
    if not allow_insecure:
        _refuse_plain_http(file.url, name, version)
    data = fetch(file.url)
    pin = ModulePin(name=name, version=version, sha256=sha256_hex(data))
    if file.sha256 is not None and file.sha256 != pin.sha256:
        raise DistError(
            f"the private dist {index_url} states sha256 {file.sha256} for {file.filename} "
            f"but serves bytes with sha256 {pin.sha256}; republish it"
        )
    return pin, read_wheel(data, pin)


def fetch_modules(
    pins: Iterable[ModulePin], index_url: str, *, fetch: Fetch = fetch_url,
    supported: Sequence[Tag] | None = None,
) -> tuple[WheelContents, ...]:
    """Every pinned wheel from the dist, each checked whole against its pin."""
    tags = list(sys_tags()) if supported is None else supported
    wheels = []
    for pin in pins:
        candidates = _candidates(
            index_url, pin.name, pin.version, sha256=pin.sha256, fetch=fetch, supported=tags
        )
        data = b""
        for file in candidates:
            data = fetch(file.url)
            if sha256_hex(data) == pin.sha256:
                break
        wheels.append(read_wheel(data, pin))
    return tuple(wheels)


def runtime_versions() -> dict[str, str]:
    """The distributions the running interpreter has, by normalised name."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize_name(str(name)), dist.version)
    return found


def unmet_requirements(
    wheels: Iterable[WheelContents], runtime: Mapping[str, str]
) -> tuple[str, ...]:
    """Each requirement of a module that neither the runtime nor a pinned module meets,
    as ``"module needs requirement (have ...)"``."""
    wheels = tuple(wheels)
    have = dict(runtime)
    have.update({normalize_name(wheel.name): wheel.version for wheel in wheels})
    unmet = []
    for wheel in wheels:
        for requirement in wheel.requires:
            if requirement.marker is not None and not requirement.marker.evaluate(
                {"extra": ""}
            ):
                continue
            found = have.get(normalize_name(requirement.name))
            try:
                met = found is not None and requirement.specifier.contains(
                    Version(found), prereleases=True
                )
            except InvalidVersion:
                met = False
            if not met:
                held = f"have {found}" if found is not None else "absent"
                unmet.append(f"{wheel.name} needs {requirement} ({held})")
    return tuple(unmet)


def conflicts(
    wheels: Iterable[WheelContents], runtime_has: Callable[[str], bool]
) -> tuple[str, ...]:
    """What stops ``wheels`` sharing one modules directory under the runtime: a path two
    modules both install (or one installs as a file and another writes beneath), the
    install record's own name, or a top-level name the runtime already imports (the
    runtime comes first on the path, so the module's own would never load)."""
    owners: dict[str, str] = {}
    found = []
    tops: dict[str, str] = {}
    for wheel in wheels:
        for path, _ in wheel.files:
            if path == INSTALLED_RECORD:
                found.append(f"{wheel.name} installs {path}, the name of the install record")
            if path in owners and owners[path] != wheel.name:
                found.append(f"{wheel.name} and {owners[path]} both install {path}")
            owners[path] = wheel.name
            top = path.split("/", 1)[0]
            if not top.endswith(".dist-info"):
                tops.setdefault(top.removesuffix(".py"), wheel.name)
    for path, module in owners.items():
        parent = path.rpartition("/")[0]
        while parent:
            if parent in owners:
                found.append(f"{owners[parent]} installs {parent} as a file, {module} "
                             f"installs {path} beneath it")
            parent = parent.rpartition("/")[0]
    for name, module in sorted(tops.items()):
        if name.isidentifier() and runtime_has(name):
            found.append(f"{module} installs {name!r}, a name the runtime already imports")
    return tuple(found)


def runtime_imports(name: str) -> bool:
    """Whether the running interpreter already finds a top-level module ``name``."""
    return importlib.util.find_spec(name) is not None


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o644)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def install_modules(
    state_dir: Path,
    pins: Sequence[ModulePin],
    wheels: Sequence[WheelContents],
    *,
    owner: tuple[int, int] | None = None,
) -> Path:
    """Put ``wheels`` (checked, one per pin) in place as the state directory's modules,
    written as ``owner`` (the run account, whose directory it is) when given. Directories
    an interrupted install left beside it are removed first."""
    try:
        with acting_as(owner):
            return _install(state_dir, pins, wheels)
    except OSError as exc:
        as_whom = "the run account" if owner is not None else "this process"
        raise ModuleInstallError(
            f"cannot install modules into {state_dir} as {as_whom}: "
            f"{exc.strerror or exc}; the state directory must be the run account's"
        ) from exc


def _install(
    state_dir: Path, pins: Sequence[ModulePin], wheels: Sequence[WheelContents]
) -> Path:
    target = modules_dir(state_dir)
    for leftover in state_dir.glob(".modules-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    fresh = Path(tempfile.mkdtemp(prefix=".modules-", dir=state_dir))
    try:
        fresh.chmod(0o755)
        for wheel in wheels:
            for relative, data in wheel.files:
                _write_file(fresh / relative, data)
        _write_file(fresh / INSTALLED_RECORD, installed_record(pins))
        for directory, _, _ in os.walk(fresh):
            os.chmod(directory, 0o755)
            fsync_dir(Path(directory))
        retired = None
        if target.exists():
            retired = Path(tempfile.mkdtemp(prefix=".modules-retired-", dir=state_dir))
            os.rename(target, retired / MODULES_DIR)
        os.rename(fresh, target)
        fsync_dir(state_dir)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)
    return target


def condense_modules(
    state_dir: Path,
    pins: Sequence[ModulePin],
    index_url: str,
    *,
    fetch: Fetch = fetch_url,
    owner: tuple[int, int] | None = None,
    runtime: Mapping[str, str] | None = None,
) -> Path:
    """Fetch, check and install every pinned module; the installed ``modules`` directory."""
    wheels = fetch_modules(pins, index_url, fetch=fetch)
    return install_checked(state_dir, pins, wheels, owner=owner, runtime=runtime)


def install_checked(
    state_dir: Path,
    pins: Sequence[ModulePin],
    wheels: Sequence[WheelContents],
    *,
    owner: tuple[int, int] | None = None,
    runtime: Mapping[str, str] | None = None,
) -> Path:
    """Install ``wheels`` (each already checked against its pin) once they are known to
    work together: every requirement met, no path or runtime name clashing."""
    unmet = unmet_requirements(wheels, runtime_versions() if runtime is None else runtime)
    if unmet:
        raise DistError(
            "a pinned module's requirements are not met: " + "; ".join(unmet)
            + "; pin each missing distribution in the manifest and publish it in the dist"
        )
    clashes = conflicts(wheels, runtime_imports)
    if clashes:
        raise DistError(
            "the pinned modules cannot be installed together: " + "; ".join(clashes)
            + "; rename the module's package"
        )
    return install_modules(state_dir, pins, wheels, owner=owner)

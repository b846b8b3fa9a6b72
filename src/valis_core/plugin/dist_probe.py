"""Ask a private dist to install its whole catalogue before believing it can.

A dist can hash correctly and publish cleanly while part of it will not install: a
project page linking a file that is not a wheel, a wheel whose contents disagree with
its RECORD, a module needing something neither the runtime nor the dist supplies.
``probe_dist`` measures it the way a node would see it: with the dist as the only source,
every version of every project it lists is fetched and checked by the node's own
installer (``plugin.install``), each version's requirements are checked against the
runtime and the rest of the catalogue, and the newest version of every project is
installed together into a scratch modules directory. Every refusal is reported, with its
reason.

The same probe is run against a known-bad control dist it builds itself (one wheel whose
member does not match its RECORD). If the control is not refused, the probe measured
nothing, and says so rather than reporting a clean dist.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from pathlib import Path

import attrs
from packaging.tags import sys_tags
from packaging.version import Version

from valis_core.errors import ValisError
from valis_core.plugin.install import (
    Fetch,
    conflicts,
    fetch_url,
    install_modules,
    resolve_pin,
    runtime_imports,
    runtime_versions,
    unmet_requirements,
)
from valis_core.plugin.simple_index import (
    DistError,
    parse_project_page,
    parse_root_page,
    project_url,
    wheel_of,
)
from valis_core.plugin.wheel import WheelContents, make_wheel
from valis_core.plugin.wheelhouse import SIMPLE, write_simple_index
from valis_core.store.manifest import ModulePin, normalize_name

CONTROL_PROJECT = "valis-probe-control"


@attrs.frozen
class Refusal:
    """One thing the dist offers that a node could not install, and why."""

    offered: str
    reason: str


@attrs.frozen
class ProbeReport:
    index_url: str
    offered: tuple[str, ...]
    """Every ``project==version`` (or file) the dist lists, in catalogue order."""
    installed: tuple[str, ...]
    """The newest version of each project, installed together."""
    refusals: tuple[Refusal, ...]
    control_refused: bool

    @property
    def discriminates(self) -> bool:
        return self.control_refused


def _versions(index_url: str, project: str, fetch: Fetch) -> tuple[list[str], list[Refusal]]:
    page_url = project_url(index_url, project)
    files = parse_project_page(fetch(page_url).decode("utf-8", errors="replace"), page_url)
    versions: dict[Version, None] = {}
    refusals = []
    tags = set(sys_tags())
    for file in files:
        parsed = wheel_of(file)
        if parsed is None:
            refusals.append(Refusal(file.filename, "not a wheel: a node installs wheels only"))
            continue
        name, version, wheel_tags = parsed
        if normalize_name(name) != project:
            refusals.append(Refusal(file.filename, f"listed under {project}, names {name}"))
        elif wheel_tags & tags:
            versions.setdefault(version, None)
    if not versions and not refusals:
        refusals.append(Refusal(project, "its page offers no wheel this interpreter can install"))
    return [str(version) for version in sorted(versions)], refusals


def _check_catalogue(
    index_url: str, fetch: Fetch
) -> tuple[list[str], dict[str, tuple[ModulePin, WheelContents]], list[Refusal]]:
    offered: list[str] = []
    newest: dict[str, tuple[ModulePin, WheelContents]] = {}
    refusals: list[Refusal] = []
    for project in parse_root_page(fetch(index_url).decode("utf-8", errors="replace")):
        try:
            versions, bad = _versions(index_url, project, fetch)
        except DistError as exc:
            refusals.append(Refusal(project, str(exc)))
            continue
        refusals.extend(bad)
        for version in versions:
            offered.append(f"{project}=={version}")
            try:
                pin, contents = resolve_pin(index_url, project, version, fetch=fetch,
                                            allow_insecure=True)
            except ValisError as exc:
                refusals.append(Refusal(f"{project}=={version}", str(exc)))
                continue
            newest[project] = (pin, contents)
    return offered, newest, refusals


def _measure(
    index_url: str, scratch: Path, fetch: Fetch, runtime: Mapping[str, str]
) -> ProbeReport:
    offered, newest, refusals = _check_catalogue(index_url, fetch)
    catalogue = dict(runtime)
    catalogue.update({name: pin.version for name, (pin, _) in newest.items()})
    installable: dict[str, tuple[ModulePin, WheelContents]] = {}
    for name, (pin, contents) in newest.items():
        unmet = unmet_requirements([contents], catalogue)
        if unmet:
            refusals.append(Refusal(f"{name}=={pin.version}", "; ".join(unmet)))
        else:
            installable[name] = (pin, contents)
    installed: tuple[str, ...] = ()
    clashes = conflicts([contents for _, contents in installable.values()], runtime_imports)
    if clashes:
        refusals.append(Refusal("the whole catalogue", "; ".join(clashes)))
    else:
        scratch.mkdir(mode=0o755, parents=True, exist_ok=True)
        install_modules(
            scratch,
            [pin for pin, _ in installable.values()],
            [contents for _, contents in installable.values()],
        )
        installed = tuple(f"{name}=={pin.version}" for name, (pin, _) in installable.items())
    return ProbeReport(
        index_url=index_url,
        offered=tuple(offered),
        installed=installed,
        refusals=tuple(refusals),
        control_refused=True,
    )


def build_control_dist(directory: Path) -> str:
    """A dist of one wheel whose member disagrees with its RECORD; its index URL."""
    name, data = make_wheel(
        CONTROL_PROJECT, "1.0", [("valis_probe_control/__init__.py", b"VALUE = 1\n")]
    )
    tampered = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(tampered, "w") as out:
        for info in source.infolist():
            body = source.read(info)
            if info.filename.endswith("__init__.py"):
                body = b"VALUE = 2\n"
            out.writestr(info, body)
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    (directory / name).write_bytes(tampered.getvalue())
    write_simple_index(directory)
    return (directory.resolve() / SIMPLE).as_uri() + "/"


def probe_dist(
    index_url: str,
    scratch: Path,
    *,
    fetch: Fetch = fetch_url,
    runtime: Mapping[str, str] | None = None,
) -> ProbeReport:
    """Measure whether ``index_url`` installs whole, under ``scratch`` (a directory this
    probe owns: the measuring modules directory and the control dist go there)."""
    have = runtime_versions() if runtime is None else runtime
    control = _measure(
        build_control_dist(scratch / "control"), scratch / "control-env", fetch_url, have
    )
    report = _measure(index_url, scratch / "env", fetch, have)
    return attrs.evolve(report, control_refused=bool(control.refusals))

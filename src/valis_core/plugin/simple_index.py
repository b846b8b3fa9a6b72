"""The private dist as a PEP 503 simple index: reading its pages, choosing a pinned wheel,
and writing an index for a directory of wheels.

Pure: pages are text in, values out; fetching them is the installer's business. A pin
names an exact version and the sha256 of one wheel, so choosing never resolves anything:
it finds the files the dist offers for that project and version which this interpreter
can install, and refuses, saying what the dist does offer, when there are none. The
downloaded bytes are checked against the pin whatever the page claims.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from html.parser import HTMLParser
from urllib.parse import quote, urldefrag, urljoin

import attrs
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from valis_core.errors import ValisError
from valis_core.store.manifest import normalize_name

_SHA256 = re.compile(r"[0-9a-f]{64}")


class DistError(ValisError):
    """The private dist cannot supply what a node's manifest pins."""


@attrs.frozen
class DistFile:
    """One file a project page offers: its name, where to fetch it, and the sha256 the
    page states for it (``None`` when the page states none)."""

    filename: str
    url: str
    sha256: str | None


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.anchors.append((self._href, "".join(self._text).strip()))
            self._href = None


def _anchors(page: str) -> list[tuple[str, str]]:
    parser = _Anchors()
    parser.feed(page)
    parser.close()
    return parser.anchors


def project_url(index_url: str, name: str) -> str:
    """The project page of ``name`` under the index (PEP 503: normalised, trailing slash)."""
    return index_url.rstrip("/") + "/" + normalize_name(name) + "/"


def parse_project_page(page: str, page_url: str) -> tuple[DistFile, ...]:
    """Every file a PEP 503 project page links, with absolute URLs and stated hashes."""
    found = []
    for href, text in _anchors(page):
        if not href:
            continue
        target, fragment = urldefrag(urljoin(page_url, href))
        name = text or target.rstrip("/").rpartition("/")[2]
        digest = None
        if fragment.startswith("sha256="):
            stated = fragment[len("sha256=") :].lower()
            digest = stated if _SHA256.fullmatch(stated) else None
        found.append(DistFile(filename=name, url=target, sha256=digest))
    return tuple(found)


def parse_root_page(page: str) -> tuple[str, ...]:
    """The normalised project names a PEP 503 root page lists, in page order, once each."""
    names: dict[str, None] = {}
    for href, text in _anchors(page):
        label = text or href.rstrip("/").rpartition("/")[2]
        if label:
            names.setdefault(normalize_name(label), None)
    return tuple(names)


def wheel_of(file: DistFile) -> tuple[str, Version, frozenset[Tag]] | None:
    """The project name, version and tags a wheel's file name gives; ``None`` when the
    file is not a wheel."""
    try:
        name, version, _, tags = parse_wheel_filename(file.filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return str(name), version, tags


def choose_wheels(
    files: Iterable[DistFile],
    name: str,
    version: str,
    supported: Iterable[Tag],
    *,
    index_url: str,
    sha256: str | None = None,
) -> tuple[DistFile, ...]:
    """The wheels of ``name`` at exactly ``version`` this interpreter can install; with a
    pinned ``sha256``, a file stating that hash first. Refuses, naming what the dist offers
    instead, when there are none, or when every candidate states a hash other than the
    pin's."""
    project = normalize_name(name)
    wanted = Version(version)
    wheels = []
    for file in files:
        parsed = wheel_of(file)
        if parsed is not None and normalize_name(parsed[0]) == project:
            wheels.append((file, parsed[1], parsed[2]))
    where = f"the private dist {index_url}"
    if not wheels:
        raise DistError(
            f"{where} offers no wheel of {name}; publish {name}=={version} there or "
            "register the dist that has it"
        )
    at_version = [(file, tags) for file, found, tags in wheels if found == wanted]
    if not at_version:
        offered = ", ".join(sorted({str(found) for _, found, _ in wheels}))
        raise DistError(
            f"{where} offers {name} at {offered}, not {version}; publish that version (a "
            "dist keeps old versions so pins keep working)"
        )
    can = set(supported)
    usable = sorted((file for file, tags in at_version if tags & can), key=lambda f: f.filename)
    if not usable:
        offered = ", ".join(sorted(file.filename for file, _ in at_version))
        raise DistError(
            f"{where} offers {name}=={version} only as {offered}, none installable by this "
            "interpreter; publish a pure-Python (py3-none-any) or matching wheel"
        )
    if sha256 is None:
        return tuple(usable)
    if all(file.sha256 is not None and file.sha256 != sha256 for file in usable):
        raise DistError(
            f"{where} offers {name}=={version} with sha256 "
            f"{', '.join(str(file.sha256) for file in usable)}, but the manifest pins "
            f"{sha256}: the dist's wheel changed under the pin; republish the pinned wheel"
        )
    return tuple(sorted(usable, key=lambda file: file.sha256 != sha256))


def render_root_page(projects: Iterable[str]) -> str:
    """A PEP 503 root page listing ``projects`` (normalised, sorted)."""
    names = sorted({normalize_name(name) for name in projects})
    links = "".join(
        f'<a href="{quote(name)}/">{html.escape(name)}</a>\n' for name in names
    )
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"


def render_project_page(files: Iterable[tuple[str, str]], *, prefix: str = "") -> str:
    """A PEP 503 project page linking each ``(filename, sha256)`` at ``prefix`` + name,
    relative to the page."""
    links = "".join(
        f'<a href="{html.escape(prefix + quote(name))}#sha256={digest}">{html.escape(name)}</a>\n'
        for name, digest in sorted(files)
    )
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"

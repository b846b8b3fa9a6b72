"""A private dist from a directory of wheels: the PEP 503 pages that make it an index.

``write_simple_index(DIR)`` writes ``DIR/simple/index.html`` and one project page per
project, each linking its wheels in ``DIR`` with their sha256, so ``file://DIR/simple/``
(or any static web server publishing ``DIR``) is an index a node can register. Pages are
written atomically and only after every wheel name has been read, so a wheelhouse
holding a file that is not a wheel is refused with its pages unchanged.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from valis_core.atomic import write_atomic
from valis_core.plugin.simple_index import DistError, render_project_page, render_root_page
from valis_core.store.manifest import normalize_name

SIMPLE = "simple"


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_simple_index(wheelhouse: Path) -> dict[str, tuple[str, ...]]:
    """Index every ``*.whl`` in ``wheelhouse``; the wheels indexed, by project."""
    projects: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(wheelhouse.glob("*.whl")):
        try:
            name = normalize_name(str(parse_wheel_filename(path.name)[0]))
        except InvalidWheelFilename as exc:
            raise DistError(
                f"{path} is not a wheel file name ({exc}); rename or remove it"
            ) from exc
        projects.setdefault(name, []).append((path.name, _digest(path)))
    root = wheelhouse / SIMPLE
    for name, files in projects.items():
        page = render_project_page(files, prefix="../../")
        (root / name).mkdir(mode=0o755, parents=True, exist_ok=True)
        write_atomic(root / name / "index.html", page.encode("utf-8"), mode=0o644)
    root.mkdir(mode=0o755, exist_ok=True)
    write_atomic(root / "index.html", render_root_page(projects).encode("utf-8"), mode=0o644)
    return {name: tuple(file for file, _ in files) for name, files in projects.items()}

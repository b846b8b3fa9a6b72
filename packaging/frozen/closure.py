"""What the frozen program must carry: valis and every distribution it runs on.

The closure is walked from valis's own metadata (its ``Requires-Dist``, with the extras
it asks for, such as ``psycopg[binary]``), with markers evaluated for this interpreter,
so a dependency added to ``pyproject.toml`` is frozen without anyone editing a list. Each
distribution contributes its import packages (every submodule, not only those the entry
points happen to import: an installed module may import any of them) and its metadata
(so ``importlib.metadata`` in the frozen program sees it: module requirement checks and
entry points depend on it).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterator

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = "valis"

# Submodules no installed module has any business importing, and which would pull whole
# toolchains into the program (a test suite's fixtures, a build backend).
_SKIPPED = re.compile(r"(^|\.)(_?tests?|conftest|fixtures)(\.|$)")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(root: str = ROOT) -> list[importlib.metadata.Distribution]:
    """``root`` and everything its requirements reach, each once, in walk order."""
    found: dict[str, importlib.metadata.Distribution] = {}
    extras_of: dict[str, set[str]] = {}
    pending: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    while pending:
        name, extras = pending.pop(0)
        key = _normalize(name)
        if key in found and extras <= extras_of[key]:
            continue
        found.setdefault(key, importlib.metadata.distribution(name))
        extras_of.setdefault(key, set()).update(extras)
        environment = default_environment()
        for text in found[key].requires or ():
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or any(
                marker.evaluate({**environment, "extra": extra})
                for extra in ("", *sorted(extras_of[key]))
            ):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return list(found.values())


def import_packages(dist: importlib.metadata.Distribution) -> list[str]:
    """The top-level import names ``dist`` provides (``top_level.txt`` or its RECORD)."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return sorted({line.strip() for line in listed.splitlines() if line.strip()})
    names = set()
    for path in dist.files or ():
        top = path.parts[0]
        if top.endswith((".dist-info", ".data", ".pth")) or top in ("..", "__pycache__"):
            continue
        if len(path.parts) == 1 and not top.endswith(".py"):
            continue
        names.add(top.removesuffix(".py"))
    return sorted(name for name in names if name.isidentifier())


def foreign_packages(root: str = ROOT) -> list[str]:
    """Import packages of the build environment that are outside the closure (the test
    and build tools beside it): excluded, so that a guarded ``import hypothesis`` deep in
    a library does not carry a test framework into the program."""
    inside = {name for dist in distributions(root) for name in import_packages(dist)}
    outside = {
        name
        for dist in importlib.metadata.distributions()
        for name in import_packages(dist)
    }
    return sorted(outside - inside)


def collected(name: str) -> bool:
    """Whether submodule ``name`` belongs in the program (test suites do not)."""
    return _SKIPPED.search(name) is None


def describe() -> Iterator[str]:
    for dist in distributions():
        yield f"{dist.metadata['Name']} {dist.version}: {' '.join(import_packages(dist))}"
    yield f"excluded: {' '.join(foreign_packages())}"


if __name__ == "__main__":
    print("\n".join(describe()))

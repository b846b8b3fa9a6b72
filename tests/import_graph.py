"""The import graph of a source tree, read with ast (nothing is imported): every module a
file imports, absolute, including imports inside functions, relative ones resolved, and
``from pkg import sub`` counted as importing the submodule ``pkg.sub`` too. The layering
test reads ``src`` with it, and the test that test modules stand apart reads ``tests``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs


@attrs.frozen
class Edge:
    """``importer`` imports ``imported`` (a module, or a package's submodule)."""

    importer: str
    imported: str


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, source: str, *, package: bool) -> Iterator[str]:
    """Every module ``source`` imports, absolute, including those inside functions."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            # ``from pkg import sub`` may name a submodule.
            yield from (f"{module}.{alias.name}" for alias in node.names)


def modules(root: Path) -> set[str]:
    return {module_name(path, root) for path in root.rglob("*.py")}


def import_graph(root: Path, *folders: str) -> set[Edge]:
    """Every import of every module under ``root`` (only those under ``folders`` of it,
    when given), modules named from ``root``."""
    edges = set()
    paths = [path for folder in folders or ("",) for path in (root / folder).rglob("*.py")]
    for path in paths:
        name = module_name(path, root)
        for imported in imports_of(name, path.read_text(), package=path.name == "__init__.py"):
            edges.add(Edge(name, imported))
    return edges

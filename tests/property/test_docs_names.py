"""The documentation names real modules, and the architecture page's picture names them all.

README.md and docs/*.md name modules by their dotted names in backticks
(``valis_core.dns.serve.rrl``, ``valis_core.resident.bring_up.STAGES``); code moved or
renamed without its documentation would leave them pointing nowhere. Each name that
starts with a package of ``src`` (``valis_core``, ``valis_cli``, ``fulcrum``), in an
inline code span or a fenced block, must resolve: its longest prefix that is a module (a
``.py`` file, a package, or a compiled module's C source), then, if anything follows, a
name that module defines (at its top level, under ``if`` or ``try`` too, imported there,
or listed in ``__all__``), then a class's own attribute after a class. Read with ast:
nothing is imported.

docs/architecture.md's picture (the fenced block under "## The picture") names every
package of the library and every module at its top, so a new one cannot be left out of
it; its layers are ``LAYERS`` in tests/property/test_layering.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_NAME = re.compile(r"(?<![\w./-])(?:valis_core|valis_cli|fulcrum)(?:\.[A-Za-z_]\w*)*(?!\w)")
_FILE_SUFFIXES = frozenset({"md", "py", "c", "toml", "json", "txt", "service", "socket"})
"""A name ending in one of these is a file's (``fulcrum.md``), not a module's."""


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def dotted_names(text: str) -> list[str]:
    """Every dotted name of ours in ``text``'s code: inline spans and fenced blocks."""
    fenced = _FENCE.findall(text)
    prose = _FENCE.sub("", text)
    code = [*fenced, *_SPAN.findall(prose)]
    return [
        name for piece in code for name in _NAME.findall(piece)
        if name.rpartition(".")[2] not in _FILE_SUFFIXES
    ]


def module_file(module: str, src: Path) -> Path | None:
    """The file that is ``module`` under ``src`` (a compiled one's C source), or None."""
    path = src.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py", path.with_suffix(".c")):
        if candidate.is_file():
            return candidate
    return None


def _bound(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names statements at this level bind (under ``if``/``try`` too), to the
    statement that binds them."""
    found: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If):
            found.update(_bound(node.body) | _bound(node.orelse))
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody,
                         *(handler.body for handler in node.handlers)):
                found.update(_bound(part))
    return found


def _exported(tree: ast.Module) -> set[str]:
    """The strings of the module's ``__all__``."""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            return {e.value for e in node.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def unresolved(name: str, src: Path) -> str | None:
    """Why ``name`` names nothing under ``src``; None when it resolves."""
    parts = name.split(".")
    depth = next((n for n in range(len(parts), 0, -1)
                  if module_file(".".join(parts[:n]), src) is not None), 0)
    if depth == 0:
        return f"{name}: no such module"
    module = ".".join(parts[:depth])
    rest = parts[depth:]
    path = module_file(module, src)
    if not rest or path is None or path.suffix == ".c":
        return None
    tree = ast.parse(path.read_text("utf-8"))
    bound = _bound(tree.body)
    if rest[0] not in bound and rest[0] not in _exported(tree):
        if path.name == "__init__.py":
            return f"{name}: {module} has no module or name {rest[0]}"
        return f"{name}: {module} defines no {rest[0]}"
    holder = bound.get(rest[0])
    if len(rest) > 1 and isinstance(holder, ast.ClassDef) and rest[1] not in _bound(holder.body):
        return f"{name}: {module}.{rest[0]} has no {rest[1]}"
    return None


def stale_names(root: Path) -> list[str]:
    found = []
    for doc in documents(root):
        if not doc.is_file():
            continue
        for name in dict.fromkeys(dotted_names(doc.read_text("utf-8"))):
            why = unresolved(name, root / "src")
            if why is not None:
                found.append(f"{doc.relative_to(root)}: {why}")
    return found


def picture(text: str) -> str:
    """The fenced block under the page's "## The picture" heading."""
    section = text.split("\n## The picture\n", 1)[1].split("\n## ", 1)[0]
    blocks = _FENCE.findall(section)
    assert blocks, "docs/architecture.md's picture section has no fenced block"
    return str(blocks[0])


def library_parts(src: Path) -> list[str]:
    """Every package of ``valis_core`` and every module at its top, relative to it."""
    library = src / "valis_core"
    packages = [init.parent for init in library.rglob("__init__.py") if init.parent != library]
    tops = [path.with_suffix("") for path in library.glob("*.py") if path.name != "__init__.py"]
    return sorted(".".join(p.relative_to(library).parts) for p in [*packages, *tops])


def missing_from_picture(root: Path) -> list[str]:
    drawn = picture((root / "docs" / "architecture.md").read_text("utf-8"))
    return [
        f"valis_core.{part}" for part in library_parts(root / "src")
        if not re.search(rf"(?<![\w.]){re.escape(part)}(?!\w)", drawn)
    ]


def test_every_module_the_documentation_names_exists() -> None:
    assert stale_names(ROOT) == []


def test_the_architecture_picture_names_every_package_and_top_level_module() -> None:
    assert missing_from_picture(ROOT) == []


def test_the_names_read_are_those_in_code_and_only_ours() -> None:
    text = (
        "Prose names valis_core.not_code; `valis_core.dns.wire` and `fulcrum.bind` are.\n"
        "A path `docs/fulcrum.md`, `/etc/fulcrum/launcher.toml`, `valis_corex.y` is not.\n"
        "Nor a file: `fulcrum.md`, `valis_core.py`.\n"
        "```text\n  valis_cli.main ──► valis_core.launch\n```\n"
        "`valis_core.resident.bring_up.STAGES` (`valis_core`)\n"
    )
    assert dotted_names(text) == [
        "valis_cli.main", "valis_core.launch", "valis_core.dns.wire", "fulcrum.bind",
        "valis_core.resident.bring_up.STAGES", "valis_core",
    ]


def _tree(root: Path) -> None:
    files = {
        "src/valis_core/__init__.py": "from valis_core.errors import ValisError\n",
        "src/valis_core/errors.py": "class ValisError(Exception):\n    exit_status = 1\n",
        "src/valis_core/room/__init__.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from valis_core.room.door import Door\n"
            "__all__ = ['Door', 'Lazy']\n"
        ),
        "src/valis_core/room/door.py": "class Door:\n    def open(self): ...\nSIZE: int = 2\n",
        "src/valis_core/room/_fast.c": "",
        "docs/architecture.md": "# A\n\n## The picture\n\n```text\nroom  errors\n```\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


RESOLVED = (
    "valis_core", "valis_core.ValisError", "valis_core.errors.ValisError.exit_status",
    "valis_core.room", "valis_core.room.Door", "valis_core.room.Lazy",
    "valis_core.room.door.SIZE", "valis_core.room.door.Door.open", "valis_core.room._fast",
)


@pytest.mark.parametrize("name", RESOLVED)
def test_a_module_or_a_name_it_defines_resolves(tmp_path: Path, name: str) -> None:
    _tree(tmp_path)
    assert unresolved(name, tmp_path / "src") is None


STALE = (
    ("valis_core.hall", "valis_core has no module or name hall"),
    ("valis_core.room.window", "valis_core.room has no module or name window"),
    ("valis_core.room.door.hinge", "valis_core.room.door defines no hinge"),
    ("valis_core.room.door.WIDTH", "valis_core.room.door defines no WIDTH"),
    ("valis_core.room.door.Door.close", "valis_core.room.door.Door has no close"),
    ("fulcrum.bind", "no such module"),
)


@pytest.mark.parametrize(("name", "why"), STALE)
def test_a_name_that_is_nowhere_is_reported_with_its_document(
    tmp_path: Path, name: str, why: str
) -> None:
    _tree(tmp_path)
    (tmp_path / "README.md").write_text(f"| `{name}` | gone |\n")
    assert stale_names(tmp_path) == [f"README.md: {name}: {why}"]


def test_a_package_or_top_level_module_left_out_of_the_picture_is_reported(
    tmp_path: Path,
) -> None:
    _tree(tmp_path)
    assert missing_from_picture(tmp_path) == []
    (tmp_path / "src/valis_core/hall").mkdir()
    (tmp_path / "src/valis_core/hall/__init__.py").write_text("")
    (tmp_path / "src/valis_core/lamp.py").write_text("")
    assert missing_from_picture(tmp_path) == ["valis_core.hall", "valis_core.lamp"]

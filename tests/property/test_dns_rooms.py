"""The DNS engine's rooms, read from the source's import graph (ast: nothing imported).

``valis_core.dns`` is six rooms, one concept each: ``wire`` (names, records, master
files), ``zone`` (the index, its build, patch, check, diff and serial), ``dnssec``,
``answer``, ``transfer`` and ``serve``. The rules:

- a room imports only the rooms before it in that order, never one after it;
- no module of the engine imports another's private module or private name, except
  within its own room (a room's face, ``__init__``, and its public modules are its
  doors; its ``_x`` modules and ``_x`` names are its own);
- no circle among the engine's modules, counting every import (also those under
  ``TYPE_CHECKING`` and inside functions);
- the engine reaches no higher layer (operator state, the resident): settings come in
  as values.

Each rule is also shown to fail on a synthetic module that breaks it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.property.test_layering import Edge, import_graph, module_name, modules

SRC = Path(__file__).resolve().parents[2] / "src"
ENGINE = "valis_core.dns"
ROOMS = ("wire", "zone", "dnssec", "answer", "transfer", "serve")
"""In order: a room imports only those before it."""
BELOW = frozenset({"valis_core.errors", "valis_core.face", "valis_core.atomic",
                   "valis_core.state_layout", "valis_core.fence"})
"""What the engine may import from the rest of ``valis_core``: the library's base."""


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["valis_core", "dns"] and len(parts) > 2 and parts[2] in ROOMS:
        return parts[2]
    return None


def private_home(module: str) -> str | None:
    """The package whose own business ``module`` is, if it is private (``a.b._c.d``: a.b)."""
    parts = module.split(".")
    for at, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:at])
    return None


def private_names(root: Path) -> Iterator[tuple[str, str, str]]:
    """``(importer, module, name)`` for every ``from module import _name``."""
    for path in root.rglob("*.py"):
        importer = module_name(path, root)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        yield importer, node.module, alias.name


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def violations(root: Path) -> list[str]:
    known = modules(root)
    edges = [e for e in import_graph(root) if e.imported in known and e.importer != e.imported]
    engine = [e for e in edges if e.importer.startswith(ENGINE + ".")]
    found = []
    for edge in sorted(engine, key=lambda e: (e.importer, e.imported)):
        found += _edge_violations(edge)
    for importer, module, name in sorted(private_names(root)):
        if importer.startswith(ENGINE + ".") and room_of(importer) != room_of(module):
            found.append(f"{importer} imports the private name {name} of {module}")
    inner = [(e.importer, e.imported) for e in engine if e.imported.startswith(ENGINE)]
    found += [f"a circle among {', '.join(circle)}" for circle in cycles(inner)]
    return found


def _edge_violations(edge: Edge) -> Iterator[str]:
    a, b = edge.importer, edge.imported
    mine, theirs = room_of(a), room_of(b)
    if mine and theirs and ROOMS.index(theirs) > ROOMS.index(mine):
        yield f"{a} imports {b}, a room after its own ({theirs} after {mine})"
    home = private_home(b)
    if home is not None and not (a == home or a.startswith(home + ".")):
        yield f"{a} imports {b}, private to {home}"
    if b.startswith("valis_core.") and not b.startswith(ENGINE) and b not in BELOW:
        yield f"{a} imports {b}, above the engine"


def test_the_engine_keeps_its_rooms() -> None:
    for room in ROOMS:
        assert (SRC / "valis_core" / "dns" / room / "__init__.py").is_file()
    assert violations(SRC) == []


BREAKERS = (
    ("valis_core/dns/wire/names.py", "from valis_core.dns.zone import ZoneIndex\n",
     "a room after its own"),
    ("valis_core/dns/transfer/journal.py", "from valis_core.dns.answer import _answer\n",
     "private to valis_core.dns.answer"),
    ("valis_core/dns/transfer/journal.py", "from valis_core.dns.answer.message import _HEAD\n",
     "the private name _HEAD"),
    ("valis_core/dns/serve/rrl.py", "from valis_core.operator_state import site_facts\n",
     "above the engine"),
    ("valis_core/dns/zone/build.py", "from valis_core.dns.zone import check\n",
     "a circle among"),
)


@pytest.mark.parametrize(("path", "text", "rule"), BREAKERS)
def test_each_rule_fails_on_a_module_that_breaks_it(
    tmp_path: Path, path: str, text: str, rule: str
) -> None:
    # A small engine: each room's face, a module per room, and zone.check importing
    # zone.build as the real one does (so build importing check closes a circle).
    skeleton = {
        **{f"valis_core/dns/{room}/__init__.py": "" for room in ROOMS},
        "valis_core/dns/__init__.py": "",
        "valis_core/__init__.py": "",
        "valis_core/operator_state/__init__.py": "",
        "valis_core/operator_state/site_facts.py": "",
        "valis_core/dns/wire/names.py": "",
        "valis_core/dns/zone/build.py": "",
        "valis_core/dns/zone/check.py": "from valis_core.dns.zone import build\n",
        "valis_core/dns/answer/_answer.py": "",
        "valis_core/dns/answer/message.py": "_HEAD = 1\n",
        "valis_core/dns/transfer/journal.py": "",
        "valis_core/dns/serve/rrl.py": "",
    }
    skeleton[path] = skeleton.get(path, "") + text
    for name, content in skeleton.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    found = violations(tmp_path)
    assert found, f"{path} breaks a rule and nothing noticed"
    assert any(rule in line for line in found), found

"""The layering rules, read from the source's import graph (ast: nothing is imported).

- A pure core imports no IO module: it takes values and returns values, so a test of it
  needs no fixture and the hot path pays for no IO it does not do.
- ``valis_core`` never imports the programs built on it (``valis_cli``, ``fulcrum``).
- ``fulcrum``, the privileged launcher, never imports the resident, nor the ``valis``
  program.
- Nothing imports upward into ``valis_core.ops`` (the verbs sit on top of the library).

Each rule is also shown to fail on a synthetic module that breaks it, so a rule that
cannot fail is found out here rather than trusted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

PURE_CORES = (
    "valis_core.launch",
    "valis_core.fence",
    "valis_core.store.manifest",
    "valis_core.state_layout",
    "valis_core.operator_state.site_facts",
    "valis_core.launcher_config",
    "valis_core.reachability",
    "valis_core.dns.wire.names",
    "valis_core.dns.answer._answer",
    "valis_core.dns.answer._lookup",
    "valis_core.dns.answer._cache",
    "valis_core.dns.answer.message",
    "valis_core.dns.serve.rrl",
    "valis_core.dns.dnssec.signing",
    "valis_core.dns.answer.signed",
    "valis_core.dns.dnssec.nsec3",
    "valis_core.dns.dnssec.rollover",
    "valis_core.dns.transfer.signed",
    "valis_core.dns.transfer.journal",
    "valis_core.dns.zone.serial",
    "valis_core.dns.transfer._transfer",
    "valis_core.dns.transfer.tsig_verdict",
    "valis_core.dns.transfer.notify",
    "valis_core.dns.transfer.secondary_progress",
    "valis_core.dns.zone.check",
    "valis_core.dns.zone.diff",
    "valis_core.ops.condense",
    "valis_core.ops.host_readiness",
    "valis_core.ops.public_network",
    "valis_core.ops.provision",
    "valis_core.operator_state.peer_access",
    "valis_core.owner.message",
    "valis_core.owner.update",
    "valis_core.plugin.simple_index",
    "valis_core.push_protocol",
    "valis_core.edge.renewal",
    "valis_core.edge.acme_order",
    "valis_core.edge.doh",
    "valis_core.edge.exchange",
    "valis_core.edge.bounds",
)
"""The pure cores the design names (argv parsing, fence transitions, manifest, site-facts
rendering, launcher-config validation, DNS answering), the state directory's layout, and
the planners beside them. Their IO shells sit beside them (``store.head`` reads and
writes the manifest ``store.manifest`` parses; ``site_facts_file`` writes what
``site_facts`` renders)."""

IO_MODULES = frozenset({
    "socket", "trio", "psycopg", "subprocess", "pyroute2", "os", "shutil", "tempfile",
    "fcntl", "select", "selectors", "urllib.request", "http", "valis_core.atomic",
})
"""Modules whose import means doing IO (``pathlib`` is allowed: a path is a value)."""


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


def import_graph(root: Path) -> set[Edge]:
    edges = set()
    for path in root.rglob("*.py"):
        name = module_name(path, root)
        for imported in imports_of(name, path.read_text(), package=path.name == "__init__.py"):
            edges.add(Edge(name, imported))
    return edges


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(edges: Iterable[Edge], known: set[str]) -> list[str]:
    found = []
    for edge in sorted(edges, key=lambda e: (e.importer, e.imported)):
        a, b = edge.importer, edge.imported
        if a in PURE_CORES and any(within(b, io) for io in IO_MODULES):
            found.append(f"pure core {a} imports the IO module {b}")
        if within(a, "valis_core") and (within(b, "valis_cli") or within(b, "fulcrum")):
            found.append(f"the library module {a} imports the program {b}")
        if within(a, "fulcrum") and within(b, "valis_core.resident"):
            found.append(f"the launcher module {a} imports the resident's {b}")
        if within(a, "fulcrum") and within(b, "valis_cli"):
            found.append(f"the launcher module {a} imports the valis program's {b}")
        if (
            within(b, "valis_core.ops")
            and b in known
            and not within(a, "valis_core.ops")
            and not within(a, "valis_cli")
        ):
            found.append(f"{a} imports upward into the ops layer ({b})")
    return found


def test_the_source_keeps_the_layering_rules() -> None:
    edges = import_graph(SRC)
    known = modules(SRC)
    for core in PURE_CORES:
        assert core in known, f"{core} is listed as a pure core but does not exist"
    assert violations(edges, known) == []


BREAKERS = (
    ("valis_core/fence.py", "import socket\n", "imports the IO module socket"),
    ("valis_core/dns/wire/names.py", "from valis_cli.main import main\n", "imports the program"),
    ("fulcrum/launch.py", "from valis_core.resident import bring_up\n", "the resident's"),
    ("fulcrum/main.py", "from valis_cli import main\n", "the valis program's"),
    ("valis_core/store/manifest.py", "from ..ops import backup\n", "upward into the ops"),
)


@pytest.mark.parametrize(("path", "text", "rule"), BREAKERS)
def test_each_rule_fails_on_a_module_that_breaks_it(
    tmp_path: Path, path: str, text: str, rule: str
) -> None:
    for name in ("valis_core/ops/__init__.py", "valis_core/ops/backup.py", path):
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text if name == path else "")
    edges = import_graph(tmp_path)
    found = violations(edges, modules(tmp_path))
    assert found, f"{path} breaks a rule and nothing noticed"
    assert all(rule in line and module_name(tmp_path / path, tmp_path) in line
               for line in found), found

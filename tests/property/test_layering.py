"""The layering rules, read from the source's import graph (ast: nothing is imported).

- A pure core imports no IO module: it takes values and returns values, so a test of it
  needs no fixture and the hot path pays for no IO it does not do.
- ``valis_core`` never imports the programs built on it (``valis_cli``, ``fulcrum``).
- ``fulcrum``, the privileged launcher, never imports the resident, nor the ``valis``
  program; nor does its unprivileged stand-in ``valis_core.dev_launcher``.
- ``valis_cli`` never imports ``fulcrum``: the two programs share only the library.
- The resident is a program on the library too: nothing else in ``valis_core`` imports
  it, but the boot interface (``BOOT_INTERFACE``). What a stopped resident leaves for
  others to read (the fenced-out verdict) is the library's (``valis_core.fence_verdict``).
- Nothing imports upward into ``valis_core.ops`` (the verbs sit on top of the library).
- No import cycle between modules, anywhere in ``src``: every import counts (inside a
  function or under ``TYPE_CHECKING`` too), and ``from P import x`` reads the package's
  ``__init__``, so it is an edge to ``P`` (and to ``P.x`` when that is a module);
  ``import P.x`` and ``from P.x import y`` are edges to ``P.x`` alone; a package face's
  ``lazy_attributes`` homes are edges too.
- The layers docs/architecture.md draws (``LAYERS``): a module imports only from its
  own layer and those below it, the DNS engine's rooms among them in their order (wire,
  zone, dnssec, answer, transfer, serve), but for ``valis_core.boot`` naming the
  resident's parts it carries.
- A private name (``_y``) or a private module (``_x``) is used only inside its own
  package (trio's ``_core`` pattern: the modules of one package share their insides);
  from anywhere else, ``from x import _y``, ``x._y`` on an imported module, and
  ``import P._x`` are refused. The compiled fast path ``valis_core.dns.answer._fastpath`` is
  such a private module.

Each rule is also shown to fail on a synthetic module that breaks it, so a rule that
cannot fail is found out here rather than trusted.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
import pytest

from tests.import_graph import Edge, import_graph, module_name, modules

SRC = Path(__file__).resolve().parents[2] / "src"

PURE_CORES = (
    "valis_core.launch",
    "valis_core.fence",
    "valis_core.store.manifest",
    "valis_core.documents",
    "valis_core.state_layout",
    "valis_core.log_throttle",
    "valis_core.operator_state.site_facts",
    "valis_core.launcher_config",
    "valis_core.reachability",
    "valis_core.dns.wire.names",
    "valis_core.dns.wire.records",
    "valis_core.dns.wire._reading",
    "valis_core.dns.wire.master",
    "valis_core.dns.wire.master_general",
    "valis_core.dns.zone._index",
    "valis_core.dns.zone._served",
    "valis_core.dns.zone.build",
    "valis_core.dns.zone._patch",
    "valis_core.dns.answer._lookup",
    "valis_core.dns.answer.message",
    "valis_core.dns.answer.snapshot",
    "valis_core.dns.dnssec.zone_servable",
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
    "valis_core.dns.zone.catalog",
    "valis_core.ops.condense",
    "valis_core.ops.host_readiness",
    "valis_core.ops.host_probe",
    "valis_core.ops.assessment",
    "valis_core.ops.database_readiness",
    "valis_core.ops.public_network",
    "valis_core.ops.provision",
    "valis_core.operator_state.peer_access",
    "valis_core.operator_state.tls_access",
    "valis_core.operator_state.tls_material",
    "valis_core.ops.backup_manifest",
    "valis_core.owner.replay",
    "valis_core.plugin.wheel",
    "valis_core.resident.metrics",
    "fulcrum.activation",
    "fulcrum.exec_chain",
    "fulcrum.ruleset",
    "fulcrum.respawn",
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
rendering, launcher-config validation, DNS answering), the state directory's layout, the
planners beside them, and every module that says it is pure (values in, values out: the
DNS engine's wire, zone and answer modules, the TLS and pg_hba text, a wheel's check, the
metrics text, the launcher's activation, exec chain and ruleset). Their IO shells sit
beside them (``store.head`` reads and writes the manifest ``store.manifest`` parses;
``site_facts_file`` writes what ``site_facts`` renders)."""

IO_MODULES = frozenset({
    "socket", "trio", "psycopg", "subprocess", "pyroute2", "os", "shutil", "tempfile",
    "fcntl", "select", "selectors", "urllib.request", "http", "valis_core.atomic",
})
"""Modules whose import means doing IO (``pathlib`` is allowed: a path is a value)."""


LAUNCHER_SIDE = ("fulcrum", "valis_core.dev_launcher")
"""The launcher and its stand-in: they hand the resident its descriptors and argv
(``valis_core.launch``), and import nothing of it."""

BOOT_INTERFACE = "valis_core.boot"
"""What a bring-up stage sees (``Boot``, ``Stage``, the stage errors). Stage bodies live
in their concepts' rooms (``edge.stages``, ``owner.terminus_stage``, ``plugin.modules``)
and import this module, never the resident; it names the resident's parts the boot
carries (the views, the fence watch, the notifier ...) for the type checker, so it alone
may import them."""


LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the programs", ("valis_cli", "fulcrum")),
    ("the verbs and the resident", ("valis_core.ops", "valis_core.resident")),
    ("the rooms over operator state", (
        BOOT_INTERFACE, "valis_core.edge", "valis_core.owner.terminus",
        "valis_core.owner.terminus_stage", "valis_core.plugin", "valis_core.apply",
        "valis_core.config_store", "valis_core.dev_launcher",
    )),
    ("operator state", ("valis_core.operator_state",)),
    ("the cores", ("valis_core.owner", "valis_core.store", "valis_core.identity")),
    ("the serve room", ("valis_core.dns.serve",)),
    ("the transfer room", ("valis_core.dns.transfer",)),
    ("the answer room", ("valis_core.dns.answer",)),
    ("the dnssec room", ("valis_core.dns.dnssec",)),
    ("the zone room", ("valis_core.dns.zone", "valis_core.dns")),
    ("the wire room", ("valis_core.dns.wire",)),
    ("the foundation", ("valis_core",)),
)
"""docs/architecture.md's picture, top to bottom: each module is in the layer of the
longest prefix naming it (``valis_core.owner.terminus`` above operator state, the rest of
``valis_core.owner`` below it; the engine's face ``valis_core.dns`` with the zone room,
whose names it re-exports)."""


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``module``'s layer."""
    best, length = len(LAYERS) - 1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if within(module, prefix) and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module in a layer above the importer's (``LAYERS``)."""
    found = []
    for importer in sorted(graph):
        for imported in sorted(graph[importer]):
            if layer_of(imported) >= layer_of(importer):
                continue
            if importer == BOOT_INTERFACE and within(imported, "valis_core.resident"):
                continue
            found.append(
                f"{importer} ({LAYERS[layer_of(importer)][0]}) imports {imported}, "
                f"in a layer above it ({LAYERS[layer_of(imported)][0]})"
            )
    return found


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
        launcher_side = any(within(a, side) for side in LAUNCHER_SIDE)
        if launcher_side and within(b, "valis_core.resident"):
            found.append(f"the launcher module {a} imports the resident's {b}")
        if within(a, "fulcrum") and within(b, "valis_cli"):
            found.append(f"the launcher module {a} imports the valis program's {b}")
        if within(a, "valis_cli") and within(b, "fulcrum"):
            found.append(f"the valis program's {a} imports the launcher's {b}")
        if (
            within(a, "valis_core")
            and not within(a, "valis_core.resident")
            and a != BOOT_INTERFACE
            and not launcher_side
            and within(b, "valis_core.resident")
        ):
            found.append(f"the library module {a} reaches into the resident ({b})")
        if (
            within(b, "valis_core.ops")
            and b in known
            and not within(a, "valis_core.ops")
            and not within(a, "valis_cli")
        ):
            found.append(f"{a} imports upward into the ops layer ({b})")
    return found




@attrs.frozen
class Private:
    """``user`` uses ``what``: a private module, or a private name ``module._y``."""

    user: str
    what: str
    owner: str | None
    """The package whose modules may use it: a private module's package, and for a
    private name the package of its module when that module is itself private (the
    package's insides, as trio's ``_core``); ``None`` when the name is private to a
    public module, which shares it with nobody."""


def _base(name: str, node: ast.ImportFrom, *, package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def module_imports(name: str, tree: ast.AST, known: set[str], *, package: bool) -> set[str]:
    """The modules of ``known`` that ``name`` imports (see the module's docstring)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _base(name, node, package=package)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "lazy_attributes"
            and len(node.args) == 2
            and isinstance(node.args[1], ast.Dict)
        ):
            # A package face's names, imported from their homes on first use.
            found.update(
                home.value for home in node.args[1].values
                if isinstance(home, ast.Constant) and isinstance(home.value, str)
            )
    return {module for module in found if module in known and module != name}


def module_graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    graph = {}
    for path in root.rglob("*.py"):
        name = module_name(path, root)
        tree = ast.parse(path.read_text())
        graph[name] = module_imports(name, tree, known, package=path.name == "__init__.py")
    return graph


def knots(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
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
    return sorted(found)


def a_cycle(graph: dict[str, set[str]], knot: list[str]) -> list[str]:
    """A shortest cycle through the knot's first module, as its list of modules."""
    inside = set(knot)
    first = knot[0]
    came_from: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & inside):
            if nxt == first:
                path = [node]
                while path[-1] != first:
                    path.append(came_from[path[-1]])
                return [*reversed(path), first]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{knot} is not a cycle")


def cycles(root: Path) -> list[str]:
    graph = module_graph(root)
    return [
        f"import cycle: {' -> '.join(a_cycle(graph, knot))} (all of it: {', '.join(knot)})"
        for knot in knots(graph)
    ]


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _parent(module: str) -> str:
    return module.rpartition(".")[0]


def _is_module(module: str, root: Path) -> bool:
    """Whether ``module`` is a module under ``root`` (a compiled one included)."""
    path = root.joinpath(*module.split("."))
    return path.is_dir() or any(path.parent.glob(f"{path.name}.*"))


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_uses(name: str, tree: ast.AST, known: set[str], root: Path, *, package: bool
                 ) -> Iterator[Private]:
    """The private names and modules of this project that ``name`` uses."""
    ours = {module.split(".")[0] for module in known}
    bound: dict[str, str] = {}  # a local name -> the module it is bound to

    def private_module(module: str) -> Iterator[Private]:
        parts = module.split(".")
        if parts[0] not in ours:
            return
        for depth, part in enumerate(parts):
            if _private(part):
                yield Private(name, module, ".".join(parts[:depth]))
                return

    def private_name(module: str, attribute: str) -> Private:
        owner = _parent(module) if _private(module.rpartition(".")[2]) else None
        return Private(name, f"{module}.{attribute}", owner)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from private_module(alias.name)
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            module = _base(name, node, package=package)
            yield from private_module(module)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                if module.split(".")[0] in ours and _is_module(sub, root):
                    yield from private_module(sub)
                    bound[alias.asname or alias.name] = sub
                elif _private(alias.name) and module in known:
                    yield private_name(module, alias.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or isinstance(node.ctx, ast.Store):
            continue
        parts = _dotted(node)
        if not parts or parts[0] not in bound:
            continue
        module, rest = bound[parts[0]], parts[1:]
        while rest and f"{module}.{rest[0]}" in known:
            module = f"{module}.{rest.pop(0)}"
        if module in known and len(rest) == 1 and _private(rest[0]):
            yield private_name(module, rest[0])


def private_violations(root: Path) -> list[str]:
    known = modules(root)
    found = set()
    for path in root.rglob("*.py"):
        name = module_name(path, root)
        is_package = path.name == "__init__.py"
        home = name if is_package else _parent(name)
        for use in private_uses(name, ast.parse(path.read_text()), known, root,
                                package=is_package):
            if use.owner == home:
                continue
            whose = use.owner or _parent(use.what)
            found.add(f"{name} uses {use.what}, private to {whose}")
    return sorted(found)


def test_no_module_is_in_an_import_cycle() -> None:
    assert cycles(SRC) == []


def test_no_module_uses_another_package_s_private_names() -> None:
    assert private_violations(SRC) == []


def test_every_import_keeps_to_the_architecture_pictures_layers() -> None:
    assert layer_violations(module_graph(SRC)) == []


LAYER_BREAKERS = (
    pytest.param("valis_core/dns/wire/names.py", "from valis_core.dns.zone import ZoneIndex\n",
                 "the wire room", "the zone room", id="a-room-imports-a-later-room"),
    pytest.param("valis_core/dns/answer/message.py", "from valis_core.dns import serve\n",
                 "the answer room", "the serve room", id="through-a-room-s-face"),
    pytest.param("valis_core/store/head.py", "import valis_core.operator_state.zones\n",
                 "the cores", "operator state", id="a-core-imports-operator-state"),
    pytest.param("valis_core/operator_state/zones.py", "from valis_core.edge import doh\n",
                 "operator state", "the rooms over operator state", id="state-imports-a-room"),
    pytest.param("valis_core/fence.py", "def f():\n    from valis_core.dns.wire import names\n",
                 "the foundation", "the wire room", id="inside-a-function"),
)


@pytest.mark.parametrize(("path", "text", "layer", "above"), LAYER_BREAKERS)
def test_an_import_up_the_layers_is_reported(
    tmp_path: Path, path: str, text: str, layer: str, above: str
) -> None:
    write_tree(tmp_path, {
        "valis_core/__init__.py": "",
        "valis_core/fence.py": "",
        "valis_core/dns/__init__.py": "",
        "valis_core/dns/wire/__init__.py": "",
        "valis_core/dns/wire/names.py": "",
        "valis_core/dns/zone/__init__.py": "",
        "valis_core/dns/answer/__init__.py": "",
        "valis_core/dns/answer/message.py": "",
        "valis_core/dns/serve/__init__.py": "",
        "valis_core/store/__init__.py": "",
        "valis_core/store/head.py": "",
        "valis_core/operator_state/__init__.py": "",
        "valis_core/operator_state/zones.py": "",
        "valis_core/edge/__init__.py": "",
        "valis_core/edge/doh.py": "",
        path: text,
    })
    found = layer_violations(module_graph(tmp_path))
    name = module_name(tmp_path / path, tmp_path)
    assert found, f"{path} imports up the layers and nothing noticed"
    assert all(line.startswith(f"{name} ({layer}) imports ") and f"({above})" in line
               for line in found), found


def test_the_boot_interface_alone_names_the_resident_s_parts(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "valis_core/__init__.py": "",
        "valis_core/boot.py": "from valis_core.resident.views import NodeViews\n",
        "valis_core/edge/__init__.py": "",
        "valis_core/edge/stages.py": "from valis_core.resident.views import NodeViews\n",
        "valis_core/resident/__init__.py": "",
        "valis_core/resident/views.py": "",
    })
    assert layer_violations(module_graph(tmp_path)) == [
        "valis_core.edge.stages (the rooms over operator state) imports valis_core.resident.views, "
        "in a layer above it (the verbs and the resident)",
    ]


def test_the_source_keeps_the_layering_rules() -> None:
    edges = import_graph(SRC)
    known = modules(SRC)
    for core in PURE_CORES:
        assert core in known, f"{core} is listed as a pure core but does not exist"
    assert violations(edges, known) == []


BREAKERS = (
    ("valis_core/fence.py", "import socket\n", "imports the IO module socket"),
    ("valis_core/log_throttle.py", "import trio\n", "imports the IO module trio"),
    ("valis_core/dns/wire/names.py", "from valis_cli.main import main\n", "imports the program"),
    ("fulcrum/launch.py", "from valis_core.resident import bring_up\n", "the resident's"),
    ("fulcrum/main.py", "from valis_cli import main\n", "the valis program's"),
    ("valis_core/store/manifest.py", "from ..ops import backup\n", "upward into the ops"),
    ("valis_core/dev_launcher.py", "from valis_core.resident.state_dir import FLAG\n",
     "the launcher module valis_core.dev_launcher imports the resident's"),
    ("valis_cli/commands/provision.py", "from fulcrum.provisioning import produce_config\n",
     "imports the launcher's fulcrum.provisioning"),
    ("valis_core/ops/condense_host.py",
     "from valis_core.resident.config_store import store_path\n", "reaches into the resident"),
    ("valis_core/plugin/load_probe.py", "from ..resident import modules\n",
     "reaches into the resident"),
    ("valis_core/ops/backup.py", "from valis_core.resident.fence_verdict import read_verdict\n",
     "reaches into the resident"),
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


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


CYCLE_BREAKERS = (
    pytest.param({
        "valis_core/__init__.py": "",
        "valis_core/alpha.py": "def f():\n    from valis_core import beta\n",
        "valis_core/beta.py": "from valis_core.alpha import f\n",
    }, ["valis_core.alpha", "valis_core.beta"], id="inside-a-function"),
    pytest.param({
        "valis_core/__init__.py": "",
        "valis_core/room/__init__.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from valis_core.room.door import Door\n"
        ),
        "valis_core/room/door.py": "from valis_core.room import hinge\n",
        "valis_core/room/hinge.py": "",
    }, ["valis_core.room", "valis_core.room.door"], id="through-a-package-init"),
    pytest.param({
        "valis_core/__init__.py": "",
        "valis_core/one.py": "import valis_core.two\n",
        "valis_core/two.py": "from . import three\n",
        "valis_core/three.py": "from .one import x\n",
    }, ["valis_core.one", "valis_core.three", "valis_core.two"], id="three-modules"),
    pytest.param({
        "valis_core/__init__.py": "",
        "valis_core/face.py": "",
        "valis_core/room/__init__.py": (
            "from valis_core.face import lazy_attributes\n"
            "__getattr__ = lazy_attributes(__name__, {'Door': 'valis_core.room.door'})\n"
        ),
        "valis_core/room/door.py": "from valis_core.room import Hinge\n",
    }, ["valis_core.room", "valis_core.room.door"], id="through-a-lazy-face"),
)


@pytest.mark.parametrize(("files", "knot"), CYCLE_BREAKERS)
def test_a_cycle_is_reported_as_its_modules(
    tmp_path: Path, files: dict[str, str], knot: list[str]
) -> None:
    write_tree(tmp_path, files)
    found = cycles(tmp_path)
    assert len(found) == 1, found
    assert found[0].endswith(f"(all of it: {', '.join(knot)})"), found


def test_importing_a_package_s_submodule_by_its_full_name_is_no_cycle(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "valis_core/__init__.py": "",
        "valis_core/room/__init__.py": "from valis_core.room.door import Door\n",
        "valis_core/room/door.py": "import valis_core.room.hinge\nfrom .hinge import x\n",
        "valis_core/room/hinge.py": "",
    })
    assert cycles(tmp_path) == []


PRIVATE_BREAKERS = (
    ("valis_core/resident/user.py", "from valis_core.launch import _FLAGS\n",
     "valis_core.launch._FLAGS, private to valis_core.launch"),
    ("valis_core/resident/user.py", "from .. import launch\nlaunch._FLAGS.get('x')\n",
     "valis_core.launch._FLAGS, private to valis_core.launch"),
    ("valis_core/resident/user.py", "import valis_core.launch\nvalis_core.launch._read()\n",
     "valis_core.launch._read, private to valis_core.launch"),
    ("valis_core/resident/user.py", "from valis_core.dns._fastpath import Table\n",
     "valis_core.dns._fastpath, private to valis_core.dns"),
    ("valis_core/resident/user.py", "from valis_core.dns import _fastpath\n",
     "valis_core.dns._fastpath, private to valis_core.dns"),
    ("valis_core/ops/user.py", "from valis_core.room._inside import thing\n",
     "valis_core.room._inside, private to valis_core.room"),
    ("valis_core/room/user.py", "from valis_core.room.door import _hinge\n",
     "valis_core.room.door._hinge, private to valis_core.room.door"),
)


@pytest.mark.parametrize(("path", "text", "rule"), PRIVATE_BREAKERS)
def test_a_private_name_used_outside_its_package_is_reported(
    tmp_path: Path, path: str, text: str, rule: str
) -> None:
    write_tree(tmp_path, {
        "valis_core/__init__.py": "",
        "valis_core/launch.py": "_FLAGS = {}\n",
        "valis_core/dns/__init__.py": "",
        "valis_core/dns/_fastpath.c": "",
        "valis_core/dns/fastpath.py": "from valis_core.dns._fastpath import Table\n",
        "valis_core/room/__init__.py": "from ._inside import thing, _shared\n",
        "valis_core/room/_inside.py": "thing = _shared = 1\n",
        "valis_core/room/door.py": "from ._inside import _shared\n_hinge = 1\n",
        "valis_core/resident/__init__.py": "",
        "valis_core/ops/__init__.py": "",
        path: text,
    })
    name = module_name(tmp_path / path, tmp_path)
    assert private_violations(tmp_path) == [f"{name} uses {rule}"]


def test_a_package_s_modules_share_its_private_modules_and_their_names(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path, {
        "valis_core/__init__.py": "",
        "valis_core/room/__init__.py": "from ._inside import thing, _shared\n",
        "valis_core/room/_inside.py": "thing = _shared = 1\n",
        "valis_core/room/door.py": "from . import _inside\nprint(_inside._shared)\n",
        "valis_core/room/window.py": "from valis_core.room._inside import _shared\n",
    })
    assert private_violations(tmp_path) == []

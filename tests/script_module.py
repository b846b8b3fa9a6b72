"""Loading the repository's scripts (benchmarks/, packaging/frozen/) as modules: they are
run as files, not imported from a package, so a test loads one from its path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` as the module ``name`` (registered in ``sys.modules``);
    its directory goes on ``sys.path`` first, as when it is run, so the scripts beside it
    that it imports are found."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""One place reads the time: ``valis_core/clock.py``. Everything else in ``src`` takes
``now`` as a value (a pure core) or a clock parameter defaulting to one of that module's
functions (an IO shell), so a test can move time instead of waiting for it.

Read from the source with ast (nothing is imported). A read is a call of, or a reference
to, ``time.time``/``monotonic``/``perf_counter`` (and their ``_ns`` forms, and
``clock_gettime``), ``datetime.now``/``utcnow``/``today``, ``date.today``,
``trio.current_time``, the same names imported with ``from … import``, and the
``time`` functions that read the clock when given no time (``gmtime()``,
``localtime()``, ``ctime()``, ``asctime()``, ``strftime(format)``).

The rule is shown to fail on synthetic modules that break it, so a rule that cannot fail
is found out here rather than trusted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

CLOCK_MODULE = Path("valis_core/clock.py")

_TIME_READS = frozenset({
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
    "clock_gettime", "clock_gettime_ns",
})
_TIME_IMPLICIT = {"gmtime": 0, "localtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}
"""``time`` functions that read the clock when called with at most this many arguments."""
_DATETIME_READS = frozenset({"now", "utcnow", "today"})


def _bound(tree: ast.AST, module: str, names: tuple[str, ...] = ()) -> set[str]:
    """The names the module binds to ``module`` (``import module [as m]``), or, given
    ``names``, to those names of it (``from module import name [as n]``)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and not names:
            bound |= {alias.asname or alias.name for alias in node.names
                      if alias.name == module}
        elif isinstance(node, ast.ImportFrom) and node.module == module and names:
            bound |= {alias.asname or alias.name for alias in node.names
                      if alias.name in names}
    return bound


def _is_datetime_class(node: ast.expr, classes: set[str]) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in ("datetime", "date")
    return isinstance(node, ast.Name) and node.id in classes


def clock_reads(source: str) -> Iterator[tuple[int, str]]:
    """Each place ``source`` reads a clock: (line, what it reads)."""
    tree = ast.parse(source)
    time_module = _bound(tree, "time")
    trio_module = _bound(tree, "trio")
    classes = _bound(tree, "datetime", ("datetime", "date")) | {"datetime", "date"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (node.module == "time" and alias.name in _TIME_READS) or (
                    node.module == "trio" and alias.name == "current_time"
                ):
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in time_module and (
                node.attr in _TIME_READS
            ):
                yield node.lineno, f"time.{node.attr}"
            elif isinstance(base, ast.Name) and base.id in trio_module and (
                node.attr == "current_time"
            ):
                yield node.lineno, "trio.current_time"
            elif node.attr in _DATETIME_READS and _is_datetime_class(base, classes):
                yield node.lineno, f"datetime.{node.attr}"
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in time_module
                and func.attr in _TIME_IMPLICIT
                and len(node.args) + len(node.keywords) <= _TIME_IMPLICIT[func.attr]
            ):
                yield node.lineno, f"time.{func.attr} with no time given"


def offenders(root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative == CLOCK_MODULE:
            continue
        found.extend(f"{relative}:{line}: reads the clock directly ({what}); take `now` "
                     f"or a clock from valis_core.clock instead"
                     for line, what in clock_reads(path.read_text()))
    return found


def test_only_the_clock_module_reads_the_time() -> None:
    assert (SRC / CLOCK_MODULE).is_file()
    assert offenders(SRC) == []


BREAKERS = (
    "import time\nnow = time.time()\n",
    "import time\ndeadline = time.monotonic() + 5\n",
    "import time as t\nstamp = t.time_ns()\n",
    "import time\ndef f(clock=time.time):\n    return clock()\n",
    "from time import monotonic\n",
    "import datetime\nnow = datetime.datetime.now(datetime.UTC)\n",
    "from datetime import UTC, datetime\nnow = datetime.now(UTC)\n",
    "from datetime import date\ntoday = date.today()\n",
    "import trio\nasync def f():\n    return trio.current_time() + 1\n",
    "from trio import current_time\n",
    "import trio as t\nasync def f():\n    return t.current_time()\n",
    "from datetime import datetime as moment\nnow = moment.now()\n",
    "import datetime as dt\nnow = dt.datetime.utcnow()\n",
    "from time import time as epoch\n",
    "import time\naside = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())\n",
    "import time\nwhen = time.strftime('%H:%M')\n",
)


@pytest.mark.parametrize("text", BREAKERS)
def test_the_rule_fails_on_a_module_that_reads_the_clock(tmp_path: Path, text: str) -> None:
    (tmp_path / "valis_core").mkdir()
    (tmp_path / "valis_core" / "reader.py").write_text(text)
    (tmp_path / CLOCK_MODULE).write_text(text)  # the clock module itself may
    found = offenders(tmp_path)
    assert found, f"{text!r} reads the clock and nothing noticed"
    assert all(line.startswith("valis_core/reader.py:") for line in found), found


ALLOWED = (
    "import time\nstamp = time.strftime('%H:%M', time.gmtime(at))\n",
    "import time\ntime.sleep(0.1)\n",
    "from valis_core.clock import Clock, wall\ndef f(clock: Clock = wall) -> float:\n"
    "    return clock()\n",
    "import datetime\nwhen = datetime.datetime.fromtimestamp(at, datetime.UTC)\n",
    "def f(time):\n    return time.hour\n",
)


@pytest.mark.parametrize("text", ALLOWED)
def test_the_rule_passes_a_module_that_takes_its_time(tmp_path: Path, text: str) -> None:
    (tmp_path / "valis_core").mkdir()
    (tmp_path / "valis_core" / "reader.py").write_text(text)
    assert offenders(tmp_path) == []

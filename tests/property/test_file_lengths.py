"""No file in ``src`` is over ``MAX_LINES`` lines, but the C fast path (issue 26).

A module that grows past a page count is holding more than one concept; split it by
concept (a room of its own, or a private ``_x`` module behind the package's face) rather
than raise the limit. Every text file counts (Python, stubs, SQL migrations, C); a binary
(a built extension) has no lines to read. The compiled fast path is one translation unit
by design (``LONG_FILES``).

The rule is also shown to fail on a synthetic tree that breaks it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

MAX_LINES = 600

LONG_FILES = frozenset({"valis_core/dns/answer/_fastpath.c"})
"""Files under ``src`` allowed past ``MAX_LINES``: the C fast path, one translation unit."""

SKIPPED_DIRECTORIES = frozenset({"__pycache__"})


def text_files(root: Path) -> Iterator[tuple[str, bytes]]:
    """Every text file under ``root`` (its path relative to ``root``, and its bytes)."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(
            part in SKIPPED_DIRECTORIES or part.endswith(".egg-info") for part in relative.parts
        ):
            continue
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # a binary: a built extension module
        yield relative.as_posix(), data


def line_count(data: bytes) -> int:
    return len(data.splitlines())


def too_long(root: Path) -> list[str]:
    return [
        f"{name} has {line_count(data)} lines (at most {MAX_LINES}): split it by concept"
        for name, data in text_files(root)
        if name not in LONG_FILES and line_count(data) > MAX_LINES
    ]


def test_no_file_in_src_is_over_the_limit() -> None:
    assert too_long(SRC) == []


def test_each_long_file_allowed_exists() -> None:
    for name in LONG_FILES:
        assert (SRC / name).is_file(), f"{name} is allowed to be long but does not exist"


def lines(count: int) -> bytes:
    return b"".join(b"x = %d\n" % n for n in range(count))


@pytest.mark.parametrize(("name", "data", "reported"), [
    pytest.param("valis_core/room/door.py", lines(MAX_LINES + 1), True, id="module-over"),
    pytest.param("valis_core/room/door.py", lines(MAX_LINES), False, id="module-at-limit"),
    pytest.param("valis_core/room/door.py", lines(MAX_LINES) + b"x = 0", True,
                 id="last-line-unterminated"),
    pytest.param("valis_core/operator_state/migrations/0099_x.sql", lines(MAX_LINES + 1),
                 True, id="sql-over"),
    pytest.param("valis_core/dns/answer/_fastpath.c", lines(MAX_LINES + 1), False,
                 id="the-c-fast-path"),
    pytest.param("valis_core/dns/_fastpath.c", lines(MAX_LINES + 1), True,
                 id="another-c-file"),
    pytest.param("valis_core/dns/answer/_fastpath.so", b"\0" + lines(MAX_LINES + 1), False,
                 id="a-binary"),
    pytest.param("valis_core/room/__pycache__/door.cpython-311.pyc", lines(MAX_LINES + 1),
                 False, id="bytecode-cache"),
])
def test_a_file_over_the_limit_is_reported(
    tmp_path: Path, name: str, data: bytes, reported: bool
) -> None:
    (tmp_path / "valis_core" / "small.py").parent.mkdir(parents=True)
    (tmp_path / "valis_core" / "small.py").write_bytes(lines(3))
    target = tmp_path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    found = too_long(tmp_path)
    if reported:
        assert found == [
            f"{name} has {MAX_LINES + 1} lines (at most {MAX_LINES}): split it by concept"
        ]
    else:
        assert found == []

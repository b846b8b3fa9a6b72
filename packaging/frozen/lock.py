"""The build's lock: every distribution the build environment holds, pinned with hashes.

    python packaging/frozen/lock.py check

``packaging/frozen/requirements.lock`` pins the whole closure of ``pyproject.toml``'s
dependencies, its ``test`` and ``build`` extras and its build backend (setuptools,
wheel), each with the sha256 of every file PyPI publishes for that version. ``make venv``
installs ``.venv`` from it with hash checking, then valis itself with that pinned backend
and no build isolation, so what ``make build`` freezes does not depend on the day the
environment was made. ``make lock`` writes it again (``scripts/lock``: pip-compile from
PyPI, newest versions ``pyproject.toml`` allows); commit the result.

``check`` is what ``scripts/build`` runs with the interpreter it freezes: every pinned
distribution must be installed at its pinned version, or the build stops and says to run
``make venv``. (An installed distribution keeps no hash of the file it came from, so the
version is what can be checked here; the hashes were checked when it was installed.)
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Mapping
from pathlib import Path

LOCK = Path(__file__).resolve().with_name("requirements.lock")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """The ``name==version`` pins of a lock file, by normalised name."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            found[normalize(match.group(1))] = match.group(2)
    return found


def installed() -> dict[str, str]:
    """What the running interpreter holds, by normalised name."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(str(name)), dist.version)
    return found


def mismatches(pinned: Mapping[str, str], present: Mapping[str, str]) -> list[str]:
    """Each pin the environment does not hold, as one phrase."""
    problems = []
    for name, version in sorted(pinned.items()):
        have = present.get(name)
        if have is None:
            problems.append(f"{name} {version} is not installed")
        elif have != version:
            problems.append(f"{name} is {have}, the lock says {version}")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["check"]:
        print("lock: usage: python packaging/frozen/lock.py check", file=sys.stderr)
        return 2
    try:
        pinned = pins(LOCK.read_text("utf-8"))
    except OSError as exc:
        print(f"lock: cannot read {LOCK}: {exc.strerror or exc}; run `make lock`",
              file=sys.stderr)
        return 1
    problems = mismatches(pinned, installed())
    if problems:
        print(f"lock: {sys.prefix} does not hold what {LOCK.name} pins: "
              f"{'; '.join(problems)}; run `make venv`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two pytest sessions sharing the scenario tier, a module at a time.

``scripts/test`` runs the scenario tier in two sessions, one per core, both given the
same ``VALIS_TEST_QUEUE`` directory: each collects every module, and runs a module only
once it has claimed it, by creating the module's file in that directory (``O_EXCL``: the
first session to ask gets it). A session claims the next module just before the last
test of the one it is running, so pytest tears down a module's fixtures knowing which
test comes next, as in a plain run. Whichever session is free takes the next module, so
the two finish together however long each module takes; every module runs exactly once,
its tests in their usual order, in one session. Without ``VALIS_TEST_QUEUE`` pytest runs
every collected test as usual (``pytest FILE::TEST``, ``-k``, ``each-test-alone``).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

QUEUE = "VALIS_TEST_QUEUE"
# The modules this session has claimed (their node ids), for fixtures that start work
# for the tests to come (``frozen_builds``).
CLAIMED = pytest.StashKey[set[str]]()


def claimed_modules(config: pytest.Config) -> set[str] | None:
    """The modules this session has claimed so far, or None outside a shared queue."""
    return config.stash.get(CLAIMED, None)


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _modules(items: Sequence[pytest.Item]) -> list[tuple[str, list[pytest.Item]]]:
    """The collected items, grouped by module in collection order."""
    groups: list[tuple[str, list[pytest.Item]]] = []
    for item in items:
        module = module_of(item)
        if not groups or groups[-1][0] != module:
            groups.append((module, []))
        groups[-1][1].append(item)
    return groups


def _claim(queue: Path, module: str) -> bool:
    """Whether this session got ``module`` (False: the other session has it)."""
    name = hashlib.sha256(module.encode()).hexdigest()[:32]
    try:
        os.close(os.open(queue / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    where = os.environ.get(QUEUE)
    if not where or session.config.option.collectonly:
        return None  # pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    queue = Path(where)
    groups = _modules(session.items)
    claimed: set[str] = set()
    session.config.stash[CLAIMED] = claimed

    def next_group(after: int) -> int | None:
        for index in range(after + 1, len(groups)):
            if _claim(queue, groups[index][0]):
                claimed.add(groups[index][0])
                return index
        return None

    def run(item: pytest.Item, nextitem: pytest.Item | None) -> None:
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)

    current = next_group(-1)
    while current is not None:
        items = groups[current][1]
        for item, nextitem in itertools.pairwise(items):
            run(item, nextitem)
        current = next_group(current)  # claimed before the last test, for its teardown
        run(items[-1], None if current is None else groups[current][1][0])
    return True

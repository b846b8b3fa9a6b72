"""A fuzz campaign over the readers valis points at untrusted bytes.

Runs ``--inputs`` inputs (10^6 by default) spread evenly across the targets of
``tests/fuzz/targets.py``: most are mutants of the kept corpus (bit flips, boundary
bytes, truncation, insertion, splicing, length-field and tar-size edits), the rest are
built structure-aware by ``tests/fuzz/generate.py``. Everything is drawn from RNGs
seeded by ``--seed``, so a campaign is reproducible. Each target stops at its share of
inputs or at ``--seconds``, whichever comes first. A crashing input with a failure not
seen before is minimised and kept in the corpus (``corpus/pending/`` for the DNS
serving path, whose fixes are made there first), so ``make test`` replays it.

Run from the repository root:

    .venv/bin/python benchmarks/fuzz_campaign.py [--inputs N] [--seconds S] [--jobs J]
    .venv/bin/python benchmarks/fuzz_campaign.py --replay-pending

It reports, per target, the inputs run, the distinct failures found and executions per
second. These are figures, not a test: the findings are what matter.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz import corpus
from tests.fuzz.mutate import mutate
from tests.fuzz.runner import Finding, minimise, run_one
from tests.fuzz.targets import TARGETS

GENERATED_SHARE = 0.3
"""The fraction of inputs built structure-aware rather than mutated from the corpus."""
PENDING_TARGETS = frozenset({"answer", "tcp_framer"})
"""Targets whose findings are kept under corpus/pending/ until the serving path is fixed."""
CHUNKS_PER_TARGET = 4
SCRATCH_PARENT = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


Shrunk = dict[str, tuple[str, bytes]]
"""For each failure signature: its detail and the smallest input found to cause it."""


def _work(task: tuple[str, int, int, float]) -> tuple[str, int, float, dict[str, int], Shrunk]:
    """Run one chunk of a target's inputs: (target, inputs, seed, deadline). The seconds
    it reports are those spent running inputs, not shrinking what they found."""
    name, count, seed, deadline = task
    target = TARGETS[name]
    rng = random.Random(f"{seed}:{name}")
    pool = [data for _, data in corpus.load(name)] or [target.generate(rng)]
    found: Counter[str] = Counter()
    details: Shrunk = {}
    started = time.monotonic()
    shrinking = 0.0
    ran = 0
    with tempfile.TemporaryDirectory(dir=SCRATCH_PARENT) as scratch_name:
        scratch = Path(scratch_name)
        while ran < count and time.monotonic() < deadline:
            if rng.random() < GENERATED_SHARE:
                data = target.generate(rng)
            else:
                data = mutate(rng, rng.choice(pool), pool)
            finding = run_one(target, data, scratch)
            ran += 1
            if finding is None:
                continue
            found[finding.signature] += 1
            if found[finding.signature] == 1:
                before = time.monotonic()
                details[finding.signature] = (finding.detail, _shrink(finding, data, scratch))
                shrinking += time.monotonic() - before
    return name, ran, time.monotonic() - started - shrinking, dict(found), details


def _shrink(finding: Finding, data: bytes, scratch: Path) -> bytes:
    target = TARGETS[finding.target]

    def same(candidate: bytes) -> bool:
        again = run_one(target, candidate, scratch)
        return again is not None and again.signature == finding.signature

    return minimise(data, same)


def _keep(name: str, detail: str, data: bytes, save: bool) -> str:
    if not save:
        return f"{detail[:160]} ({len(data)} bytes, not kept)"
    path = corpus.save(name, data, pending=name in PENDING_TARGETS)
    return f"{detail[:160]} -> {path.relative_to(corpus.CORPUS.parent)} ({len(data)} bytes)"


def replay_pending(names: list[str]) -> None:
    """Run every pending input once: a fix of its reader turns FAIL into ok, and the
    input can then move into corpus/<target>/ to be replayed by make test."""
    with tempfile.TemporaryDirectory(dir=SCRATCH_PARENT) as scratch:
        for name in names:
            for file, data in corpus.load(name, pending=True):
                finding = run_one(TARGETS[name], data, Path(scratch))
                outcome = "ok" if finding is None else f"FAIL {finding.detail[:160]}"
                print(f"{name}/{file}: {outcome}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=3600.0, help="per target, at most")
    parser.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--no-save", action="store_true", help="keep nothing in the corpus")
    parser.add_argument(
        "--replay-pending", action="store_true",
        help="only run corpus/pending/ through its targets and say which inputs still fail",
    )
    args = parser.parse_args()
    if args.replay_pending:
        replay_pending(args.target or sorted(TARGETS))
        return

    names = args.target or sorted(TARGETS)
    share = args.inputs // len(names)
    deadline = time.monotonic() + args.seconds
    tasks = [
        (name, share // CHUNKS_PER_TARGET + (chunk < share % CHUNKS_PER_TARGET),
         args.seed * 1000 + chunk, deadline)
        for name in names
        for chunk in range(CHUNKS_PER_TARGET)
    ]
    # The slow targets first, so the fast ones fill in behind them.
    tasks.sort(key=lambda task: task[0] in ("answer", "tcp_framer", "owner_message"))
    ran: Counter[str] = Counter()
    busy: dict[str, float] = dict.fromkeys(names, 0.0)
    found: dict[str, Counter[str]] = {name: Counter() for name in names}
    smallest: dict[str, Shrunk] = {name: {} for name in names}
    started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for name, count, seconds, chunk_found, chunk_details in pool.imap_unordered(_work, tasks):
            ran[name] += count
            busy[name] += seconds
            found[name].update(chunk_found)
            for signature, (detail, data) in chunk_details.items():
                kept = smallest[name].get(signature)
                if kept is None or len(data) < len(kept[1]):
                    smallest[name][signature] = (detail, data)
    wall = time.monotonic() - started

    print(f"fuzz campaign: seed {args.seed}, {sum(ran.values())} inputs in {wall:.0f} s "
          f"wall on {args.jobs} processes")
    print(f"{'target':<15}{'inputs':>10}{'exec/s':>10}{'failures':>10}{'distinct':>10}")
    for name in names:
        rate = ran[name] / busy[name] if busy[name] else 0.0
        print(f"{name:<15}{ran[name]:>10}{rate:>10.0f}{sum(found[name].values()):>10}"
              f"{len(found[name]):>10}")
    for name in names:
        for signature, count in found[name].most_common():
            detail, data = smallest[name][signature]
            outcome = _keep(name, detail, data, not args.no_save)
            print(f"  {name}: {count} x {signature}\n      {outcome}")


if __name__ == "__main__":
    main()

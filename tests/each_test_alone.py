"""Run test ids one by one, each in its own pytest session: every test must pass alone.

``scripts/each-test-alone`` runs this. It collects the ids under the given paths
(``pytest --collect-only -q``; default ``tests/scenario``), then runs each by itself
(``pytest ID``), ``--jobs`` at a time, each bounded by ``--timeout`` (its whole process
group is killed past it). ``--sample K`` draws K ids at random, in random order, from a
seed that is printed (``--seed S`` repeats a draw). Each id's line is printed as it ends;
then the failures with the tail of what pytest said (the whole output is kept in
``--logs``), and a summary. The exit status is 1 when any id failed or timed out, 2 when
collection failed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import trio

REPO = Path(__file__).resolve().parents[1]
PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider")
COLLECT_TIMEOUT = 600
TAIL_LINES = 30


@attrs.frozen
class Outcome:
    """How one id ran alone: ``passed``, ``failed`` or ``timeout``, in ``seconds``."""

    test_id: str
    verdict: str
    seconds: float
    log: Path

    def line(self) -> str:
        return f"{self.verdict.upper():7} {self.seconds:7.1f} s  {self.test_id}"


def collect(paths: list[str]) -> list[str]:
    """The ids pytest collects under ``paths``, in its order."""
    done = subprocess.run(
        [*PYTEST, "--collect-only", "-q", *paths], cwd=REPO, capture_output=True,
        text=True, timeout=COLLECT_TIMEOUT, check=False,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line and " " not in
           line.split("::", 1)[0]]
    if done.returncode != 0 or not ids:
        raise SystemExit(f"each-test-alone: collection failed (exit {done.returncode}):\n"
                         f"{done.stdout[-4000:]}{done.stderr[-4000:]}")
    return ids


def draw(ids: list[str], sample: int | None, seed: int) -> list[str]:
    """``sample`` ids drawn at random in random order (all of them, in order, if None)."""
    if sample is None:
        return ids
    return random.Random(seed).sample(ids, min(sample, len(ids)))


def log_name(index: int, test_id: str) -> str:
    return f"{index:04d}-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", test_id)[-150:] + ".log"


async def run_one(test_id: str, log: Path, timeout: float) -> Outcome:
    """``pytest test_id`` in a session of its own, its output in ``log``."""
    started = time.monotonic()
    verdict = "timeout"

    async def kill_group(process: trio.Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    with log.open("wb") as out:
        with trio.move_on_after(timeout):
            done = await trio.run_process(
                [*PYTEST, "-q", test_id], cwd=REPO, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, check=False,
                start_new_session=True, deliver_cancel=kill_group,
            )
            verdict = "passed" if done.returncode == 0 else "failed"
    return Outcome(test_id, verdict, time.monotonic() - started, log)


async def run_all(ids: list[str], jobs: int, timeout: float, logs: Path) -> list[Outcome]:
    outcomes: list[Outcome] = []
    limiter = trio.CapacityLimiter(jobs)
    width = len(str(len(ids)))

    async def one(index: int, test_id: str) -> None:
        async with limiter:
            outcome = await run_one(test_id, logs / log_name(index, test_id), timeout)
        outcomes.append(outcome)
        print(f"[{len(outcomes):{width}}/{len(ids)}] {outcome.line()}", flush=True)

    async def stop_on_signal(cancel: trio.CancelScope) -> None:
        # SIGTERM or SIGINT: every running id's process group is killed (deliver_cancel),
        # not left behind in its own session.
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                print(f"each-test-alone: {signal.Signals(signum).name}: stopping",
                      flush=True)
                cancel.cancel()
                return

    async with trio.open_nursery() as outer:
        outer.start_soon(stop_on_signal, outer.cancel_scope)
        async with trio.open_nursery() as nursery:
            for index, test_id in enumerate(ids):
                nursery.start_soon(one, index, test_id)
        outer.cancel_scope.cancel()
    return outcomes


def tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join("    " + line for line in lines[-TAIL_LINES:])


def report(outcomes: list[Outcome], wall: float, seed: int | None, logs: Path) -> int:
    bad = [o for o in outcomes if o.verdict != "passed"]
    for outcome in bad:
        print(f"---- {outcome.verdict}: {outcome.test_id} ({outcome.log})")
        print(tail(outcome.log))
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("passed", "failed",
                                                                 "timeout")}
    drawn = "" if seed is None else f", drawn with --seed {seed}"
    print(f"each-test-alone: {len(outcomes)} ids{drawn}: {counts['passed']} passed alone, "
          f"{counts['failed']} failed, {counts['timeout']} timed out; wall "
          f"{math.ceil(wall)} s; logs in {logs}")
    for outcome in bad:
        print(f"  {outcome.verdict}: {outcome.test_id}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="each-test-alone", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=["tests/scenario"],
                        help="what to collect ids from (default tests/scenario)")
    parser.add_argument("--jobs", type=int, default=2, help="ids run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds one id may take (default 900)")
    parser.add_argument("--sample", type=int, help="draw this many ids at random")
    parser.add_argument("--seed", type=int, help="the draw's seed (default: a new one)")
    parser.add_argument("--logs", type=Path, help="where each id's output is kept "
                        "(default a new directory under /tmp)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0 or (args.sample is not None and args.sample < 1):
        parser.error("--jobs, --timeout and --sample must be positive")
    seed = None
    if args.sample is not None:
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
        print(f"each-test-alone: drawing {args.sample} ids with --seed {seed}", flush=True)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="valis-each-test-alone-"))
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    ids = draw(collect(args.paths), args.sample, seed if seed is not None else 0)
    print(f"each-test-alone: {len(ids)} ids, {args.jobs} at a time, {args.timeout:g} s "
          "each at most", flush=True)
    outcomes = trio.run(run_all, ids, args.jobs, args.timeout, logs)
    status = report(outcomes, time.monotonic() - started, seed, logs)
    if len(outcomes) < len(ids):
        print(f"each-test-alone: stopped after {len(outcomes)} of {len(ids)} ids")
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())

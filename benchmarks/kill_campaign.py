"""Kill campaign: every durable-writing verb SIGKILLed at random points, 200 times each.

For each verb (owner-seed mint, site-facts write, store-head write, backup create,
module install, zone import, apply, condense from genesis) a trial prepares a fresh
target holding the old version, starts the verb, SIGKILLs it after a delay drawn from a
seeded RNG over the verb's measured duration, checks that everything the verb writes is
absent, old or whole and new (read back with valis's own readers), runs the verb again
and checks it completes and sweeps any temporary the killed run left
(``tests/scenario/kill_trials``, which the scenario test ``test_kill_campaign.py`` runs a
handful of times per verb).

Needs root (a private PostgreSQL cluster, the ``valis`` run account). Prints one row per
verb: trials, kills that landed mid-verb, trials that found a partial or corrupt file
(or a temporary the re-run left, or a re-run that failed), re-runs completed,
temporaries the re-runs swept, and the verb's median uninterrupted duration.

    .venv/bin/python benchmarks/kill_campaign.py                    # 200 trials per verb
    .venv/bin/python benchmarks/kill_campaign.py --trials 20 --verb mint --verb apply
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenario.kill_trials import (
    VERB_NAMES,
    Tally,
    campaign,
    make_verb,
    table,
)
from tests.scenario.pg import RUN_USER, private_cluster

from valis_core.operator_state.schema import migrate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="per verb (default: 200)")
    parser.add_argument("--verb", action="append", choices=VERB_NAMES,
                        help="only these verbs (repeatable; default: all)")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--budget", type=float, default=900.0,
                        help="seconds per verb; fewer trials run if it runs out (default: 900)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="verbs run at once, each in its own process (default: 2)")
    parser.add_argument("--show", type=int, default=5,
                        help="problems to print per verb (default: 5)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root: the campaign needs a private cluster and the run account")
    names = args.verb or list(VERB_NAMES)
    if args.jobs > 1 and len(names) > 1:
        tallies = _in_parallel(names, args)
    else:
        tallies = [_run(name, args) for name in names]
    if args.json:
        print(json.dumps([attrs.asdict(tally) for tally in tallies]))
        return 0
    print(table(tallies))
    lost = sum(t.partial for t in tallies) + sum(t.trials - t.reruns for t in tallies)
    return 1 if lost else 0


def _run(name: str, args: argparse.Namespace) -> Tally:
    """One verb's campaign in this process, with a private cluster if it needs one."""
    scratch = Path(tempfile.mkdtemp(prefix="valis-kill-", dir="/tmp"))
    try:
        scratch.chmod(0o755)
        with contextlib.ExitStack() as stack:
            pg = dsn = None
            shared = scratch / "shared"
            shared.mkdir(mode=0o755)
            if name in ("zone-import", "condense"):
                pg = stack.enter_context(private_cluster())
                # What the run account reads (the zone file, the state directory) must be
                # reachable by it.
                account = pwd.getpwnam(RUN_USER)
                os.chown(shared, account.pw_uid, account.pw_gid)
                dsn = pg.new_database("kill")
                with pg.connect(dsn) as conn:
                    migrate(conn)
            started = time.monotonic()
            verb = make_verb(name, scratch / "fixtures", shared, pg, dsn)
            tally = campaign(verb, scratch / "work", args.trials, seed=args.seed,
                             budget=args.budget)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{name}: {tally.trials} trials in {time.monotonic() - started:.0f}s",
          file=sys.stderr, flush=True)
    for problem in tally.problems[: args.show]:
        print(f"  {problem}", file=sys.stderr)
    return tally


def _in_parallel(names: list[str], args: argparse.Namespace) -> list[Tally]:
    """Each verb in a child process of its own, ``args.jobs`` at a time."""
    waiting = list(names)
    running: dict[str, subprocess.Popen[str]] = {}
    tallies: dict[str, Tally] = {}
    deadline = time.monotonic() + args.budget * len(names) + 600
    while (waiting or running) and time.monotonic() < deadline:
        while waiting and len(running) < args.jobs:
            name = waiting.pop(0)
            running[name] = subprocess.Popen(
                [sys.executable, __file__, "--json", "--jobs", "1", "--verb", name,
                 "--trials", str(args.trials), "--seed", str(args.seed),
                 "--budget", str(args.budget), "--show", str(args.show)],
                stdout=subprocess.PIPE, text=True,
            )
        for name, child in list(running.items()):
            if child.poll() is None:
                continue
            out = child.communicate()[0]
            del running[name]
            if child.returncode != 0:
                raise SystemExit(f"the campaign of {name} failed (status {child.returncode})")
            (row,) = json.loads(out)
            tallies[name] = Tally(**{**row, "problems": tuple(row["problems"])})
        time.sleep(0.5)
    for child in running.values():
        child.kill()
    return [tallies[name] for name in names if name in tallies]


if __name__ == "__main__":
    sys.exit(main())

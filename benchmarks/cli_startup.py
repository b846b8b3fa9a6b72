"""Start-up time of the command line: how long ``valis --help``, ``valis zone check
--help`` and ``fulcrum --help`` take from exec to exit (the median of ``--runs`` runs
each, after one warm-up run so the page cache is hot), and the CPU time (user + system)
each run took, which a busy machine inflates far less than wall time.

Every command module imports its heavy libraries (trio, psycopg, pyroute2, cryptography,
dnspython) inside its handler, so building the parser stays cheap; this measures that
it does. ``-X importtime`` on the same command says which import regressed.

    .venv/bin/python benchmarks/cli_startup.py
    .venv/bin/python benchmarks/cli_startup.py --runs 21
    .venv/bin/python benchmarks/cli_startup.py --src /tmp/old/src   # another source tree
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT = 60.0
ENTRY = {"valis": "valis_cli.main", "fulcrum": "fulcrum.main"}

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("valis", "--help"),
    ("valis", "zone", "check", "--help"),
    ("valis", "--version"),
    ("fulcrum", "--help"),
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(argv: list[str]) -> tuple[float, float]:
    """Wall time and CPU time of one run, in seconds."""
    cpu = _children_cpu()
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT)
    return time.perf_counter() - started, _children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11, help="runs per command (median)")
    parser.add_argument("--src", type=Path, default=Path(__file__).parents[1] / "src",
                        help="the source tree to measure (default: this checkout's src)")
    args = parser.parse_args()
    for command in COMMANDS:
        # The programs' own entry points, run from --src by this interpreter: the same
        # for any source tree, so two trees compare like for like.
        program = (
            f"import sys; sys.path.insert(0, {str(args.src)!r}); sys.argv[0] = "
            f"{command[0]!r}; from {ENTRY[command[0]]} import main; main()"
        )
        argv = [sys.executable, "-c", program, *command[1:]]
        try:
            run_once(argv)
        except subprocess.CalledProcessError:
            print(f"{' '.join(command):32} (not supported by this build)")
            continue
        runs = [run_once(argv) for _ in range(max(1, args.runs))]
        times = sorted(wall for wall, _ in runs)
        cpu = statistics.median(used for _, used in runs)
        print(
            f"{' '.join(command):32} median {statistics.median(times) * 1000:6.0f} ms  "
            f"min {times[0] * 1000:6.0f} ms  max {times[-1] * 1000:6.0f} ms  "
            f"cpu {cpu * 1000:5.0f} ms  ({len(times)} runs)"
        )


if __name__ == "__main__":
    main()

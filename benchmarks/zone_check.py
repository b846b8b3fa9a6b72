"""Time ``valis zone check`` on a generated zone (100 000 records by default), beside
``nsd-checkzone`` when it is installed, and the index build from the same file.

The zone is the one ``answer_micro.py`` builds: plain A records under one SOA and NS; the
command is also timed on a 5-record zone, which is its start-up and imports.
Each figure is the median of ``--runs`` runs after one warm-up run, in wall-clock and CPU
seconds (a busy machine inflates the CPU figure far less). ``--src DIR`` measures another
source tree the same way (its library in process, its ``valis`` as the command), so a
change is measured before and after on one machine. Run from the repository root:

    .venv/bin/python benchmarks/zone_check.py [--records N] [--runs N] [--src DIR]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TIMEOUT = 120.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def in_process(runs: int, work: Callable[[], object]) -> tuple[float, float]:
    """The median of ``runs`` runs of ``work`` in this process: (wall, CPU) seconds."""
    work()
    walls, cpus = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        work()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - started_cpu)
    return statistics.median(walls), statistics.median(cpus)


def command(runs: int, argv: list[str]) -> tuple[float, float]:
    """The median of ``runs`` runs of a program: (wall, CPU) seconds, exec to exit."""

    def once() -> tuple[float, float]:
        cpu = _children_cpu()
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT)
        return time.perf_counter() - started, _children_cpu() - cpu

    once()
    measured = [once() for _ in range(runs)]
    return (
        statistics.median(wall for wall, _ in measured),
        statistics.median(cpu for _, cpu in measured),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src",
        help="the source tree to measure (default: this checkout's src)",
    )
    args = parser.parse_args()
    src = str(args.src.resolve())
    sys.path.insert(0, src)
    from answer_micro import ZONE, master_lines

    from valis_core.dns.zone import ZoneIndex
    from valis_core.dns.zone.check import check_zone_text

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"{ZONE}zone"
        path.write_text("".join(master_lines(args.records)))
        text = path.read_text()
        result = check_zone_text(text, ZONE)
        assert result.ok, result.errors
        print(f"source {src}, {args.runs} runs each (median)")
        print(f"zone {ZONE}: {result.records} records, {path.stat().st_size >> 10} KiB")
        wall, cpu = in_process(args.runs, lambda: check_zone_text(path.read_text(), ZONE))
        print(f"valis zone check (in process):   {wall:.2f} s wall, {cpu:.2f} s CPU")
        program = (
            f"import sys; sys.path.insert(0, {src!r}); sys.argv[0] = 'valis'; "
            "from valis_cli.main import main; main()"
        )
        argv = [sys.executable, "-c", program, "zone", "check", str(path)]
        wall, cpu = command(args.runs, argv)
        ours = cpu
        print(f"valis zone check (the command):  {wall:.2f} s wall, {cpu:.2f} s CPU")
        small = Path(scratch) / "small" / f"{ZONE}zone"
        small.parent.mkdir()
        small.write_text("".join(master_lines(2)))
        wall, cpu = command(args.runs, [*argv[:-1], str(small)])
        print(f"the command, a 5-record zone:    {wall:.2f} s wall, {cpu:.2f} s CPU")
        wall, cpu = in_process(args.runs, lambda: ZoneIndex.from_zone_text(text, ZONE))
        print(f"ZoneIndex.from_zone_text:        {wall:.2f} s wall, {cpu:.2f} s CPU")
        nsd = shutil.which("nsd-checkzone") or (
            "/usr/sbin/nsd-checkzone" if Path("/usr/sbin/nsd-checkzone").exists() else None
        )
        if nsd is None:
            print("nsd-checkzone: not installed (apt-get install nsd)")
            return
        wall, cpu = command(args.runs, [nsd, ZONE, str(path)])
        print(f"nsd-checkzone:                   {wall:.2f} s wall, {cpu:.2f} s CPU")
        print(f"the command's CPU / nsd-checkzone's: {ours / cpu:.1f}")


if __name__ == "__main__":
    main()

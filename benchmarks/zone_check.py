"""Time ``valis zone check`` on a generated zone (100 000 records by default), beside
``nsd-checkzone`` when it is installed, and the index build from the same file.

The zone is the one ``answer_micro.py`` builds: plain A records under one SOA and NS.
Each figure is the best of a few runs, in wall-clock and CPU seconds (on a busy machine
the CPU figure is the steadier one). Run from the repository root:

    .venv/bin/python benchmarks/zone_check.py [--records N] [--runs N]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from answer_micro import ZONE, master_lines

from valis_core.dns.zone import ZoneIndex
from valis_core.dns.zone_check import check_zone_text


def best(runs: int, work: Callable[[], object]) -> tuple[float, float]:
    """The fastest of ``runs`` runs: (wall, CPU) seconds."""
    wall = cpu = float("inf")
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        work()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"{ZONE}zone"
        path.write_text("".join(master_lines(args.records)))
        text = path.read_text()
        result = check_zone_text(text, ZONE)
        assert result.ok, result.errors
        print(f"zone {ZONE}: {result.records} records, {path.stat().st_size >> 10} KiB")
        wall, cpu = best(args.runs, lambda: check_zone_text(path.read_text(), ZONE))
        print(f"valis zone check (in process):   {wall:.2f} s wall, {cpu:.2f} s CPU")
        cli = [str(Path(sys.executable).parent / "valis"), "zone", "check", str(path)]
        wall, _ = best(args.runs, lambda: subprocess.run(cli, check=True, capture_output=True))
        print(f"valis zone check (the command):  {wall:.2f} s wall")
        wall, cpu = best(args.runs, lambda: ZoneIndex.from_zone_text(text, ZONE))
        print(f"ZoneIndex.from_zone_text:        {wall:.2f} s wall, {cpu:.2f} s CPU")
        nsd = shutil.which("nsd-checkzone") or (
            "/usr/sbin/nsd-checkzone" if Path("/usr/sbin/nsd-checkzone").exists() else None
        )
        if nsd is None:
            print("nsd-checkzone: not installed (apt-get install nsd)")
            return
        command = [nsd, ZONE, str(path)]
        wall, _ = best(args.runs, lambda: subprocess.run(command, check=True, capture_output=True))
        print(f"nsd-checkzone:                   {wall:.2f} s wall")


if __name__ == "__main__":
    main()

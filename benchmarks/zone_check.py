"""Time ``valis zone check`` on generated zones (100 000 records by default), beside
``nsd-checkzone`` when it is installed, and the index build from the same file.

Two zones: plain A records under one SOA and NS (the one ``answer_micro.py`` builds), and
a mix as zones hold them (``mixed_lines``: an SOA across lines; per host an A, AAAA, MX
and TXT record, a CNAME, an SRV, and a delegation with two NS records and their glue,
one IPv4 and one IPv6). The command is also timed on a 5-record zone, which is its
start-up and imports. The command runs with its modules byte-compiled, as an installed
program's are (until 2026-12-05 it ran with ``PYTHONDONTWRITEBYTECODE`` when the caller
had it set, and so compiled every module from source at each start: about 25 ms of its
figures).
Each figure is the median of ``--runs`` runs after one warm-up run, in wall-clock and CPU
seconds (a busy machine inflates the CPU figure far less). ``--src DIR`` measures another
source tree the same way (its library in process, its ``valis`` as the command), so a
change is measured before and after on one machine. Run from the repository root:

    .venv/bin/python benchmarks/zone_check.py [--records N] [--runs N] [--src DIR]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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


def command(runs: int, argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """The median of ``runs`` runs of a program: (wall, CPU) seconds, exec to exit."""

    def once() -> tuple[float, float]:
        cpu = _children_cpu()
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT, env=env)
        return time.perf_counter() - started, _children_cpu() - cpu

    once()
    measured = [once() for _ in range(runs)]
    return (
        statistics.median(wall for wall, _ in measured),
        statistics.median(cpu for _, cpu in measured),
    )


def mixed_lines(zone: str, count: int) -> Iterator[str]:
    """About ``count`` records of the types zones are made of, ten per host, under an
    SOA written across lines with a comment for each timer, as most zone files have it."""
    yield (f"$ORIGIN {zone}\n$TTL 3600\n@ SOA ns1 hostmaster (\n    1       ; serial\n"
           "    7200    ; refresh\n    3600    ; retry\n    1209600 ; expire\n"
           "    300 )   ; negative answers\n")
    yield "@ NS ns1\n@ NS ns2\nns1 A 192.0.2.1\nns2 A 192.0.2.2\n@ MX 10 mail\n"
    yield "mail A 192.0.2.3\n"
    for i in range(count // 10):
        v4, v6 = f"{i >> 8 & 255}.{i & 255}", f"{i:x}"
        yield (
            f"host{i} 300 A 10.1.{v4}\n"
            f"host{i} 300 AAAA 2001:db8::{v6}\n"
            f"host{i} MX 10 mail{i % 7}.{zone}\n"
            f'host{i} TXT "v=spf1 ip4:10.1.{v4} -all"\n'
            f"www{i} CNAME host{i}\n"
            f"_sip._tcp.host{i} SRV 10 5 5060 host{i}\n"
            f"sub{i} NS ns1.sub{i}\nsub{i} NS ns2.sub{i}\n"
            f"ns1.sub{i} A 10.2.{v4}\nns2.sub{i} AAAA 2001:db8:1::{v6}\n"
        )


def compiled_env(cache: Path) -> dict[str, str]:
    """The environment the command runs in as an installed program does: its modules
    byte-compiled once (pip and ``make build`` compile them; the warm-up run compiles
    them into ``cache``), not compiled from source at every start."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(  # noqa: PLR0917 - one zone's figures
    label: str, path: Path, zone: str, runs: int, argv: list[str], nsd: str | None
) -> None:
    """One zone's figures: the check in process and as the command, nsd-checkzone's."""
    from valis_core.dns.zone.check import check_zone_text

    text = path.read_text()
    result = check_zone_text(text, zone)
    assert result.ok, result.errors
    print(f"{label}: {result.records} records, {path.stat().st_size >> 10} KiB")
    wall, cpu = in_process(runs, lambda: check_zone_text(path.read_text(), zone))
    print(f"  valis zone check (in process):   {wall:.2f} s wall, {cpu:.2f} s CPU")
    installed = compiled_env(path.parent.parent / "pycache")
    ours_wall, ours = command(runs, [*argv, str(path)], installed)
    print(f"  valis zone check (the command):  {ours_wall:.2f} s wall, {ours:.2f} s CPU")
    if nsd is None:
        print("  nsd-checkzone: not installed (apt-get install nsd)")
        return
    wall, cpu = command(runs, [nsd, zone, str(path)])
    print(f"  nsd-checkzone:                   {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"  the command / nsd-checkzone: {ours_wall / wall:.1f} wall, {ours / cpu:.1f} CPU")


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

    nsd = shutil.which("nsd-checkzone") or (
        "/usr/sbin/nsd-checkzone" if Path("/usr/sbin/nsd-checkzone").exists() else None
    )
    program = (
        f"import sys; sys.path.insert(0, {src!r}); sys.argv[0] = 'valis'; "
        "from valis_cli.main import main; main()"
    )
    argv = [sys.executable, "-c", program, "zone", "check"]
    print(f"source {src}, {args.runs} runs each (median)")
    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(scratch) / "plain" / f"{ZONE}zone"
        mixed = Path(scratch) / "mixed" / f"{ZONE}zone"
        small = Path(scratch) / "small" / f"{ZONE}zone"
        for path in (plain, mixed, small):
            path.parent.mkdir()
        plain.write_text("".join(master_lines(args.records)))
        mixed.write_text("".join(mixed_lines(ZONE, args.records)))
        small.write_text("".join(master_lines(2)))
        measure(f"zone {ZONE}, A records", plain, ZONE, args.runs, argv, nsd)
        measure(f"zone {ZONE}, a mix of types", mixed, ZONE, args.runs, argv, nsd)
        wall, cpu = command(args.runs, [*argv, str(small)], compiled_env(Path(scratch) / "pycache"))
        print(f"the command, a 5-record zone:      {wall:.2f} s wall, {cpu:.2f} s CPU")
        text = plain.read_text()
        wall, cpu = in_process(args.runs, lambda: ZoneIndex.from_zone_text(text, ZONE))
        print(f"ZoneIndex.from_zone_text (A):      {wall:.2f} s wall, {cpu:.2f} s CPU")


if __name__ == "__main__":
    main()

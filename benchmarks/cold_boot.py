"""Cold boot: from starting the resident to READY, and what it holds in memory then,
beside NSD loading the same zones from master files.

Stands up a private PostgreSQL cluster and, for each layout (``--records`` records in
one zone, and the same records in ``--many`` zones), imports the zones
(``reload_latency.zone_rows``: an apex and one A record per owner) with ``replace_zone``,
then boots the real resident (``valis --resident`` run as the ``valis`` account by
``tests.scenario.resident_harness``; one state directory, so the first boot is the
instance's genesis and the others its restarts) ``--boots`` times and measures

- ``ready_s``: from starting the process to ``READY=1`` on its ``NOTIFY_SOCKET``;
- ``answer_s``: from starting it to the first answer (the first zone's SOA over UDP);
- ``load_s``: the zone source's own load, from its log line (read and index every zone);
- ``rss_mib``/``hwm_mib``: the process's resident set after the first answer and a
  settling second, and its peak (``VmHWM``); ``pss_mib``: its proportional set
  (``smaps_rollup``), the figure that adds up over a tree of processes;
- ``to_first_log_s``: from starting it to its first log line (interpreter, imports);
  ``loaded_to_ready_s``: from the zone source's load logged to READY logged;
- ``progress_lines``: how many ``loading zones`` lines the boot logged;
- ``reader``: ``compiled`` when the zone source said its rows were read by the compiled
  row reader through libpq (``dns.zone.rows``), else ``python``.

Then NSD (``/usr/sbin/nsd -d``, configured as ``dns_qps`` runs it: one server process,
no database file, so it parses the master files at every start) serves master files
of the same zones (``render_master_file``): ``answer_s`` from starting it to the first
SOA answer, RSS and PSS of its process tree after the answer (the main process, which
reads the zones, forks the server and xfrd: ``rss_mib`` is the largest process's,
``pss_mib`` the tree's sum). The database is warm (just imported), as on a restart.

Not as root there is no run account: the zone source is loaded in this process instead
(``PgZoneSource.load``, then ``serve_udp`` answers the first SOA; reported with
``how: in-process``, its ``rss_mib`` what the process grew by), over
``reload_latency``'s cluster. ``--source DIR`` runs the resident from another checkout's
``src``; ``--compare DIR`` boots that one too, each of
its boots right after one of the first's, on the same database (before/after, fairly on
a machine whose load moves). Every figure is the median over ``--boots``.

    .venv/bin/python benchmarks/cold_boot.py                      # 10^4, 10^5, 10^6
    .venv/bin/python benchmarks/cold_boot.py --records 1000000 --many 1000 --json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dns_qps import free_port, nsd_conf, process_tree, which  # beside this script
from reload_latency import cluster_for_this_user, zone_rows

from valis_core.operator_state.schema import migrate
from valis_core.operator_state.zones import render_master_file, replace_zone

BOOT_LIMIT = 600.0
"""Seconds a boot (or NSD's start) may take before the run fails."""
SETTLE = 1.0
"""Seconds after the first answer before the memory is read."""
ASK_INTERVAL = 0.005


def zone_names(count: int) -> list[str]:
    return [f"z{i}.bench.example." for i in range(count)]


def import_zones(conn: Any, names: Sequence[str], records: int) -> None:
    per_zone = records // len(names)
    for name in names:
        replace_zone(conn, zone_rows(name, per_zone))


def ask_soa(port: int, zone: str, timeout: float = 0.2) -> bool:
    try:
        response = dns.query.udp(dns.message.make_query(zone, "SOA"), "127.0.0.1",
                                 port=port, timeout=timeout)
    except (dns.exception.Timeout, OSError):
        return False
    return bool(response.answer)


def first_answer(port: int, zone: str, started: float, alive: Any) -> float:
    """Seconds from ``started`` to the first SOA answer; ``alive()`` false fails it."""
    deadline = started + BOOT_LIMIT
    while time.monotonic() < deadline:
        if ask_soa(port, zone):
            return time.monotonic() - started
        if not alive():
            raise SystemExit("the server exited before it answered")
        time.sleep(ASK_INTERVAL)
    raise SystemExit(f"no answer within {BOOT_LIMIT}s")


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def pss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def memory(pid: int) -> dict[str, float]:
    tree = process_tree(pid)
    return {
        "rss_mib": round(max(status_kib(p, "VmRSS") for p in tree) / 1024, 1),
        "hwm_mib": round(max(status_kib(p, "VmHWM") for p in tree) / 1024, 1),
        "pss_mib": round(sum(pss_kib(p) for p in tree) / 1024, 1),
    }


def boot_resident(running: Any, state_dir: Path, pg_dsn: str, names: Sequence[str],
                  source: Path | None) -> dict[str, Any]:
    from tests.scenario.resident_harness import site_facts

    extra = {"PYTHONPATH": str(source)} if source is not None else None
    wall = time.time()
    started = time.monotonic()
    resident = running.start(state_dir, site_facts(pg_dsn, ",".join(names)), extra_env=extra)
    try:
        ready = None
        while ready is None:
            if resident.proc.poll() is not None:
                raise SystemExit(f"resident exited: {resident.stderr()[-2000:]}")
            if time.monotonic() - started > BOOT_LIMIT:
                raise SystemExit(f"no READY within {BOOT_LIMIT}s")
            resident.notify.collect(0.05)
            if resident.notify.seen("READY"):
                ready = time.monotonic() - started
        answer = first_answer(resident.port, names[0], started,
                              lambda: resident.proc.poll() is None)
        time.sleep(SETTLE)
        measured = memory(resident.pid)
        log = resident.stderr()
    finally:
        resident.stop()
    found = re.search(r"zone index: \d+ zone\(s\), \d+ records in ([\d.]+)s", log)
    return {"how": "resident", "ready_s": round(ready, 3), "answer_s": round(answer, 3),
            "load_s": float(found.group(1)) if found else None, **measured,
            **timeline(log, wall), "progress_lines": log.count("loading zones"),
            "reader": "compiled" if "the compiled row reader reads rows" in log else "python"}


def timeline(log: str, wall: float) -> dict[str, float | None]:
    """From the resident's log: seconds from starting it to its first line (the
    interpreter and the imports), and from the zone source's last line of its load to
    READY (everything after the zones are built)."""
    stamps: dict[str, float] = {}
    for line in log.splitlines():
        found = re.match(r"(\d{4}-\d\d-\d\dT[\d:.]+)Z ", line)
        if found is None:
            continue
        when = datetime.datetime.fromisoformat(found.group(1)).replace(
            tzinfo=datetime.UTC).timestamp()
        stamps.setdefault("first", when)
        if "zone source: loaded" in line:
            stamps["loaded"] = when
        if "resident: info: ready: " in line:
            stamps["ready"] = when
    return {
        "to_first_log_s": round(stamps["first"] - wall, 3) if "first" in stamps else None,
        "loaded_to_ready_s": round(stamps["ready"] - stamps["loaded"], 3)
        if "ready" in stamps and "loaded" in stamps else None,
    }


async def _in_process(dsn: str, names: Sequence[str]) -> tuple[float, float, int]:
    import trio

    from valis_core.dns.answer.snapshot import IndexHolder
    from valis_core.dns.serve import serve_udp
    from valis_core.heap import RESIDENT_HEAP
    from valis_core.operator_state.zone_source import PgZoneSource

    started = time.monotonic()
    source = PgZoneSource.from_dsn(dsn, names, heap=RESIDENT_HEAP)  # as the resident's
    holder = IndexHolder(await source.load())
    loaded = time.monotonic() - started
    server = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_udp, server, holder)
            answered = await trio.to_thread.run_sync(
                first_answer, port, names[0], started, lambda: True)
            serving = status_kib(os.getpid(), "VmRSS")  # while the index is served
            nursery.cancel_scope.cancel()
    finally:
        server.close()
        source.close()
    return loaded, answered, serving


def boot_in_process(dsn: str, names: Sequence[str]) -> dict[str, Any]:
    import gc

    import trio

    gc.collect()
    before = status_kib(os.getpid(), "VmRSS")
    loaded, answered, serving = trio.run(_in_process, dsn, names)
    return {"how": "in-process", "ready_s": round(loaded, 3), "answer_s": round(answered, 3),
            "load_s": round(loaded, 3), "rss_mib": round((serving - before) / 1024, 1)}


def boot_nsd(work: Path, names: Sequence[str], records: int) -> dict[str, Any]:
    home = work / f"nsd-{len(names)}-{records}"
    home.mkdir()
    files = []
    per_zone = records // len(names)
    for name in names:
        path = home / f"{name}zone"
        path.write_text(render_master_file(name, zone_rows(name, per_zone)))
        files.append((name, path))
    port = free_port()
    conf = nsd_conf(home, port, files)
    started = time.monotonic()
    process = subprocess.Popen([which("nsd"), "-d", "-c", str(conf)], cwd=home,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        answer = first_answer(port, names[0], started, lambda: process.poll() is None)
        time.sleep(SETTLE)
        measured = memory(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(home, ignore_errors=True)
    return {"how": "nsd", "answer_s": round(answer, 3), **measured}


@contextlib.contextmanager
def database_maker(root_run: bool) -> Iterator[Any]:
    """Yields ``new_database(prefix) -> (dsn, connect)``: the scenario tier's private
    cluster as root (the resident's run account is its peer), else reload_latency's."""
    if root_run:
        from tests.scenario.pg import private_cluster
        from tests.scenario.resident_harness import harness

        with private_cluster() as pg, harness() as running:
            def new(prefix: str) -> tuple[str, Any]:
                dsn = pg.new_database(prefix)
                return dsn, lambda: pg.connect(dsn)

            yield new, running
        return
    import psycopg

    root = Path(tempfile.mkdtemp(prefix="valis-coldboot-", dir="/tmp"))
    cluster = cluster_for_this_user(root)
    count = iter(range(10**6))

    def new_plain(prefix: str) -> tuple[str, Any]:
        name = f"{prefix}_{next(count)}"
        cluster.ensure_database(name, owner="valis")
        dsn = cluster.dsn("valis", name)
        return dsn, lambda: psycopg.connect(dsn)

    try:
        yield new_plain, None
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the boots, with the runs themselves."""
    out: dict[str, Any] = {"how": runs[0]["how"], "boots": len(runs)}
    for key in runs[0]:
        values = [run[key] for run in runs
                  if isinstance(run[key], int | float) and not isinstance(run[key], bool)]
        words = sorted({run[key] for run in runs if isinstance(run[key], str)})
        if key != "how":
            out[key] = (round(statistics.median(values), 3) if values
                        else ", ".join(words) if words else None)
    out["runs"] = runs
    return out


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="10000,100000,1000000",
                        help="comma-separated record counts (default 10^4, 10^5, 10^6)")
    parser.add_argument("--many", type=int, default=1000,
                        help="zones of the many-zones layout (0: only the one-zone layout)")
    parser.add_argument("--boots", type=int, default=3, help="boots per layout (median)")
    parser.add_argument("--no-nsd", action="store_true", help="leave NSD out")
    parser.add_argument("--source", type=Path,
                        help="run the resident from this checkout's src (before/after)")
    parser.add_argument("--compare", type=Path, metavar="SRC",
                        help="also boot the resident from this other checkout's src, "
                        "each boot right after one of --source's (a fair before/after "
                        "on a machine whose load moves)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    counts = [int(text) for text in args.records.split(",") if text]
    root_run = os.geteuid() == 0
    results = []
    work = Path(tempfile.mkdtemp(prefix="valis-coldboot-work-", dir="/tmp"))
    try:
        with database_maker(root_run) as (new_database, running):
            for records in counts:
                for zones in [1, args.many] if args.many > 1 else [1]:
                    names = zone_names(zones)
                    dsn, connect = new_database("coldboot")
                    print(f"importing {records} records in {zones} zone(s) ...",
                          file=sys.stderr, flush=True)
                    with connect() as conn:
                        migrate(conn)
                        import_zones(conn, names, records)
                    row: dict[str, Any] = {"records": records, "zones": zones}
                    if root_run:
                        from tests.scenario.resident_harness import make_state_dir

                        state_dir = make_state_dir(running.workdir)  # one instance, restarted
                        runs, compared, nsd = [], [], []
                        for _ in range(args.boots):
                            runs.append(boot_resident(running, state_dir, dsn, names,
                                                      args.source))
                            if args.compare is not None:
                                compared.append(boot_resident(running, state_dir, dsn, names,
                                                              args.compare))
                            if not args.no_nsd:
                                nsd.append(boot_nsd(work, names, records))
                    else:
                        runs = [boot_in_process(dsn, names) for _ in range(args.boots)]
                        compared = []
                        nsd = [boot_nsd(work, names, records) for _ in range(args.boots)
                               if not args.no_nsd]
                    row["valis"] = summary(runs)
                    if compared:
                        row["compared"] = {"source": str(args.compare), **summary(compared)}
                    if nsd:
                        row["nsd"] = summary(nsd)
                    results.append(row)
                    print("\n".join(table([row]).splitlines()[2:]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"results": results}, indent=1) if args.json else table(results))
    return 0


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| records | zones | valis ready s | valis first answer s | zone source load s "
             "| valis RSS MiB (peak) | NSD first answer s | NSD RSS MiB | NSD PSS MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in results:
        n = row.get("nsd", {})
        for label, v in (("", row["valis"]), (" (compared)", row.get("compared"))):
            if v is None:
                continue
            lines.append(
                f"| {row['records']} | {row['zones']}{label} | {v.get('ready_s')} "
                f"| {v.get('answer_s')} | {v.get('load_s')} "
                f"| {v.get('rss_mib')} ({v.get('hwm_mib', '-')}) | {n.get('answer_s', '-')} "
                f"| {n.get('rss_mib', '-')} | {n.get('pss_mib', '-')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What `make bench` measured, summarised: medians and ranges over the rounds, the ratios
of valis to NSD, the Markdown tables it prints and the JSON document it writes.

Pure: runs in, text and JSON-ready values out. The JSON document is the one place the
results' shape is defined; ``dns_qps_plot.py`` reads ``workloads``, ``servers`` and
``summary`` from it, and ``--from`` reads it back whole.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

FORMAT = 1
SATURATION = "saturation"
PACED = "paced"
PASSES = (SATURATION, PACED)
DISPLAY = {"valis": "valis", "nsd": "NSD", "knot": "Knot"}
BASELINE = "nsd"


@attrs.frozen
class Run:
    """One dnsperf run against one server, with the server's CPU seconds over it."""

    qps: float
    sent: int
    completed: int
    lost: int
    latency_avg: float
    latency_max: float
    rcodes: str
    cpu_seconds: float

    @property
    def cpu_per_query(self) -> float:
        return self.cpu_seconds / self.completed if self.completed else float("nan")


@attrs.frozen
class Workload:
    """A query file measured on every server: a mix (saturation and fixed rate) or one
    kind of query (fixed rate only)."""

    name: str
    label: str
    saturation: bool


@attrs.frozen
class Measured:
    """A run and where it belongs: server, workload, pass and round (from 1)."""

    server: str
    workload: str
    pass_: str
    round: int
    run: Run


@attrs.frozen
class Spread:
    """Median and range of one figure over the rounds."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values))


@attrs.frozen
class Results:
    """Everything one `make bench` measured, and under what conditions."""

    servers: tuple[str, ...]
    workloads: tuple[Workload, ...]
    settings: Mapping[str, Any]
    environment: Mapping[str, Any]
    runs: tuple[Measured, ...]


@attrs.frozen
class Figures:
    """One server's summary for one workload."""

    qps: Spread | None
    latency_us: Spread | None
    lost: int
    cpu_per_query_us: Spread | None
    paced_lost: int


def figures(results: Results, server: str, workload: str) -> Figures:
    runs = [m for m in results.runs if m.server == server and m.workload == workload]
    saturated = [m.run for m in runs if m.pass_ == SATURATION]
    paced = [m.run for m in runs if m.pass_ == PACED]
    return Figures(
        qps=Spread.of([run.qps for run in saturated]),
        latency_us=Spread.of([run.latency_avg * 1e6 for run in saturated]),
        lost=sum(run.lost for run in saturated),
        cpu_per_query_us=Spread.of([run.cpu_per_query * 1e6 for run in paced
                                    if run.completed]),
        paced_lost=sum(run.lost for run in paced),
    )


def summary(results: Results) -> dict[str, dict[str, Figures]]:
    return {w.name: {s: figures(results, s, w.name) for s in results.servers}
            for w in results.workloads}


def ratio(numerator: Spread | None, denominator: Spread | None) -> float | None:
    """Median over median, or None when either is missing."""
    if numerator is None or denominator is None or denominator.median == 0:
        return None
    return numerator.median / denominator.median


def ratios(results: Results, server: str = "valis") -> dict[str, dict[str, float | None]]:
    """``server`` over NSD, per workload: throughput and CPU per query."""
    table = summary(results)
    out: dict[str, dict[str, float | None]] = {}
    for workload, by_server in table.items():
        mine, theirs = by_server.get(server), by_server.get(BASELINE)
        out[workload] = {
            "qps": ratio(mine.qps, theirs.qps) if mine and theirs else None,
            "cpu_per_query": (ratio(mine.cpu_per_query_us, theirs.cpu_per_query_us)
                              if mine and theirs else None),
        }
    return out


def to_document(results: Results) -> dict[str, Any]:
    """The JSON document: the runs as measured, and the summary and ratios drawn from
    them (so a reader needs no code of this module)."""
    return {
        "format": FORMAT,
        "environment": dict(results.environment),
        "settings": dict(results.settings),
        "servers": list(results.servers),
        "workloads": [attrs.asdict(w) for w in results.workloads],
        "runs": [
            {"server": m.server, "workload": m.workload, "pass": m.pass_, "round": m.round,
             **attrs.asdict(m.run), "cpu_per_query_us": m.run.cpu_per_query * 1e6}
            for m in results.runs
        ],
        "summary": {
            workload: {server: attrs.asdict(f) for server, f in by_server.items()}
            for workload, by_server in summary(results).items()
        },
        "ratios": {"server": "valis", "over": BASELINE, "workloads": ratios(results)},
    }


def from_document(document: Mapping[str, Any]) -> Results:
    """Results back from the JSON document (the summary is drawn again, not read)."""
    if document.get("format") != FORMAT:
        raise ValueError(f"not a dns_qps results document of format {FORMAT}")
    run_fields = [field.name for field in attrs.fields(Run)]
    return Results(
        servers=tuple(document["servers"]),
        workloads=tuple(Workload(**w) for w in document["workloads"]),
        settings=document["settings"],
        environment=document["environment"],
        runs=tuple(
            Measured(r["server"], r["workload"], r["pass"], r["round"],
                     Run(**{name: r[name] for name in run_fields}))
            for r in document["runs"]
        ),
    )


def _cell(spread: Spread | None, digits: int) -> str:
    if spread is None:
        return "-"
    return (f"{spread.median:,.{digits}f} ({spread.low:,.{digits}f}-"
            f"{spread.high:,.{digits}f})")


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def tables(results: Results) -> str:
    """Two Markdown tables: saturation q/s of the mixes, and CPU per query at the fixed
    offered rate of every workload; median (range) per server, then valis/NSD."""
    table, times = summary(results), ratios(results)
    names = [DISPLAY.get(s, s) for s in results.servers]
    with_ratio = "valis" in results.servers and BASELINE in results.servers
    head = "| queries | " + " | ".join(names) + (" | valis/NSD |" if with_ratio else " |")
    rule = "|---|" + "---:|" * (len(names) + with_ratio)
    rounds = results.settings.get("rounds", "?")
    lines = [f"Saturation, queries per second (median of {rounds} rounds; range):", "",
             head, rule]
    for w in results.workloads:
        if not w.saturation:
            continue
        cells = [_cell(table[w.name][s].qps, 0) for s in results.servers]
        if with_ratio:
            cells.append(_times(times[w.name]["qps"]))
        lines.append(f"| {w.label} | " + " | ".join(cells) + " |")
    rate = results.settings.get("rate", "?")
    lines += ["", f"CPU per query at {rate} q/s offered, microseconds (median of {rounds} "
              "rounds; range):", "", head, rule]
    for w in results.workloads:
        cells = [_cell(table[w.name][s].cpu_per_query_us, 1) for s in results.servers]
        if with_ratio:
            cells.append(_times(times[w.name]["cpu_per_query"]))
        lines.append(f"| {w.label} | " + " | ".join(cells) + " |")
    for pass_, count in ((SATURATION, "lost"), (f"{rate} q/s offered", "paced_lost")):
        lost = [f"{DISPLAY.get(s, s)} {w.label} {getattr(table[w.name][s], count)}"
                for w in results.workloads for s in results.servers
                if getattr(table[w.name][s], count)]
        if lost:
            lines += ["", f"Queries lost at {pass_} (unanswered within dnsperf's 2 s), "
                      "over all rounds: " + "; ".join(lost)]
    return "\n".join(lines) + "\n"


# -- live changes (dns_qps.py --changes-per-second, dns_qps_live.py) --------------------

LIVE_FORMAT = 1
LIVE_PHASES = ("none", "other", "queried")
"""Where a phase's changes go: nowhere, another zone of the node, the zone queried."""
NSD_LIVE = "cannot change a zone without a reload: not measured"


@attrs.frozen
class LiveRun:
    """One saturation run of the normal mix in a phase, and the changes committed (or
    sent) beside it."""

    server: str
    phase: str
    round: int
    run: Run
    changes: int
    cores: tuple[float, ...] = ()
    """Each core's busy share over the run (``/proc/stat``: not idle, not waiting on IO)."""
    parts: tuple[tuple[str, float], ...] = ()
    """The server's CPU seconds over the run by part (its threads, its database's
    processes), as ``dns_qps_live`` names them."""


def live_phase_label(phase: str, rate: float) -> str:
    return {"none": "no changes", "other": f"{rate:g}/s to another zone",
            "queried": f"{rate:g}/s to the zone queried"}[phase]


def live_document(
    runs: Sequence[LiveRun], settings: Mapping[str, Any], environment: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON document of a change-rate run: the runs as measured, and per server and
    phase the q/s (median and range over the rounds), the changes made, and the median
    q/s over the median without changes."""
    servers = list(dict.fromkeys(r.server for r in runs))
    rate = float(settings["changes_per_second"])
    summary: dict[str, dict[str, Any]] = {}
    for server in servers:
        summary[server] = {}
        for phase in LIVE_PHASES:
            mine = [r for r in runs if r.server == server and r.phase == phase]
            spread = Spread.of([r.run.qps for r in mine])
            cpu = Spread.of([r.run.cpu_per_query * 1e6 for r in mine if r.run.completed])
            cores = [Spread.of([r.cores[c] for r in mine if len(r.cores) > c])
                     for c in range(max((len(r.cores) for r in mine), default=0))]
            names = dict.fromkeys(name for r in mine for name, _ in r.parts)
            seconds = float(settings["duration"])
            summary[server][phase] = {
                "cpu_by_part": {name: statistics.median(
                    cpu / seconds for r in mine for part, cpu in r.parts if part == name)
                    for name in names},
                "core_busy": [None if c is None else attrs.asdict(c) for c in cores],
                "qps": None if spread is None else attrs.asdict(spread),
                "cpu_per_query_us": None if cpu is None else attrs.asdict(cpu),
                "changes": sum(r.changes for r in mine),
                "seconds": len(mine) * float(settings["duration"]),
            }
        quiet = summary[server]["none"]
        for phase in LIVE_PHASES:
            for figure, key in (("qps", "ratio"), ("cpu_per_query_us", "cpu_ratio")):
                busy, calm = summary[server][phase][figure], quiet[figure]
                summary[server][phase][key] = ratio(
                    None if busy is None else Spread(**busy),
                    None if calm is None else Spread(**calm))
    return {
        "format": LIVE_FORMAT,
        "benchmark": "dns_qps_live",
        "environment": dict(environment),
        "settings": dict(settings),
        "servers": servers,
        "phases": [{"name": p, "label": live_phase_label(p, rate)} for p in LIVE_PHASES],
        "runs": [{"server": r.server, "phase": r.phase, "round": r.round,
                  "changes": r.changes, "cores": list(r.cores),
                  "parts": [list(part) for part in r.parts], **attrs.asdict(r.run)}
                 for r in runs],
        "summary": summary,
    }


def live_runs(document: Mapping[str, Any]) -> list[LiveRun]:
    """The runs of a change-rate document (its summary is drawn again from them)."""
    if document.get("format") != LIVE_FORMAT or document.get("benchmark") != "dns_qps_live":
        raise ValueError(f"not a dns_qps_live results document of format {LIVE_FORMAT}")
    run_fields = [field.name for field in attrs.fields(Run)]
    return [LiveRun(r["server"], r["phase"], r["round"],
                    Run(**{name: r[name] for name in run_fields}), r["changes"],
                    tuple(r.get("cores", ())),
                    tuple((name, cpu) for name, cpu in r.get("parts", ())))
            for r in document["runs"]]


def cpu_per_change_ms(summary: Mapping[str, Any], phase: str) -> float | None:
    """A server's CPU per change in ``phase`` beyond what its queries cost without
    changes, milliseconds (medians: (CPU/query with - without) x q/s / changes/s)."""
    with_, without = summary[phase], summary["none"]
    if None in (with_["cpu_per_query_us"], without["cpu_per_query_us"], with_["qps"]) \
            or not with_["changes"] or not with_["seconds"]:
        return None
    extra_us = with_["cpu_per_query_us"]["median"] - without["cpu_per_query_us"]["median"]
    return float(extra_us * with_["qps"]["median"]
                 / (with_["changes"] / with_["seconds"]) / 1e3)


def part_cost_per_change_ms(summary: Mapping[str, Any], phase: str) -> dict[str, float]:
    """Each part's CPU per change in ``phase`` beyond its CPU without changes,
    milliseconds (medians: (CPU a second with - without) / changes a second)."""
    with_, without = summary[phase], summary["none"]
    if not with_["changes"] or not with_["seconds"]:
        return {}
    rate = with_["changes"] / with_["seconds"]
    calm = without.get("cpu_by_part", {})
    return {name: (cpu - calm.get(name, 0.0)) / rate * 1e3
            for name, cpu in with_.get("cpu_by_part", {}).items()}


def live_tables(document: Mapping[str, Any]) -> str:
    """The Markdown table of a change-rate document: q/s per phase (median; range), each
    changing phase's ratio to no changes, and NSD's row saying why it has no figures."""
    settings = document["settings"]
    phases = document["phases"]
    head = ["server"]
    for phase in phases:
        head.append(f"q/s, {phase['label']}")
        if phase["name"] != "none":
            head.append("ratio")
    load = (f"at {settings['query_rate']:,} q/s" if settings.get("query_rate")
            else "saturation")
    lines = [f"Normal mix, {load}, {settings['zones']} zones served (median of "
             f"{settings['rounds']} rounds of {settings['duration']} s; range):", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for server in document["servers"]:
        cells = [DISPLAY.get(server, server)]
        for phase in phases:
            figures = document["summary"][server][phase["name"]]
            qps = figures["qps"]
            cells.append("-" if qps is None else _cell(Spread(**qps), 0))
            if phase["name"] != "none":
                achieved = figures["changes"] / figures["seconds"] if figures["seconds"] else 0
                cells[-1] += f", {achieved:.0f} changes/s made"
                cells.append(_times(figures["ratio"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(f"| {DISPLAY['nsd']} | {NSD_LIVE} |" + " |" * (len(head) - 2))
    lines += ["", "The server's CPU per answered query over the same runs, microseconds "
              "(median; range):", "", "| " + " | ".join(
                  ["server"] + [h.replace("q/s, ", "") for h in head[1:]]) + " |",
              "|---|" + "---:|" * (len(head) - 1)]
    for server in document["servers"]:
        cells = [DISPLAY.get(server, server)]
        for phase in phases:
            figures = document["summary"][server][phase["name"]]
            cpu = figures["cpu_per_query_us"]
            cells.append("-" if cpu is None else _cell(Spread(**cpu), 1))
            if phase["name"] != "none":
                cells.append(_times(figures["cpu_ratio"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "The server's CPU per change beyond its queries' own (CPU per query over "
              "the phase without changes, times q/s, over the changes made a second), "
              "milliseconds:", "", "| server | " + " | ".join(
                  phase["label"] for phase in phases if phase["name"] != "none") + " |",
              "|---|" + "---:|" * (len(phases) - 1)]
    for server in document["servers"]:
        cells = [DISPLAY.get(server, server)]
        for phase in phases:
            if phase["name"] != "none":
                extra = cpu_per_change_ms(document["summary"][server], phase["name"])
                cells.append("-" if extra is None else f"{extra:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    changing = [phase for phase in phases if phase["name"] != "none"]
    lines += ["", "Where that CPU goes: each part's CPU per change beyond its CPU without "
              "changes (each thread's and process's ticks from /proc; the median a second "
              "over the rounds, over the changes made a second), milliseconds. A part "
              "that answers the queries shows, negative, the time it gave up:", "",
              "| server | part | " + " | ".join(p["label"] for p in changing) + " |",
              "|---|---|" + "---:|" * len(changing)]
    for server in document["servers"]:
        costs = [part_cost_per_change_ms(document["summary"][server], p["name"])
                 for p in changing]
        for name in dict.fromkeys(name for cost in costs for name in cost):
            lines.append(f"| {DISPLAY.get(server, server)} | {name} | " + " | ".join(
                f"{cost[name]:.2f}" if name in cost else "-" for cost in costs) + " |")
    phase_head = [phase["label"] for phase in phases]
    lines += ["", "Each core's busy share over the same runs (/proc/stat; median, core 0 / "
              "core 1 / ...): a client core near 1.00 is what limits the q/s.", "",
              "| server | " + " | ".join(phase_head) + " |",
              "|---|" + "---:|" * len(phase_head)]
    for server in document["servers"]:
        cells = [DISPLAY.get(server, server)]
        for phase in phases:
            busy = document["summary"][server][phase["name"]].get("core_busy") or []
            cells.append(" / ".join("-" if c is None else f"{c['median']:.2f}" for c in busy)
                         or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

"""Draw CPU per query by query kind for each server from `make bench`'s JSON: grouped
bars at the median, whiskers over the range of the rounds.

Run by Debian's ``/usr/bin/python3`` with ``python3-matplotlib`` (``benchmarks/dns_qps``
installs it when a plot is asked for), so the project's locked ``.venv`` stays as it is;
hence only the standard library and matplotlib here. Usage:
``/usr/bin/python3 benchmarks/dns_qps_plot.py RESULTS.json OUT.png``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plot_style import finish, main  # beside this script

DISPLAY = {"valis": "valis", "nsd": "NSD", "knot": "Knot"}
COLOURS = {"valis": "#c8553d", "nsd": "#2d6a8f", "knot": "#7a9e4e"}


def bars(
    document: Mapping[str, Any],
) -> tuple[list[str], dict[str, list[tuple[float, float, float] | None]]]:
    """The labels of the workloads in the document's order, and per server one
    (median, low, high) of CPU microseconds per query for each, None where not measured."""
    labels = [w["label"] for w in document["workloads"]]
    series: dict[str, list[tuple[float, float, float] | None]] = {}
    for server in document["servers"]:
        row: list[tuple[float, float, float] | None] = []
        for workload in document["workloads"]:
            spread = document["summary"][workload["name"]][server]["cpu_per_query_us"]
            row.append(None if spread is None
                       else (spread["median"], spread["low"], spread["high"]))
        series[server] = row
    return labels, series


def caption(document: Mapping[str, Any]) -> str:
    settings, environment = document["settings"], document["environment"]
    return (f"At {settings['rate']:,} q/s offered: {settings['kind_duration']} s runs "
            f"({settings['duration']} s for the mixes), median of {settings['rounds']} "
            f"rounds, whiskers the range; each server on one core, dnsperf on another.\n"
            f"{environment.get('date', '')[:10]}, valis {environment.get('valis', '?')}; "
            f"{environment.get('nsd', 'NSD')}; {environment.get('knot', 'Knot')}")


def draw(document: Mapping[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, series = bars(document)
    width = 0.8 / max(len(series), 1)
    figure, axes = plt.subplots(figsize=(11, 5.2), dpi=100)
    for index, (server, row) in enumerate(series.items()):
        xs = [i + (index - (len(series) - 1) / 2) * width for i in range(len(labels))]
        present = [(x, v) for x, v in zip(xs, row, strict=True) if v is not None]
        heights = [v[0] for _, v in present]
        whiskers = [[v[0] - v[1] for _, v in present], [v[2] - v[0] for _, v in present]]
        axes.bar([x for x, _ in present], heights, width,
                 label=DISPLAY.get(server, server), color=COLOURS.get(server),
                 yerr=whiskers, capsize=2, error_kw={"elinewidth": 0.8})
        for x, (median, _, high) in present:  # above the whisker, clear of it
            axes.annotate(f"{median:.1f}", (x, high), xytext=(0, 2),
                          textcoords="offset points", ha="center", va="bottom", fontsize=6.5)
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(labels, rotation=20, ha="right", fontsize=9)
    axes.set_ylabel("server CPU per answered query (µs)")
    axes.set_title("CPU per query by query kind: valis, NSD and Knot", fontsize=12)
    axes.set_ylim(0, axes.get_ylim()[1] * 1.12)
    axes.legend(frameon=False, ncol=len(series), loc="upper center")
    finish(figure, axes, out, caption=caption(document), grid_axis="y")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], draw, __doc__ or ""))

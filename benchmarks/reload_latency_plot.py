"""Draw the reload latency curve from ``reload_latency.py``'s JSON: commit to new answer
(ms) against the records served (log axis), p50 and p99 lines for each layout.

Run by Debian's ``/usr/bin/python3`` with ``python3-matplotlib`` (``benchmarks/live``
installs it), so the project's locked ``.venv`` stays as it is; hence only the standard
library and matplotlib here. Usage:
``/usr/bin/python3 benchmarks/reload_latency_plot.py RESULTS.json OUT.png``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plot_style import finish, main  # beside this script

COLOURS = ("#c8553d", "#2d6a8f", "#7a9e4e", "#8e6bb3", "#d49a2a")
TARGET_MS = 5.0
"""Issue 27's target for p99 at every size: drawn as a line to read the curve against."""


def series(document: Mapping[str, Any]) -> dict[str, list[tuple[int, float, float]]]:
    """Per layout label, in the document's order: (records, p50 ms, p99 ms) of each of
    its points, records ascending. A layout without a point has no series."""
    labels = {layout["name"]: layout["label"] for layout in document["layouts"]}
    out: dict[str, list[tuple[int, float, float]]] = {}
    for name, label in labels.items():
        row = sorted((p["records"], p["latency_ms"]["p50"], p["latency_ms"]["p99"])
                     for p in document["points"] if p["layout"] == name)
        if row:
            out[label] = row
    return out


PEERS = {"knot": ("Knot, DDNS", "#444444", "s"), "nsd": ("NSD, zone file reloaded", "#999999", "D")}
"""How a peer's points from ``reload_latency_peers.py`` are drawn: label, colour, marker."""


def peer_series(document: Mapping[str, Any]) -> dict[str, list[tuple[int, float, float]]]:
    """Per peer (``document["peers"]``, when the curve is drawn beside them): (records,
    p50 ms, p99 ms) of each of its points, records ascending."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for p in document.get("peers", ()):
        out.setdefault(p["server"], []).append(
            (p["records"], p["latency_ms"]["p50"], p["latency_ms"]["p99"]))
    return {server: sorted(row) for server, row in out.items()}


def caption(document: Mapping[str, Any]) -> str:
    settings, environment = document["settings"], document["environment"]
    before = environment.get("load_average_before")
    load = f"{before[0]:.1f}" if before else "?"
    peers = ("Knot from its DDNS update sent (the update is its commit), NSD from the "
             "reload signalled after its zone file was rewritten.\n"
             if document.get("peers") else "")
    return (f"Up to {settings['changes']} one-record changes per point (at most "
            f"{settings['point_seconds']:.0f} s), each committed in PostgreSQL, then asked "
            f"over UDP until answered; the source and server in one process.\n{peers}"
            f"{environment.get('date', '')[:10]}, valis {environment.get('valis', '?')}; "
            f"{environment.get('cores', '?')} cores, load average {load} at the start")


def draw(document: Mapping[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5.4), dpi=100)
    for index, (label, row) in enumerate(series(document).items()):
        colour = COLOURS[index % len(COLOURS)]
        records = [r for r, _, _ in row]
        axes.plot(records, [p50 for _, p50, _ in row], marker="o", color=colour,
                  label=f"{label}, p50")
        axes.plot(records, [p99 for _, _, p99 in row], marker="^", linestyle="--",
                  color=colour, label=f"{label}, p99")
    peers = peer_series(document)
    for server, row in peers.items():
        label, colour, marker = PEERS.get(server, (server, "#777777", "x"))
        records = [r for r, _, _ in row]
        axes.plot(records, [p50 for _, p50, _ in row], marker=marker, color=colour,
                  label=f"{label}, p50")
        axes.plot(records, [p99 for _, _, p99 in row], marker=marker, linestyle="--",
                  color=colour, label=f"{label}, p99")
    axes.axhline(TARGET_MS, color="#555555", linewidth=0.8, linestyle=":")
    axes.annotate(f"target: p99 ≤ {TARGET_MS:g} ms", (0.82, TARGET_MS), xytext=(0, 3),
                  xycoords=("axes fraction", "data"), textcoords="offset points",
                  fontsize=8, color="#555555")
    axes.set_xscale("log")
    axes.set_yscale("log")  # milliseconds to a second: a flat curve and a steep one both show
    plain = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
    axes.yaxis.set_major_formatter(plain)  # "2", not "2 x 10^0"
    low, high = axes.get_ylim()
    if high / low < 30:  # a decade or so: its minor ticks are the only ones to read
        axes.yaxis.set_minor_formatter(plain)
    axes.set_xlabel("records served (log scale)")
    axes.set_ylabel("commit → new answer on the wire (ms, log scale)")
    beside = " beside " + " and ".join(PEERS.get(s, (s,))[0].split(",")[0] for s in peers)
    axes.set_title("Live changes: commit to answer by size, valis"
                   + (beside if peers else ""), fontsize=12)
    axes.legend(frameon=False, fontsize=8, ncol=3, loc="upper left")
    finish(figure, axes, out, caption=caption(document), bottom=0.07)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], draw, __doc__ or ""))

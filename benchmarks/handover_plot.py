"""Draw latency around each event from ``handover.py``'s JSON: one panel per event kind
(apply or restart, reload, kill), time from the event on the x axis, the p99 answer
latency of the queries sent in each bin on a log y axis, one line per server; a bin
where queries were lost is marked on the panel's top edge. The first round only, when
the events were measured more than once.

Run by Debian's ``/usr/bin/python3`` with ``python3-matplotlib`` (``make bench-handover``
installs it), so the project's locked ``.venv`` stays as it is; hence only the standard
library and matplotlib here. Usage:
``/usr/bin/python3 benchmarks/handover_plot.py RESULTS.json OUT.png``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plot_style import finish, main  # beside this script

COLOURS = {"valis": "#c8553d", "nsd": "#2d6a8f", "knot": "#7a9e4e"}
PANELS = (("upgrade or restart", ("apply", "apply-failing", "restart")), ("reload", ("reload",)),
          ("kill -9", ("kill",)))
"""Each panel's title and the events drawn in it (valis's apply, of a good and of a
failing delivery, and restart beside NSD's and Knot's restart: what an upgrade does to
each)."""
STYLES = ("-", ":", "--", "-.")
"""A server's first, second ... line in a panel."""
TARGET_MS = 50.0
"""Issue 28's target for p99 during a handover."""


def panels(document: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, list[Any]]]]]:
    """Per panel: its title and, per event drawn in it, the label and the timeline."""
    out = []
    for title, kinds in PANELS:
        lines = [(f"{e['server']} {e['event']}", e["timeline"])
                 for e in document["events"]
                 if e["event"] in kinds and e.get("round", 1) == 1]
        if lines:
            out.append((title, lines))
    return out


def draw(document: Mapping[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = panels(document)
    figure, grid = plt.subplots(len(shown), 1, figsize=(8, 2.6 * len(shown) + 0.6),
                                squeeze=False)
    settings = document["settings"]
    for axes, (title, lines) in zip(grid[:, 0], shown, strict=True):
        top = max([TARGET_MS, *(b["p99_ms"] for _, line in lines for b in line
                                if b["p99_ms"] is not None)])
        drawn: list[str] = []
        for number, (label, line) in enumerate(lines):
            server = label.split()[0]
            colour = COLOURS.get(server, "#555555")
            style = STYLES[drawn.count(server) % len(STYLES)]
            drawn.append(server)
            # A bin without an answer breaks the line (NaN), so a gap shows as one.
            axes.plot([b["t"] for b in line],
                      [math.nan if b["p99_ms"] is None else b["p99_ms"] for b in line],
                      color=colour, linewidth=1.1, linestyle=style, label=label)
            lost = [b["t"] for b in line if b["lost"]]
            if lost:
                axes.scatter(lost, [top * 2.2 ** (number + 1)] * len(lost), color=colour,
                             marker="|", s=30, linewidths=0.8)
        axes.axvline(0, color="#999999", linewidth=0.6)
        axes.axhline(TARGET_MS, color="#999999", linewidth=0.6, linestyle="--")
        axes.set_yscale("log")
        axes.set_title(title, fontsize=9, loc="left")
        axes.set_ylabel("p99 latency (ms)", fontsize=8)
        axes.legend(fontsize=7, frameon=False, loc="upper right")
        axes.tick_params(labelsize=7)
    grid[-1, 0].set_xlabel("seconds from the event (query send time)", fontsize=8)
    caption = (f"{settings['udp_rate']:,.0f} UDP + {settings['tcp_rate']:,.0f} TCP q/s; "
               f"p99 per {settings['bin'] * 1000:.0f} ms bin, none: no answer; ticks on "
               f"top: bins with lost queries; dashed: {TARGET_MS:.0f} ms target; "
               f"{document['environment'].get('date', '')[:10]}")
    for axes in grid[:-1, 0]:
        axes.grid(axis="both", linewidth=0.4, alpha=0.5)
        for side in ("top", "right"):
            axes.spines[side].set_visible(False)
    finish(figure, grid[-1, 0], out, caption=caption, bottom=0.04)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], draw,
                  "usage: handover_plot.py RESULTS.json OUT.png"))

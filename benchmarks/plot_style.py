"""The house style the benchmarks' plots share: a caption under the axes, a light grid,
no top or right spine, a PNG without the software's name (so a redraw of the same
figures is the same file), and the command line every plotting script takes.

Run by Debian's ``/usr/bin/python3`` with ``python3-matplotlib``, as the scripts that
import it (from beside them); hence only the standard library and matplotlib here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def finish(figure: Any, axes: Any, out: Path, *, caption: str, grid_axis: str = "both",
           bottom: float = 0.06) -> None:
    """Caption, grid and spines in the house style, then the PNG written and the figure
    closed; ``bottom`` is the figure's share kept for the caption."""
    import matplotlib.pyplot as plt

    figure.text(0.01, 0.01, caption, fontsize=7.5, color="#555555", va="bottom")
    axes.grid(axis=grid_axis, linewidth=0.4, alpha=0.5)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    figure.tight_layout(rect=(0, bottom, 1, 1))
    figure.savefig(out, format="png", metadata={"Software": None})
    plt.close(figure)


def main(argv: Sequence[str], draw: Callable[[Mapping[str, Any], Path], None],
         usage: str) -> int:
    """``SCRIPT RESULTS.json OUT.png``: ``draw`` the document into the PNG."""
    if len(argv) != 2:
        print(usage, file=sys.stderr)
        return 2
    document = json.loads(Path(argv[0]).read_text())
    draw(document, Path(argv[1]))
    return 0

"""The size curve of ``reload_latency.py``, summarised: which points it measures, their
percentiles, the Markdown table it prints and the JSON document it writes.

Pure: settings and latencies in, names, figures, text and JSON-ready values out. The
JSON document is the one place the curve's shape is defined; ``reload_latency_plot.py``
reads ``layouts`` and ``points`` from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

FORMAT = 1
ONE_ZONE = "one"
"""The layout of one zone holding every record; any other layout is zones of a fixed
number of records, named by that number."""
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
DEFAULT_LAYOUTS = (ONE_ZONE, "100", "10")
APEX_ROWS = 3
"""Every generated zone's SOA, NS and the name server's A record."""


@attrs.frozen
class Point:
    """One point of the curve: ``records`` in all, in one zone or in zones of
    ``per_zone`` records."""

    layout: str
    records: int

    @property
    def per_zone(self) -> int:
        return self.records if self.layout == ONE_ZONE else int(self.layout)

    @property
    def zones(self) -> int:
        return 1 if self.layout == ONE_ZONE else self.records // self.per_zone

    def zone_names(self) -> list[str]:
        """The zones served at this point. A layout's zones are shared by its points
        (the first 10 000 of the zones of 10 are the 10 000 of the smaller point), so a
        database imported for the largest point serves every smaller one; one zone is a
        zone of its own at each size."""
        if self.layout == ONE_ZONE:
            return [f"one{self.records}.bench.example."]
        return [f"z{i}.of{self.per_zone}.bench.example." for i in range(self.zones)]

    @property
    def label(self) -> str:
        if self.layout == ONE_ZONE:
            return f"1 zone of {self.records:,}".replace(",", " ")
        return f"{self.zones:,} zones of {self.per_zone:,}".replace(",", " ")


def layout_label(layout: str) -> str:
    return "one zone" if layout == ONE_ZONE else f"zones of {int(layout):,}".replace(",", " ")


def parse_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated record counts (``1e6`` and ``1_000_000`` spellings too), each at
    least 10, ascending without repeats."""
    sizes = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            value = float(item.replace("_", ""))
        except ValueError:
            raise ValueError(f"not a record count: {item!r}") from None
        if not value.is_integer() or value < 10:
            raise ValueError(f"a record count is a whole number of at least 10: {item!r}")
        sizes.add(int(value))
    if not sizes:
        raise ValueError("no record counts given")
    return tuple(sorted(sizes))


def parse_layouts(text: str) -> tuple[str, ...]:
    """Comma-separated layouts: ``one`` (one zone) or a number of records per zone (more
    than the apex's three rows), in the order given, without repeats."""
    layouts: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item != ONE_ZONE and not (item.isdigit() and int(item) > APEX_ROWS):
            raise ValueError(f"a layout is {ONE_ZONE!r} or records per zone above "
                             f"{APEX_ROWS}: {item!r}")
        name = item if item == ONE_ZONE else str(int(item))
        if name not in layouts:
            layouts.append(name)
    if not layouts:
        raise ValueError("no layouts given")
    return tuple(layouts)


def points(sizes: Sequence[int], layouts: Sequence[str]) -> list[Point]:
    """Every (layout, size) of the curve whose size holds at least one whole zone, in
    layout order, each layout's sizes ascending (so each import adds to the last)."""
    out = []
    for layout in layouts:
        for size in sorted(sizes):
            point = Point(layout, size)
            if point.zones >= 1 and point.per_zone * point.zones == size:
                out.append(point)
    return out


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``share`` (0 to 100)
    per cent of ``values`` at or below it; the maximum at 100."""
    if not values:
        raise ValueError("no values")
    if not 0 < share <= 100:
        raise ValueError(f"a percentile is above 0 and at most 100: {share}")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share / 100 * len(ordered)) - 1)]


@attrs.frozen
class Percentiles:
    """p50, p99 and the maximum of a set of milliseconds."""

    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        return cls(percentile(values, 50), percentile(values, 99), max(values))


@attrs.frozen
class Measured:
    """What one point gave: every change's commit-to-answer latency and the source's own
    update time for it (seconds), the first full load and the import, how the source
    applied the changes, and each change's own time (its ``UPDATE`` and commit, seconds;
    none in documents of before 2026-12-06)."""

    point: Point
    latencies: tuple[float, ...]
    source_updates: tuple[float, ...]
    full_load_seconds: float
    import_seconds: float
    patched: int
    rebuilt: int
    failed: int
    commits: tuple[float, ...] = ()


def _ms(values: Sequence[float]) -> list[float]:
    return [round(value * 1000, 3) for value in values]


def point_document(measured: Measured) -> dict[str, Any]:
    point = measured.point
    return {
        "layout": point.layout,
        "label": point.label,
        "zones": point.zones,
        "records_per_zone": point.per_zone,
        "records": point.records,
        "changes": len(measured.latencies),
        "latency_ms": attrs.asdict(Percentiles.of(_ms(measured.latencies))),
        "source_update_ms": attrs.asdict(Percentiles.of(_ms(measured.source_updates))),
        "commit_ms": (attrs.asdict(Percentiles.of(_ms(measured.commits)))
                      if measured.commits else None),
        "full_load_s": round(measured.full_load_seconds, 3),
        "import_s": round(measured.import_seconds, 3),
        "patched": measured.patched,
        "rebuilt": measured.rebuilt,
        "failed": measured.failed,
        "latencies_ms": _ms(measured.latencies),
    }


def to_document(
    measured: Sequence[Measured],
    layouts: Sequence[str],
    settings: Mapping[str, Any],
    environment: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON document: settings, environment, the layouts in their order and every
    point with its percentiles and raw latencies (a reader needs no code of this
    module)."""
    return {
        "format": FORMAT,
        "benchmark": "reload_latency",
        "environment": dict(environment),
        "settings": dict(settings),
        "layouts": [{"name": layout, "label": layout_label(layout)} for layout in layouts],
        "points": [point_document(m) for m in measured],
    }


def table(document: Mapping[str, Any]) -> str:
    """The Markdown table of a document's points."""
    lines = [
        "| layout | records | changes | p50 ms | p99 ms | max ms | source update p50 ms "
        "| the commit itself, p50 ms | full load s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in document["points"]:
        latency, update = p["latency_ms"], p["source_update_ms"]
        commit = p.get("commit_ms")
        lines.append(
            f"| {p['label']} | {p['records']:,} | {p['changes']} | {latency['p50']:.1f} "
            f"| {latency['p99']:.1f} | {latency['max']:.1f} | {update['p50']:.1f} "
            f"| {'-' if commit is None else format(commit['p50'], '.1f')} "
            f"| {p['full_load_s']:.2f} |".replace(",", " ")
        )
    return "\n".join(lines) + "\n"

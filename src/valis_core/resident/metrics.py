"""Prometheus text exposition (format 0.0.4), rendered from plain values.

Pure: the fabric gathers ``Family`` values from the live node and this module turns
them into the text a Prometheus scraper reads. Label values are escaped as the format
requires (backslash, double quote, line feed), so no value can break a line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import attrs

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
KINDS = frozenset({"counter", "gauge", "histogram"})


@attrs.frozen
class Sample:
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    suffix: str = ""
    """Appended to the family's name: a histogram's ``_bucket``, ``_sum`` and ``_count``."""


@attrs.frozen
class Family:
    """One metric: its name, ``counter``, ``gauge`` or ``histogram``, help text and
    samples."""

    name: str
    kind: str
    help: str
    samples: tuple[Sample, ...]

    def __attrs_post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"not a metric name: {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"not a metric kind: {self.kind!r}")
        for sample in self.samples:
            for label, _ in sample.labels:
                if not _LABEL.fullmatch(label) or label.startswith("__"):
                    raise ValueError(f"not a label name: {label!r}")


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value == int(value)):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            labels = ""
            if sample.labels:
                inner = ",".join(
                    f'{name}="{escape_label_value(value)}"' for name, value in sample.labels
                )
                labels = "{" + inner + "}"
            name = family.name + sample.suffix
            lines.append(f"{name}{labels} {format_value(sample.value)}")
    return "\n".join(lines) + "\n"


class Histogram:
    """Observations counted into cumulative buckets (``bounds``, upper bounds in
    increasing order, ``+Inf`` implied), with their sum and count: a Prometheus
    histogram's state. Observed on the trio thread; read by the fabric there too."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)) or not all(map(math.isfinite, bounds)):
            raise ValueError(f"histogram bounds must be finite and increasing: {bounds!r}")
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        """Observations at most each bound and above the one before (not cumulative)."""
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for at, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[at] += 1
                break
        self.count += 1
        self.sum += value

    def family(self, name: str, help: str) -> Family:
        """The family rendering this histogram as ``name`` (its ``_bucket`` samples
        cumulative, ``le`` the bound, then ``_sum`` and ``_count``)."""
        samples: list[Sample] = []
        below = 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            below += count
            samples.append(Sample(below, (("le", format_value(bound)),), "_bucket"))
        samples.append(Sample(self.count, (("le", "+Inf"),), "_bucket"))
        samples.append(Sample(self.sum, (), "_sum"))
        samples.append(Sample(self.count, (), "_count"))
        return Family(name, "histogram", help, tuple(samples))

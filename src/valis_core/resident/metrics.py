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
KINDS = frozenset({"counter", "gauge"})


@attrs.frozen
class Sample:
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Family:
    """One metric: its name, ``counter`` or ``gauge``, help text and samples."""

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
            lines.append(f"{family.name}{labels} {format_value(sample.value)}")
    return "\n".join(lines) + "\n"

"""A Prometheus histogram (``resident.metrics.Histogram``): its buckets cumulative and
never decreasing, the ``+Inf`` bucket and ``_count`` the number observed, ``_sum`` their
sum, each value in the first bucket whose bound holds it; rendered as the text format's
``_bucket``/``_sum``/``_count`` lines under one ``# TYPE … histogram``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.resident.commit_latency import BUCKETS
from valis_core.resident.metrics import Histogram, render


@settings(max_examples=scaled(1.0))
@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=50))
def test_the_buckets_count_every_value_at_or_under_their_bound(values: list[float]) -> None:
    histogram = Histogram(BUCKETS)
    for value in values:
        histogram.observe(value)
    family = histogram.family("x_seconds", "help")
    buckets = [(dict(s.labels)["le"], s.value) for s in family.samples if s.suffix == "_bucket"]
    assert [le for le, _ in buckets] == [*(repr(b) if b != int(b) else str(int(b))
                                           for b in BUCKETS), "+Inf"]
    for bound, (_, count) in zip(BUCKETS, buckets, strict=False):
        assert count == sum(1 for v in values if v <= bound)
    assert buckets[-1][1] == len(values)
    (total,) = [s.value for s in family.samples if s.suffix == "_sum"]
    (count,) = [s.value for s in family.samples if s.suffix == "_count"]
    assert count == len(values)
    assert math.isclose(total, math.fsum(values), abs_tol=1e-9)


def test_a_histogram_renders_as_the_text_format_reads_it() -> None:
    histogram = Histogram((0.001, 1.0))
    for value in (0.0005, 0.5, 7.0):
        histogram.observe(value)
    text = render([histogram.family("valis_x_seconds", "What it times.")])
    assert text == (
        "# HELP valis_x_seconds What it times.\n"
        "# TYPE valis_x_seconds histogram\n"
        'valis_x_seconds_bucket{le="0.001"} 1\n'
        'valis_x_seconds_bucket{le="1"} 2\n'
        'valis_x_seconds_bucket{le="+Inf"} 3\n'
        "valis_x_seconds_sum 7.5005\n"
        "valis_x_seconds_count 3\n"
    )


@pytest.mark.parametrize("bounds", [(1.0, 0.5), (0.5, 0.5), (math.inf,)])
def test_bounds_that_are_not_finite_and_increasing_are_refused(
    bounds: tuple[float, ...],
) -> None:
    with pytest.raises(ValueError, match="finite and increasing"):
        Histogram(bounds)

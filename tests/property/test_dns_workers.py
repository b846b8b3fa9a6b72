"""The DNS workers' counters as the fabric shows them: the node's totals are the sum of
every worker's, each worker's row and metric samples are its own."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.dns.serve import ServeStats
from valis_core.dns.serve.limited_udp import summed_counts
from valis_core.resident.dns_workers import worker_families, worker_rows
from valis_core.resident.metrics import render

counts = st.integers(0, 10**6)


@st.composite
def worker_stats(draw: st.DrawFn) -> ServeStats:
    stats = ServeStats()
    stats.udp_rcodes = draw(st.lists(counts, min_size=16, max_size=16))
    stats.tcp_rcodes = draw(st.lists(counts, min_size=16, max_size=16))
    stats.udp_compiled = draw(st.integers(0, sum(stats.udp_rcodes)))
    for name in ("udp_dropped", "tcp_dropped", "udp_truncated", "udp_answer_errors",
                 "tcp_answer_errors", "udp_send_failures", "tcp_send_failures",
                 "tcp_accepted", "tcp_refused", "tcp_idle_closed", "udp_rate_dropped",
                 "udp_rate_slipped"):
        setattr(stats, name, draw(counts))
    return stats


@settings(max_examples=scaled(0.5))
@given(st.lists(worker_stats(), min_size=1, max_size=6))
def test_the_totals_are_every_workers_sum(workers: list[ServeStats]) -> None:
    each = [stats.snapshot() for stats in workers]
    total = summed_counts(each)
    for key in {key for item in each for key in item.responses}:
        assert total.responses[key] == sum(item.responses.get(key, 0) for item in each)
    assert total.responses_total == sum(item.responses_total for item in each)
    assert total.compiled == sum(item.compiled for item in each)
    assert total.truncated == sum(item.truncated for item in each)
    for transport in ("udp", "tcp"):
        assert total.dropped[transport] == sum(item.dropped[transport] for item in each)
        assert total.send_failures[transport] == sum(
            item.send_failures[transport] for item in each)
    for action in ("dropped", "slipped"):
        assert total.rate_limited[action] == sum(item.rate_limited[action] for item in each)
    assert total.tcp_accepted == sum(item.tcp_accepted for item in each)
    # One worker: the totals are its own counts, as before workers.
    assert summed_counts(each[:1]) == each[0]


@settings(max_examples=scaled(0.5))
@given(st.lists(worker_stats(), min_size=1, max_size=6))
def test_each_worker_has_its_row_and_its_samples(workers: list[ServeStats]) -> None:
    rows = worker_rows(workers)
    assert [row.worker for row in rows] == list(range(len(workers)))
    for row, stats in zip(rows, workers, strict=True):
        assert row.answered == sum(stats.udp_rcodes)
        assert row.compiled == stats.udp_compiled
        assert row.handed_to_python == row.answered - row.compiled
        assert row.dropped == stats.udp_dropped + stats.udp_rate_dropped
    text = render(worker_families(rows))
    for row in rows:
        assert f'valis_dns_worker_answered_total{{worker="{row.worker}"}} {row.answered}\n' \
            in text
        assert (f'valis_dns_worker_handed_to_python_total{{worker="{row.worker}"}} '
                f"{row.handed_to_python}\n") in text
        assert f'valis_dns_worker_dropped_total{{worker="{row.worker}"}} {row.dropped}\n' \
            in text

"""The DNS workers as the fabric shows them: each UDP socket's counters (``ServeStats``,
one per worker; worker 0's is the node's own, which the TCP loop shares) summed for the
node's totals, one row per worker for the status document, and the per-worker metric
families (label ``worker``). Pure: counters in, values out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from valis_core.dns.serve import ServeCounts, ServeStats
from valis_core.resident.metrics import Family, Sample
from valis_core.resident.status_document import DnsWorker


def _summed(maps: Sequence[Mapping[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for item in maps:
        total.update(item)
    return dict(total)


def summed_counts(counts: Sequence[ServeCounts]) -> ServeCounts:
    """The node's totals over every worker's counts (the first holds TCP's too)."""
    responses: Counter[tuple[str, str]] = Counter()
    for item in counts:
        responses.update(item.responses)
    return ServeCounts(
        responses=dict(responses),
        dropped=_summed([item.dropped for item in counts]),
        truncated=sum(item.truncated for item in counts),
        answer_errors=_summed([item.answer_errors for item in counts]),
        send_failures=_summed([item.send_failures for item in counts]),
        tcp_accepted=sum(item.tcp_accepted for item in counts),
        tcp_refused=sum(item.tcp_refused for item in counts),
        tcp_idle_closed=sum(item.tcp_idle_closed for item in counts),
        rate_limited=_summed([item.rate_limited for item in counts]),
        compiled=sum(item.compiled for item in counts),
    )


def worker_rows(stats: Sequence[ServeStats]) -> tuple[DnsWorker, ...]:
    """One row per worker: UDP responses it answered, how many of them the compiled
    path built and how many were handed to Python, and the queries it dropped (unread
    garbage, answer errors' drops and rate-limit drops)."""
    rows = []
    for number, item in enumerate(stats):
        answered = sum(item.udp_rcodes)
        rows.append(DnsWorker(
            worker=number,
            answered=answered,
            compiled=item.udp_compiled,
            handed_to_python=answered - item.udp_compiled,
            dropped=item.udp_dropped + item.udp_rate_dropped,
        ))
    return tuple(rows)


def worker_families(rows: Sequence[DnsWorker]) -> list[Family]:
    """``valis_dns_worker_*_total{worker="N"}``: each worker's share of the UDP totals."""

    def samples(field: str) -> tuple[Sample, ...]:
        return tuple(Sample(getattr(row, field), (("worker", str(row.worker)),))
                     for row in rows)

    return [
        Family("valis_dns_worker_answered_total", "counter",
               "UDP responses each DNS worker sent (one worker per UDP socket).",
               samples("answered")),
        Family("valis_dns_worker_handed_to_python_total", "counter",
               "UDP responses of each DNS worker the compiled path did not hold and "
               "Python's answer path built.", samples("handed_to_python")),
        Family("valis_dns_worker_dropped_total", "counter",
               "UDP queries each DNS worker dropped without a response (malformed, "
               "failed, or held back by rate limiting).", samples("dropped")),
    ]

"""The DNS workers as the fabric shows them: each UDP socket's counters (``ServeStats``,
one per worker; worker 0's is the node's own, which the TCP loop shares) summed for the
node's totals (``limited_udp.summed_counts``), one row per worker for the status
document, and the per-worker metric families (label ``worker``). Pure: counters in,
values out.
"""

from __future__ import annotations

from collections.abc import Sequence

from valis_core.dns.serve import ServeStats
from valis_core.resident.metrics import Family, Sample
from valis_core.resident.status_document import DnsWorker


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

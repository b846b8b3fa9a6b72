"""The handover benchmark's arithmetic: what one event did to the queries of a trace.

Pure functions over a trace's columns (``handover_load``: per query its kind, when it
was sent, when it was answered or NaN, its outcome and RCODE) and the event's moments;
``handover.py`` measures, this counts, ``tests/property/test_bench_handover.py`` checks
it counts right.

- A query counts in an event's window when it was sent at or after ``event - before``.
- UDP: *answered* means an answer within the timeout; *lost* is every other UDP query
  (no answer in time, or the send failed). TCP: answered, refused (RST to the SYN),
  reset (the connection closed or reset before a whole answer) or timed out.
- An answer with an RCODE other than NOERROR or NXDOMAIN (the zone's own answers) is
  still an answer, and counted as *wrong* beside it (SERVFAIL or REFUSED from a server
  not ready).
- Latency percentiles are nearest-rank (``reload_latency_report.percentile``) over the
  answered queries of the window, UDP and TCP together (TCP's include its handshake).
- The *gap* is the longest time without any answer from ``event - before`` to the
  window's end (the last query sent), by answer time: queries a server holds
  in its socket's queue and answers later end the gap when they are answered. A server
  that never stops shows its own jitter here (a few ms at 10 000 q/s). Longer than
  ``gap_threshold``, the gap is an outage: *gap start* and *resumed* are then the times
  from the event to its beginning (the last answer before it) and its end (the first
  answer after it); else both are 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import attrs
from handover_load import ANSWERED, REFUSED, RESET  # beside this script
from reload_latency_report import percentile

UDP, TCP = 0, 1
ZONE_RCODES = frozenset({0, 3})
"""NOERROR and NXDOMAIN: what the zone's own answers carry."""


@attrs.frozen
class Query:
    """One query of a trace."""

    kind: int
    sent: float
    answered: float
    """NaN: no answer."""
    outcome: int
    rcode: int


@attrs.frozen
class EventReport:
    """What one event did to the queries around it."""

    server: str
    event: str
    window_s: float
    udp_sent: int
    udp_answered: int
    udp_lost: int
    tcp_sent: int
    tcp_answered: int
    tcp_refused: int
    tcp_reset: int
    tcp_timeout: int
    wrong_rcode: int
    latency_ms: dict[str, float | None]
    gap_s: float
    gap_start_s: float
    """When the gap began, from the event (negative: before it)."""
    resumed_s: float
    event_s: float
    """How long the event's command took (``valis apply`` returns once serving)."""
    round: int = 1


def queries(columns: dict[str, Sequence[float] | Sequence[int]]) -> list[Query]:
    """A trace's columns (``handover_load.read_trace``) as queries."""
    return [Query(int(k), float(s), float(a), int(o), int(r)) for k, s, a, o, r in zip(
        columns["kind"], columns["sent"], columns["answered"], columns["outcome"],
        columns["rcode"], strict=True)]


def in_time(query: Query, timeout: float) -> bool:
    """Answered, within ``timeout`` of being sent."""
    return (query.outcome == ANSWERED and not math.isnan(query.answered)
            and query.answered - query.sent <= timeout)


def longest_gap(times: Sequence[float], start: float, end: float) -> tuple[float, float]:
    """The longest interval between ``start`` and ``end`` holding none of ``times``
    (those outside are ignored): its (beginning, end); the whole span when none falls
    inside. ``start`` must not be after ``end``."""
    if start > end:
        raise ValueError(f"a window ends ({end}) before it starts ({start})")
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    best = (start, start)
    for a, b in itertools.pairwise(edges):
        if b - a > best[1] - best[0]:
            best = (a, b)
    return best


def latency_summary(values_s: Sequence[float]) -> dict[str, float | None]:
    """p50, p99 and max in milliseconds (None without any value)."""
    if not values_s:
        return {"p50": None, "p99": None, "max": None}
    ms = [v * 1000 for v in values_s]
    return {"p50": round(percentile(ms, 50), 3), "p99": round(percentile(ms, 99), 3),
            "max": round(max(ms), 3)}


def report(server: str, event: str, trace: Sequence[Query], *, event_at: float,
           event_s: float, before: float, timeout: float, gap_threshold: float,
           round_: int = 1) -> EventReport:
    """What the event at ``event_at`` did to the queries of ``trace`` sent from
    ``event_at - before`` on (see the module's docstring)."""
    start = event_at - before
    window = [q for q in trace if q.sent >= start]
    end = max((q.sent for q in window), default=start)
    udp = [q for q in window if q.kind == UDP]
    tcp = [q for q in window if q.kind == TCP]
    answered = [q for q in window if in_time(q, timeout)]
    gap_from, gap_to = longest_gap([q.answered for q in answered], start, end)
    gap = gap_to - gap_from
    counted = gap > gap_threshold
    return EventReport(
        server=server,
        event=event,
        window_s=round(end - start, 3),
        udp_sent=len(udp),
        udp_answered=sum(in_time(q, timeout) for q in udp),
        udp_lost=sum(not in_time(q, timeout) for q in udp),
        tcp_sent=len(tcp),
        tcp_answered=sum(in_time(q, timeout) for q in tcp),
        tcp_refused=sum(q.outcome == REFUSED for q in tcp),
        tcp_reset=sum(q.outcome == RESET for q in tcp),
        tcp_timeout=sum(not in_time(q, timeout) and q.outcome not in (REFUSED, RESET)
                        for q in tcp),
        wrong_rcode=sum(q.rcode not in ZONE_RCODES for q in answered),
        latency_ms=latency_summary([q.answered - q.sent for q in answered]),
        gap_s=round(gap, 4),
        gap_start_s=round(gap_from - event_at, 4) if counted else 0.0,
        resumed_s=round(max(0.0, gap_to - event_at), 4) if counted else 0.0,
        event_s=round(event_s, 3),
        round=round_,
    )


def timeline(trace: Sequence[Query], *, event_at: float, before: float, after: float,
             bin_s: float, timeout: float) -> list[dict[str, float | int | None]]:
    """Per ``bin_s`` of send time from ``event_at - before`` to ``event_at + after``:
    the bin's start relative to the event, queries sent, lost (not answered in time) and
    the p99 and max latency (ms) of those answered (None when none was)."""
    bins = max(1, math.ceil((before + after) / bin_s))
    sent = [0] * bins
    lost = [0] * bins
    latencies: list[list[float]] = [[] for _ in range(bins)]
    for q in trace:
        slot = math.floor((q.sent - event_at + before) / bin_s)
        if not 0 <= slot < bins:
            continue
        sent[slot] += 1
        if in_time(q, timeout):
            latencies[slot].append((q.answered - q.sent) * 1000)
        else:
            lost[slot] += 1
    return [{"t": round(i * bin_s - before, 6), "sent": sent[i], "lost": lost[i],
             "p99_ms": round(percentile(latencies[i], 99), 3) if latencies[i] else None,
             "max_ms": round(max(latencies[i]), 3) if latencies[i] else None}
            for i in range(bins)]


HEADS = ("server", "event", "round", "event_s", "udp_sent", "udp_lost", "tcp_sent", "tcp_answered",
         "tcp_refused", "tcp_reset", "tcp_timeout", "wrong_rcode", "p50_ms", "p99_ms",
         "max_ms", "gap_s", "gap_start_s", "resumed_s")


def row(r: EventReport) -> list[str]:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return [r.server, r.event, str(r.round), f"{r.event_s:.2f}", str(r.udp_sent), str(r.udp_lost),
            str(r.tcp_sent), str(r.tcp_answered), str(r.tcp_refused), str(r.tcp_reset),
            str(r.tcp_timeout), str(r.wrong_rcode), ms(r.latency_ms["p50"]),
            ms(r.latency_ms["p99"]), ms(r.latency_ms["max"]), f"{r.gap_s:.3f}",
            f"{r.gap_start_s:.3f}", f"{r.resumed_s:.3f}"]


def table(reports: Sequence[EventReport]) -> str:
    """One line per event, columns aligned."""
    rows = [row(r) for r in reports]
    widths = [max(len(h), *(len(x[i]) for x in rows)) for i, h in enumerate(HEADS)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(HEADS, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(x, widths, strict=True)) for x in rows]
    return "\n".join(lines) + "\n"


def from_document(document: dict[str, Any]) -> list[EventReport]:
    """The event reports of a results document, as ``to_document`` wrote them."""
    return [EventReport(**{k: v for k, v in e.items() if k != "timeline"})
            for e in document["events"]]


def to_document(reports: Sequence[EventReport], timelines: Sequence[list[dict[str, Any]]],
                settings: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """The results as JSON: settings, environment, and per event its report and its
    timeline (what the plot draws)."""
    return {
        "benchmark": "handover",
        "settings": settings,
        "environment": environment,
        "events": [{**attrs.asdict(r), "timeline": t}
                   for r, t in zip(reports, timelines, strict=True)],
    }

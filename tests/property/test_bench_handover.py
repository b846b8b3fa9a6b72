"""`make bench-handover`'s pure parts: the report counts every query of a trace once
(UDP answered or lost, TCP answered, refused, reset or timed out), an answer after the
timeout is a loss, latency percentiles are nearest-rank, the gap is the longest time
without an answer and answers resume at its end; the load generator's queries are what
it says they ask. No server, no namespace and no clock here: the benchmark measures,
this checks it counts right."""

from __future__ import annotations

import itertools
import json
import math
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import dns.message
import dns.rdatatype
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.script_module import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    return load_script(BENCHMARKS / f"{name}.py", f"bench_{name}")


load = _load("handover_load")
hr = _load("handover_report")
Query = hr.Query
NAN = math.nan
TIMEOUT = 2.0


def _query(kind: int, sent: float, latency: float | None, outcome: int | None = None,
           rcode: int = 0) -> Any:
    if latency is None:
        return Query(kind, sent, NAN, load.TIMEOUT if outcome is None else outcome, -1)
    return Query(kind, sent, sent + latency, load.ANSWERED, rcode)


queries_drawn = st.lists(
    st.builds(
        _query,
        kind=st.sampled_from([0, 1]),
        sent=st.floats(0, 20, allow_nan=False),
        latency=st.one_of(st.none(), st.floats(0, 3 * TIMEOUT, allow_nan=False)),
        outcome=st.sampled_from([None, load.TIMEOUT, load.REFUSED, load.RESET,
                                 load.SEND_ERROR]),
        rcode=st.sampled_from([0, 3, 2, 5]),
    ),
    max_size=60,
)


@settings(max_examples=scaled(0.5))
@given(queries_drawn, st.floats(0, 20, allow_nan=False), st.floats(0, 5, allow_nan=False))
def test_every_query_of_the_window_is_counted_once(trace: list[Any], event_at: float,
                                                   before: float) -> None:
    r = hr.report("s", "e", trace, event_at=event_at, event_s=0.0, before=before,
                  timeout=TIMEOUT, gap_threshold=0.05)
    window = [q for q in trace if q.sent >= event_at - before]
    udp = [q for q in window if q.kind == 0]
    tcp = [q for q in window if q.kind == 1]
    assert (r.udp_sent, r.tcp_sent) == (len(udp), len(tcp))
    assert r.udp_answered + r.udp_lost == r.udp_sent
    assert r.tcp_answered + r.tcp_refused + r.tcp_reset + r.tcp_timeout == r.tcp_sent
    late = sum(not math.isnan(q.answered) and q.answered - q.sent > TIMEOUT for q in udp)
    never = sum(math.isnan(q.answered) for q in udp)
    assert r.udp_lost == late + never
    assert r.tcp_refused == sum(q.outcome == load.REFUSED for q in tcp)
    in_time = [q for q in window if hr.in_time(q, TIMEOUT)]
    assert r.wrong_rcode == sum(q.rcode not in (0, 3) for q in in_time)
    if in_time:
        worst = max(q.answered - q.sent for q in in_time) * 1000
        assert r.latency_ms["max"] == round(worst, 3)
        assert r.latency_ms["p50"] <= r.latency_ms["p99"] <= r.latency_ms["max"]
    else:
        assert r.latency_ms == {"p50": None, "p99": None, "max": None}
    assert 0.0 <= r.gap_s <= r.window_s + 1e-3
    assert r.resumed_s >= 0.0
    if r.gap_s > 0.05:
        assert math.isclose(r.resumed_s, max(0.0, r.gap_start_s + r.gap_s), abs_tol=1e-3)
    else:
        assert (r.gap_start_s, r.resumed_s) == (0.0, 0.0)


@settings(max_examples=scaled(0.5))
@given(st.lists(st.floats(-5, 25, allow_nan=False), max_size=40),
       st.floats(0, 10, allow_nan=False), st.floats(0, 10, allow_nan=False))
def test_the_gap_is_the_longest_span_without_an_answer(times: list[float], start: float,
                                                       length: float) -> None:
    end = start + length
    begins, ends = hr.longest_gap(times, start, end)
    assert start <= begins <= ends <= end
    assert not any(begins < t < ends for t in times)
    inside = sorted([start, *(t for t in times if start <= t <= end), end])
    assert math.isclose(ends - begins, max(b - a for a, b in itertools.pairwise(inside)))


def test_an_outage_is_a_gap_that_ends_at_the_first_answer_after_it() -> None:
    """Answers every millisecond; from 3 s to 4.5 s the server is away: queries sent then
    are lost except the last 200 ms of them, held in its queue and answered at 4.5 s."""
    trace = []
    for n in range(6000):
        sent = n / 1000
        if 3.0 <= sent < 4.3:
            trace.append(_query(0, sent, None))
        elif 4.3 <= sent < 4.5:
            trace.append(_query(0, sent, 4.5 - sent))
        else:
            trace.append(_query(0, sent, 0.0002))
    r = hr.report("valis", "kill", trace, event_at=3.0, event_s=0.001, before=2.0,
                  timeout=TIMEOUT, gap_threshold=0.05)
    assert r.udp_sent == 5000  # sent from 1.0 s on
    assert r.udp_lost == 1300
    assert math.isclose(r.gap_s, 1.5008, abs_tol=1e-3)  # last answer 2.9992 s, next 4.5 s
    assert math.isclose(r.resumed_s, 1.5, abs_tol=1e-3)
    assert math.isclose(r.gap_start_s, -0.0008, abs_tol=1e-6)
    assert math.isclose(r.latency_ms["max"], 200.0, abs_tol=1.5)
    line = hr.timeline(trace, event_at=3.0, before=2.0, after=3.0, bin_s=0.5,
                       timeout=TIMEOUT)
    assert sum(b["sent"] for b in line) == 5000
    assert [b["lost"] for b in line] == [0, 0, 0, 0, 500, 500, 300, 0, 0, 0]
    assert line[6]["max_ms"] is not None
    assert line[6]["max_ms"] > 150
    assert line[0]["t"] == -2.0


def test_no_gap_when_answers_never_stop() -> None:
    trace = [_query(0, n / 1000, 0.001) for n in range(3000)]
    r = hr.report("nsd", "reload", trace, event_at=1.5, event_s=0.01, before=1.0,
                  timeout=TIMEOUT, gap_threshold=0.05)
    assert (r.udp_lost, r.gap_start_s, r.resumed_s) == (0, 0.0, 0.0)
    assert math.isclose(r.gap_s, 0.001, abs_tol=1e-4)  # an answer every millisecond


def test_latency_percentiles_are_nearest_rank() -> None:
    summary = hr.latency_summary([n / 1000 for n in range(1, 101)])
    assert summary == {"p50": 50.0, "p99": 99.0, "max": 100.0}


def test_the_document_gives_back_its_reports_and_the_table_one_line_each() -> None:
    trace = [_query(n % 2, n / 100, 0.001 if n % 7 else None) for n in range(400)]
    reports = [hr.report("knot", e, trace, event_at=2.0, event_s=0.5, before=1.0,
                         timeout=TIMEOUT, gap_threshold=0.05) for e in ("kill", "reload")]
    lines = [hr.timeline(trace, event_at=2.0, before=1.0, after=2.0, bin_s=0.1,
                         timeout=TIMEOUT) for _ in reports]
    document = json.loads(json.dumps(hr.to_document(reports, lines, {}, {})))
    assert hr.from_document(document) == reports
    assert len(hr.table(reports).splitlines()) == 3


@settings(max_examples=scaled(0.3))
@given(st.sampled_from(["example.test.", "a.b.example.", "."]),
       st.sampled_from(list(load.QUESTIONS)), st.integers(0, 0xFFFF))
def test_the_generators_queries_ask_what_it_says(zone: str, question: tuple[str, int],
                                                 ident: int) -> None:
    label, rdtype = question
    wire = struct.pack("!H", ident) + load.wire_question(zone, label, rdtype)[2:]
    message = dns.message.from_wire(wire)
    assert message.id == ident
    assert message.flags == 0
    (asked,) = message.question
    expected = f"{label}.{zone}" if label and zone != "." else (f"{label}." if label
                                                                 else zone)
    assert asked.name.to_text() == expected
    assert asked.rdtype == dns.rdatatype.RdataType(rdtype)

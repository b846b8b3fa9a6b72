"""`make bench`'s pure parts: the query files ask what their kind names (checked against
the generated zone itself), the same on every run; the report's medians, ranges and
valis/NSD ratios are what the runs give; the JSON document reads back whole and is what
the plot draws. No server and no dnsperf here: `make bench` measures, this checks it
counts right."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.zone
import pytest

from tests.script_module import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    """A module beside ``benchmarks/dns_qps.py`` (benchmarks/ is scripts, not a package)."""
    return load_script(BENCHMARKS / f"{name}.py", f"bench_{name}")


queries = _load("dns_qps_queries")
report = _load("dns_qps_report")
plot = _load("dns_qps_plot")

NAMES = 400
ZONE = dns.zone.from_text(queries.generate_zone(NAMES), origin=queries.ZONE)
ALL_KINDS = list(queries.KINDS)


def _outcome(line: str) -> tuple[str, str]:
    """What the generated zone answers a dnsperf line: (outcome, where) with outcome one
    of answer, cname, nodata, nxdomain and where apex, host, alias or other."""
    text, rdtype_text = line.split()
    name = dns.name.from_text(text)
    rdtype = dns.rdatatype.from_text(rdtype_text)
    assert ZONE.origin is not None
    relative = name.relativize(ZONE.origin).to_text()
    where = ("apex" if relative == "@" else "host" if relative.startswith("host")
             else "alias" if relative.startswith("alias") else "other")
    node = ZONE.get_node(name)
    if node is None:
        below = any(owner.is_subdomain(name) for owner in ZONE.nodes)
        return ("nodata" if below else "nxdomain"), where
    if node.get_rdataset(dns.rdataclass.IN, rdtype) is not None:
        return "answer", where
    if node.get_rdataset(dns.rdataclass.IN, dns.rdatatype.CNAME) is not None:
        return "cname", where
    return "nodata", where


EXPECTED = {
    "a": {("answer", "host")},
    "aaaa": {("answer", "host")},
    "cname": {("cname", "alias")},
    "nxdomain": {("nxdomain", "other")},
    "nodata": {("nodata", "host")},
    "apex": {("answer", "apex")},
    "random-name": {("nxdomain", "other")},
    "random-qtype": {("nodata", "host")},
}


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_each_kind_asks_the_question_it_is_named_for(kind: str) -> None:
    lines = queries.kind_queries(kind, NAMES, 600).splitlines()
    assert len(lines) == 600
    assert {_outcome(line) for line in lines} == EXPECTED[kind]


def test_the_kinds_ask_the_types_their_labels_say() -> None:
    def types(kind: str) -> set[str]:
        return {line.split()[1] for line in queries.kind_queries(kind, NAMES, 600).splitlines()}

    assert types("a") == types("cname") == types("nxdomain") == {"A"}
    assert types("aaaa") == {"AAAA"}
    assert types("nodata") == {"MX"}
    assert types("apex") == {"SOA", "NS", "MX"}


@pytest.mark.parametrize("flood", ["random-name", "random-qtype"])
def test_a_flood_asks_a_new_question_nearly_every_time(flood: str) -> None:
    lines = queries.mix_queries(flood, NAMES, 5000).splitlines()
    assert len(set(lines)) > 0.99 * len(lines)


@pytest.mark.parametrize(("make", "name"),
                         [(queries.mix_queries, mix) for mix in queries.MIXES]
                         + [(queries.kind_queries, kind) for kind in queries.KINDS])
def test_query_files_are_the_same_on_every_run(make: Any, name: str) -> None:
    assert make(name, NAMES, 500) == make(name, NAMES, 500)


def test_the_kinds_alone_are_different_draws_from_the_mix() -> None:
    normal = queries.mix_queries("normal", NAMES, 500)
    assert all(queries.kind_queries(kind, NAMES, 500) != normal for kind in queries.KINDS)


def test_the_normal_mix_holds_its_kinds_in_their_weights() -> None:
    lines = queries.mix_queries("normal", NAMES, 20_000).splitlines()

    def kind(line: str) -> str:
        outcome, where = _outcome(line)
        rdtype = line.split()[1]
        if where == "apex":
            return "apex"
        if outcome == "cname":
            return "cname"
        if outcome == "nxdomain":
            return "nxdomain"
        if outcome == "nodata":
            return "nodata"
        return "aaaa" if rdtype == "AAAA" else "a"

    counts = Counter(kind(line) for line in lines)
    _, weights = queries.MIXES["normal"]
    assert set(counts) == {name for name, _ in weights}
    for name, weight in weights:
        assert abs(counts[name] / len(lines) - weight) < 0.015, (name, counts)


def _run(qps: float, cpu_seconds: float, completed: int = 100_000, lost: int = 0) -> Any:
    return report.Run(qps=qps, sent=completed + lost, completed=completed, lost=lost,
                      latency_avg=0.001, latency_max=0.01, rcodes="NOERROR 100%",
                      cpu_seconds=cpu_seconds)


def _results() -> Any:
    """valis and NSD over three rounds: the normal mix (both passes) and one kind."""
    workloads = (report.Workload("normal", "normal mix", saturation=True),
                 report.Workload("a", "A hit", saturation=False))
    qps = {"valis": [50_000.0, 40_000.0, 60_000.0], "nsd": [100_000.0, 90_000.0, 80_000.0]}
    cpu = {"valis": [2.0, 2.4, 2.2], "nsd": [1.1, 1.0, 1.2]}  # seconds per 100 000
    runs = []
    for round_ in (1, 2, 3):
        for server in ("valis", "nsd"):
            runs.append(report.Measured(server, "normal", report.SATURATION, round_,
                                        _run(qps[server][round_ - 1], 9.0)))
            runs.append(report.Measured(server, "normal", report.PACED, round_,
                                        _run(30_000, cpu[server][round_ - 1])))
            runs.append(report.Measured(server, "a", report.PACED, round_,
                                        _run(30_000, cpu[server][round_ - 1] / 2,
                                             lost=round_ == 2)))
    return report.Results(servers=("valis", "nsd"), workloads=workloads,
                          settings={"rounds": 3, "rate": 30_000, "duration": 6,
                                    "kind_duration": 4},
                          environment={"date": "2026-12-03T12:00:00+00:00", "valis": "abc"},
                          runs=tuple(runs))


def test_a_spread_is_the_median_and_the_range() -> None:
    assert report.Spread.of([3.0, 1.0, 2.0]) == report.Spread(2.0, 1.0, 3.0)
    assert report.Spread.of([4.0, 1.0, 2.0, 3.0]) == report.Spread(2.5, 1.0, 4.0)
    assert report.Spread.of([]) is None


def test_the_summary_takes_each_figure_from_its_own_pass() -> None:
    table = report.summary(_results())
    valis = table["normal"]["valis"]
    assert valis.qps == report.Spread(50_000.0, 40_000.0, 60_000.0)
    assert attrs.astuple(valis.cpu_per_query_us) == pytest.approx((22.0, 20.0, 24.0))
    assert table["a"]["valis"].qps is None
    assert attrs.astuple(table["a"]["nsd"].cpu_per_query_us) == pytest.approx((5.5, 5.0, 6.0))
    assert table["a"]["nsd"].paced_lost == 1


def test_ratios_are_valis_medians_over_nsd_medians() -> None:
    times = report.ratios(_results())
    assert times["normal"]["qps"] == pytest.approx(50_000 / 90_000)
    assert times["normal"]["cpu_per_query"] == pytest.approx(22.0 / 11.0)
    assert times["a"]["qps"] is None
    assert report.ratio(report.Spread(1, 1, 1), None) is None


def test_the_tables_show_medians_ranges_and_ratios() -> None:
    text = report.tables(_results())
    assert "| normal mix | 50,000 (40,000-60,000) | 90,000 (80,000-100,000) | 0.56x |" in text
    assert "| normal mix | 22.0 (20.0-24.0) | 11.0 (10.0-12.0) | 2.00x |" in text
    assert "| A hit | 11.0 (10.0-12.0) | 5.5 (5.0-6.0) | 2.00x |" in text
    assert text.count("| A hit |") == 1  # no saturation row for a kind measured alone
    assert "valis A hit 1; NSD A hit 1" in text


def test_without_nsd_there_is_no_ratio_column() -> None:
    results = _results()
    alone = report.Results(servers=("valis",), workloads=results.workloads,
                           settings=results.settings, environment=results.environment,
                           runs=tuple(m for m in results.runs if m.server == "valis"))
    assert "valis/NSD" not in report.tables(alone)


def test_the_json_document_reads_back_whole() -> None:
    results = _results()
    document = json.loads(json.dumps(report.to_document(results)))
    assert report.from_document(document) == results
    assert document["ratios"]["workloads"]["normal"]["cpu_per_query"] == pytest.approx(2.0)
    assert document["summary"]["normal"]["valis"]["qps"]["median"] == 50_000.0
    assert {run["pass"] for run in document["runs"]} == {"saturation", "paced"}


def test_a_document_of_another_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        report.from_document({"format": 0})


def test_the_plot_draws_the_summary_of_the_document() -> None:
    document = json.loads(json.dumps(report.to_document(_results())))
    labels, series = plot.bars(document)
    assert labels == ["normal mix", "A hit"]
    assert series["valis"] == [pytest.approx((22.0, 20.0, 24.0)),
                               pytest.approx((11.0, 10.0, 12.0))]
    assert list(series) == ["valis", "nsd"]
    assert "30,000 q/s offered" in plot.caption(document)

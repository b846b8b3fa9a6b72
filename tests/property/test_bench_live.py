"""`make bench-live`'s pure parts: the reload latency curve measures the points it names
(sizes and layouts as the options spell them, each layout's zones shared by its points),
its percentiles are nearest-rank, its JSON document carries what the plot and the table
read; the change-rate comparison paces at most the changes it was asked for, each to
another host and a new address, and reports each server's q/s with changes over without.
No server, no database and no clock here: the benchmarks measure, this checks they count
right."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.script_module import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    return load_script(BENCHMARKS / f"{name}.py", f"bench_{name}")


curve = _load("reload_latency_report")
curve_plot = _load("reload_latency_plot")
reload_latency = _load("reload_latency")
peers = _load("reload_latency_peers")
report = _load("dns_qps_report")
live = _load("dns_qps_live")


# -- the reload latency curve -----------------------------------------------------------


def test_sizes_are_spelled_as_counts_or_powers_and_come_back_ascending() -> None:
    assert curve.parse_sizes("1e6, 10_000,100000,1e4") == (10_000, 100_000, 1_000_000)
    for bad in ("", "lots", "5", "1.5e1x", "12.5"):
        with pytest.raises(ValueError, match="record count"):
            curve.parse_sizes(bad)


def test_layouts_are_one_zone_or_records_per_zone_in_the_order_given() -> None:
    assert curve.parse_layouts("10,one,100,010") == ("10", "one", "100")
    for bad in ("", "two", "3", "-10"):
        with pytest.raises(ValueError, match="layout"):
            curve.parse_layouts(bad)


def test_the_options_parse_into_the_curve_they_name() -> None:
    args = reload_latency.parser().parse_args(
        ["--sizes", "1e4,1e5", "--layouts", "one,10", "--changes", "50"])
    assert args.sizes == (10_000, 100_000)
    assert args.layouts == ("one", "10")
    assert args.changes == 50
    default = reload_latency.parser().parse_args([])
    assert default.sizes == (10_000, 100_000, 1_000_000)
    assert default.layouts == ("one", "100", "10")
    assert default.changes >= 200
    with pytest.raises(SystemExit):
        reload_latency.parser().parse_args(["--layouts", "2"])


def test_the_default_curve_holds_the_points_the_issue_asks_for() -> None:
    points = curve.points(curve.DEFAULT_SIZES, curve.DEFAULT_LAYOUTS)
    shapes = {(p.zones, p.per_zone) for p in points}
    assert {(1, 10_000), (1, 100_000), (1, 1_000_000)} <= shapes
    assert {(100_000, 10), (10_000, 100)} <= shapes
    assert all(p.zones * p.per_zone == p.records for p in points)
    # Each layout's sizes ascending, so each import adds to the one before.
    for layout in curve.DEFAULT_LAYOUTS:
        sizes = [p.records for p in points if p.layout == layout]
        assert sizes == sorted(sizes)


def test_a_size_smaller_than_a_zone_or_not_a_whole_number_of_zones_is_no_point() -> None:
    points = curve.points((50, 150, 1000), ("100", "one"))
    assert [(p.layout, p.records) for p in points] == [
        ("100", 1000), ("one", 50), ("one", 150), ("one", 1000)]


def test_a_layout_s_points_serve_the_first_zones_of_its_largest() -> None:
    small, large = curve.Point("10", 1000), curve.Point("10", 10_000)
    assert large.zone_names()[: small.zones] == small.zone_names()
    assert len(set(large.zone_names())) == large.zones == 1000
    assert curve.Point("one", 1000).zone_names() != curve.Point("one", 10_000).zone_names()
    assert curve.Point("10", 1_000_000).label == "100 000 zones of 10"
    assert curve.Point("one", 1_000_000).label == "1 zone of 1 000 000"


def test_the_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert curve.percentile(values, 50) == 50.0
    assert curve.percentile(values, 99) == 99.0
    assert curve.percentile(values, 100) == 100.0
    assert curve.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert curve.percentile([7.0], 99) == 7.0
    assert curve.Percentiles.of([5.0, 1.0, 9.0, 3.0]) == curve.Percentiles(3.0, 9.0, 9.0)
    with pytest.raises(ValueError, match="no values"):
        curve.percentile([], 50)
    with pytest.raises(ValueError, match="percentile"):
        curve.percentile([1.0], 0)


@settings(max_examples=scaled(1.0))
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=300),
       st.floats(0.5, 100))
def test_a_percentile_is_a_value_with_its_share_at_or_below_it(
    values: list[float], share: float
) -> None:
    found = curve.percentile(values, share)
    assert found in values
    assert sum(v <= found for v in values) >= share / 100 * len(values)
    assert sum(v < found for v in values) < share / 100 * len(values)


def test_changes_move_over_every_host_each_with_an_address_of_its_own() -> None:
    hosts = 7
    first = [reload_latency.changed_owners("z.", hosts, n, 1)[0] for n in range(hosts)]
    assert sorted(first) == sorted(f"h{i}.z." for i in range(hosts))
    assert reload_latency.changed_owners("z.", 100, 3, 5) == [
        f"h{(3 * reload_latency.OWNER_STEP + i) % 100}.z." for i in range(5)]
    addresses = {reload_latency.changed_address(n) for n in range(1 << 17)}
    assert len(addresses) == 1 << 17



@settings(max_examples=scaled(0.3), deadline=None)
@given(st.sampled_from(("other", "queried")), st.integers(1, 4), st.integers(1, 20),
       st.sampled_from((100, 10_000)))
def test_every_change_of_every_round_changes_what_its_host_holds(
    phase: str, rounds: int, seconds: int, names: int,
) -> None:
    """``live rate``'s changes, round after round as ``one_run`` makes them: each writes
    its host an address the host does not hold already (the zone's own addresses are not
    the changes')."""
    rate = 50.0
    held: dict[str, str] = {}
    for round_ in range(1, rounds + 1):
        offset = live.round_offset(round_, rate, seconds)
        for n in range(int(rate * seconds) + 1):
            _, owner, address = live.change_target(phase, names, offset + n)
            assert held.get(owner) != address, (round_, n)
            held[owner] = address


def _measured(point: Any, latencies: list[float], *, commits: bool = True) -> Any:
    return curve.Measured(point, tuple(latencies), tuple(x / 2 for x in latencies),
                          full_load_seconds=1.25, import_seconds=3.0, patched=len(latencies),
                          rebuilt=0, failed=0,
                          commits=tuple(x / 4 for x in latencies) if commits else ())


def _curve_document() -> dict[str, Any]:
    measured = [
        _measured(curve.Point("one", 10_000), [0.001 * (i + 1) for i in range(100)]),
        _measured(curve.Point("one", 100_000), [0.002] * 10),
        # As a document of before the commits were timed.
        _measured(curve.Point("10", 10_000), [0.004] * 10, commits=False),
    ]
    settings_ = {"changes": 100, "point_seconds": 120.0, "gap": 0.02, "rows_per_change": 1}
    environment = {"date": "2026-12-04T11:00:00+00:00", "valis": "cced99d", "cores": 2,
                   "load_average_before": [1.5, 1.0, 0.5]}
    document = curve.to_document(measured, ("one", "10", "100"), settings_, environment)
    return dict(json.loads(json.dumps(document)))


def test_the_curve_document_holds_each_point_s_percentiles_and_raw_latencies() -> None:
    document = _curve_document()
    assert document["format"] == curve.FORMAT
    assert document["benchmark"] == "reload_latency"
    first = document["points"][0]
    assert first["latency_ms"] == {"p50": 50.0, "p99": 99.0, "max": 100.0}
    assert first["source_update_ms"]["p50"] == 25.0
    assert first["commit_ms"]["p50"] == 12.5
    assert document["points"][2]["commit_ms"] is None
    assert len(first["latencies_ms"]) == first["changes"] == 100
    assert (first["zones"], first["records_per_zone"], first["records"]) == (1, 10_000, 10_000)
    assert [layout["label"] for layout in document["layouts"]] == [
        "one zone", "zones of 10", "zones of 100"]


def test_the_curve_table_has_a_row_per_point() -> None:
    text = curve.table(_curve_document())
    assert ("| 1 zone of 10 000 | 10 000 | 100 | 50.0 | 99.0 | 100.0 | 25.0 | 12.5 | 1.25 |"
            in text)
    assert "| 1 000 zones of 10 | 10 000 | 10 | 4.0 | 4.0 | 4.0 | 2.0 | - | 1.25 |" in text


def test_the_plot_draws_p50_and_p99_per_layout_against_the_records() -> None:
    document = _curve_document()
    lines = curve_plot.series(document)
    assert list(lines) == ["one zone", "zones of 10"]  # a layout without points: no line
    assert lines["one zone"] == [(10_000, 50.0, 99.0), (100_000, 2.0, 2.0)]
    assert lines["zones of 10"] == [(10_000, 4.0, 4.0)]
    assert "Up to 100 one-record changes" in curve_plot.caption(document)


def _peer_point(server: str, records: int, p50: float, p99: float) -> dict[str, Any]:
    return {"server": server, "records": records, "changes": 3, "load_s": 0.5,
            "latency_ms": {"p50": p50, "p99": p99, "max": p99},
            "change_ms": {"p50": 0.2, "p99": 0.3, "max": 0.3}, "latencies_ms": [p50] * 3}


def test_the_plot_draws_each_peer_s_p50_and_p99_beside_the_curve() -> None:
    document = _curve_document()
    assert curve_plot.peer_series(document) == {}  # a curve alone: no peer's line
    document["peers"] = [_peer_point("nsd", 100_000, 200.0, 250.0),
                         _peer_point("knot", 10_000, 0.1, 0.4),
                         _peer_point("nsd", 10_000, 20.0, 25.0)]
    assert curve_plot.peer_series(document) == {
        "nsd": [(10_000, 20.0, 25.0), (100_000, 200.0, 250.0)],
        "knot": [(10_000, 0.1, 0.4)],
    }
    assert "Knot from its DDNS update sent" in curve_plot.caption(document)
    del document["peers"]
    assert "Knot" not in curve_plot.caption(document)


def test_the_peers_table_has_a_row_per_point() -> None:
    text = peers.table([_peer_point("knot", 10_000, 0.1, 0.4),
                        _peer_point("nsd", 1_000_000, 2100.0, 2500.0)])
    assert "| knot | 10,000 | 3 | 0.1 | 0.4 | 0.4 | 0.2 | 0.50 |" in text
    assert "| nsd | 1,000,000 | 3 | 2100.0 | 2500.0 | 2500.0 | 0.2 | 0.50 |" in text


def test_the_peers_serve_the_zone_the_curve_imports() -> None:
    from valis_core.dns import parse_zone_text

    text = peers.zone_text(1_000)
    served = parse_zone_text(text, peers.ZONE)
    rows = reload_latency.zone_rows(peers.ZONE, 1_000)
    assert len(rows) == len(served) == 1_000
    assert set(served) == set(rows)


# -- the change-rate comparison ---------------------------------------------------------


def test_pacing_never_makes_more_changes_than_rate_times_seconds() -> None:
    made: list[int] = []
    count = live.paced(10_000.0, 0.005, made.append)
    assert count == len(made) <= 10_000 * 0.005 + 1
    assert made == list(range(count))


@pytest.mark.parametrize("phase", ["other", "queried"])
def test_each_change_goes_to_its_phase_s_zone_another_host_a_new_address(phase: str) -> None:
    names = 400
    targets = [live.change_target(phase, names, n) for n in range(300)]
    zone = live.ZONE if phase == "queried" else live.other_zone(0)
    assert {zone for zone, _, _ in targets} == {zone}
    assert len({address for _, _, address in targets}) == len(targets)
    owners = [owner for _, owner, _ in targets]
    assert all(owner.endswith(f".{zone}") for owner in owners)
    assert owners[0] != owners[1]
    if phase == "queried":  # hosts that exist in the queried zone: host1 .. host{names}
        numbers = {int(owner.split(".")[0].removeprefix("host")) for owner in owners}
        assert min(numbers) >= 1
        assert max(numbers) <= names


def _live_runs() -> list[Any]:
    def run(qps: float) -> Any:
        return report.Run(qps=qps, sent=1000, completed=1000, lost=0, latency_avg=0.001,
                          latency_max=0.01, rcodes="NOERROR 100%", cpu_seconds=1.0)

    qps = {("valis", "none"): [100.0, 80.0], ("valis", "other"): [90.0, 70.0],
           ("valis", "queried"): [50.0, 40.0], ("knot", "none"): [200.0, 200.0],
           ("knot", "other"): [190.0, 190.0], ("knot", "queried"): [180.0, 180.0]}
    def parts(server: str, phase: str) -> tuple[tuple[str, float], ...]:
        """CPU seconds a run of 6 s: 1 ms (the trio thread), 2 ms (PostgreSQL) and
        0.5 ms (knotd) for each of its 300 changes, beyond what it spends without."""
        changes = 0 if phase == "none" else 300
        if server == "knot":
            return (("knotd", 1.0 + changes * 0.0005),)
        return (("resident: trio thread", 0.6 + changes * 0.001),
                ("PostgreSQL", changes * 0.002))

    return [report.LiveRun(server, phase, round_ + 1, run(values[round_]),
                           0 if phase == "none" else 300, (0.5 + round_ / 10, 1.0),
                           parts(server, phase))
            for (server, phase), values in qps.items() for round_ in (0, 1)]


def _live_document() -> dict[str, Any]:
    settings_ = {"changes_per_second": 50.0, "duration": 6, "rounds": 2, "zones": 100}
    document = report.live_document(_live_runs(), settings_, {"date": "2026-12-04"})
    return dict(json.loads(json.dumps(document)))


def test_the_change_rate_document_gives_q_s_with_changes_over_without() -> None:
    document = _live_document()
    assert document["benchmark"] == "dns_qps_live"
    assert document["servers"] == ["valis", "knot"]
    assert [p["name"] for p in document["phases"]] == ["none", "other", "queried"]
    valis = document["summary"]["valis"]
    assert valis["none"]["qps"] == {"median": 90.0, "low": 80.0, "high": 100.0}
    assert valis["queried"]["ratio"] == pytest.approx(45.0 / 90.0)
    assert valis["other"]["ratio"] == pytest.approx(80.0 / 90.0)
    assert valis["none"]["ratio"] == pytest.approx(1.0)
    assert valis["other"]["changes"] == 600
    assert document["summary"]["knot"]["queried"]["ratio"] == pytest.approx(0.9)
    assert len(document["runs"]) == 12


def test_the_change_rate_table_names_nsd_without_figures() -> None:
    text = report.live_tables(_live_document())
    assert "| valis | 90 (80-100) | 80 (70-90), 50 changes/s made | 0.89x " in text
    assert "| 45 (40-50), 50 changes/s made | 0.50x |" in text
    assert "| NSD | cannot change a zone without a reload" in text
    header = next(line for line in text.splitlines() if line.startswith("| server"))
    nsd = next(line for line in text.splitlines() if line.startswith("| NSD"))
    assert header.count("|") == nsd.count("|")


def test_the_change_rate_document_gives_cpu_per_query_with_changes_over_without() -> None:
    document = _live_document()
    valis = document["summary"]["valis"]
    # 1.0 s of CPU over 1 000 answered queries in every run: 1 000 us each, ratio 1.
    assert valis["queried"]["cpu_per_query_us"]["median"] == pytest.approx(1000.0)
    assert valis["queried"]["cpu_ratio"] == pytest.approx(1.0)
    assert "The server's CPU per answered query" in report.live_tables(document)


def test_the_change_rate_document_gives_each_core_s_busy_share_per_phase() -> None:
    document = _live_document()
    assert document["summary"]["valis"]["queried"]["core_busy"] == [
        {"median": pytest.approx(0.55), "low": 0.5, "high": 0.6},
        {"median": 1.0, "low": 1.0, "high": 1.0}]
    assert "| valis | 0.55 / 1.00 | 0.55 / 1.00 | 0.55 / 1.00 |" in report.live_tables(document)


def test_the_change_rate_document_gives_each_part_s_cpu_per_change() -> None:
    document = _live_document()
    valis, knot = document["summary"]["valis"], document["summary"]["knot"]
    assert valis["none"]["cpu_by_part"] == {"resident: trio thread": pytest.approx(0.1),
                                            "PostgreSQL": 0.0}
    assert report.part_cost_per_change_ms(valis, "queried") == {
        "resident: trio thread": pytest.approx(1.0), "PostgreSQL": pytest.approx(2.0)}
    assert report.part_cost_per_change_ms(knot, "other") == {"knotd": pytest.approx(0.5)}
    assert report.part_cost_per_change_ms(valis, "none") == {}
    text = report.live_tables(document)
    assert "| valis | resident: trio thread | 1.00 | 1.00 |" in text
    assert "| valis | PostgreSQL | 2.00 | 2.00 |" in text
    assert "| Knot | knotd | 0.50 | 0.50 |" in text


def test_a_part_s_cpu_is_its_threads_ticks_between_two_readings() -> None:
    assert live.spent({"a": 10, "b": 5}, {"a": 110, "c": 7}) == (
        ("a", pytest.approx(100 * live.TICK)), ("c", pytest.approx(7 * live.TICK)))
    mine = live.thread_ticks(os.getpid())
    assert os.getpid() in mine  # the main thread's id is the process's
    assert all(ticks >= 0 for ticks in mine.values())
    assert live.thread_ticks(2**22 + 1) == {}  # above any pid: no such process
    whole = live.whole_part("me", os.getpid())()
    assert list(whole) == ["me"]
    assert whole["me"] >= mine[os.getpid()]  # a thread's ticks only grow


def test_the_core_busy_shares_are_the_non_idle_part_of_each_core_s_ticks() -> None:
    assert live.busy_shares([(10, 100), (0, 50)], [(60, 200), (0, 50)]) == (0.5, 0.0)
    assert all(0 <= busy <= total for busy, total in live.core_times())


def test_the_change_rate_document_reads_back_to_its_runs() -> None:
    document = _live_document()
    assert report.live_runs(document) == _live_runs()
    with pytest.raises(ValueError, match="dns_qps_live"):
        report.live_runs({"format": 1, "benchmark": "reload_latency"})

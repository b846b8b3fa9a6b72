"""A large master file's parse reports a count as it goes, ending at the total."""

from __future__ import annotations

from valis_core.dns.zone.build import PARSE_PROGRESS_EVERY, parse_zone_text


def test_parsing_reports_records_read_then_converted_up_to_the_total() -> None:
    count = 2 * PARSE_PROGRESS_EVERY + 7
    lines = ["$ORIGIN big.test.", "$TTL 300", "@ IN SOA ns1 host 1 7200 3600 1209600 300",
             "@ IN NS ns1", *(f"h{i} IN A 192.0.2.1" for i in range(count))]
    calls: list[tuple[int, int]] = []
    text = "\n".join(lines) + "\n"
    rows = parse_zone_text(text, "big.test.", progress=lambda d, t: calls.append((d, t)))
    total = len(rows)
    assert (PARSE_PROGRESS_EVERY, 0) in calls
    assert calls[-1] == (total, total)
    assert [done for done, t in calls if t] == sorted(done for done, t in calls if t)
    assert rows == parse_zone_text(text, "big.test.")

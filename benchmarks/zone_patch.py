"""What one owner's change costs the zone index, by zone size: the time to make the next
version (``ZoneIndex.with_owners_replaced`` of one owner: an address changed, an owner
added, an owner removed), and the build and resident memory of the index it patches.

    .venv/bin/python benchmarks/zone_patch.py [--records 10000 --records 1000000] [--zones N]

``--zones N`` spreads the records over N zones and times ``with_owners_replaced`` in one
of them (the cost a node serving many zones pays per change). These are figures for the
docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Iterator

from answer_micro import rss_mib  # beside this script
from zone_rows import ZONE, host_address, rows

from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex


def zone_rows(records: int, zones: int) -> Iterator[RecordRow]:
    """The rows, made as they are read (so the memory measured is the index's)."""
    if zones == 1:
        yield from rows(records)
        return
    each = max(1, records // zones)
    for z in range(zones):
        name = f"z{z}.{ZONE}"
        soa = f"ns1.{name} hostmaster.{name} 1 7200 3600 1209600 300"
        yield RecordRow(name, name, "SOA", 3600, soa)
        yield RecordRow(name, name, "NS", 3600, f"ns1.{name}")
        for i in range(each):
            yield RecordRow(name, f"host{i}.{name}", "A", 300, host_address(i))


def timed(index: ZoneIndex, zone: str, owner: str, rows_now: list[RecordRow], n: int) -> float:
    """Median seconds of ``n`` patches of ``owner`` (each from the same version)."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        index.with_owners_replaced(zone, [owner], rows_now)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, action="append")
    parser.add_argument("--zones", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    for records in args.records or [10_000, 100_000, 1_000_000]:
        gc.collect()
        before = rss_mib()
        start = time.perf_counter()
        index = ZoneIndex.from_records(zone_rows(records, args.zones))
        built = time.perf_counter() - start
        gc.collect()
        grown = rss_mib() - before
        zone = ZONE if args.zones == 1 else f"z{args.zones // 2}.{ZONE}"
        owner = f"host7.{zone}"
        changed = [RecordRow(zone, owner, "A", 300, "192.0.2.99")]
        added = f"new.{zone}"
        fresh = [RecordRow(zone, added, "A", 300, "192.0.2.98")]
        change = timed(index, zone, owner, changed, args.repeat)
        add = timed(index, zone, added, fresh, args.repeat)
        remove = timed(index, zone, owner, [], args.repeat)
        print(
            f"{records:>9} records in {args.zones} zone(s): build {built:.2f} s (rows made "
            f"as read), index +{grown:.0f} MiB resident; patch of one owner: "
            f"change {change * 1e6:.0f} us, add {add * 1e6:.0f} us, remove {remove * 1e6:.0f} us",
            flush=True,
        )
        del index
        gc.collect()


if __name__ == "__main__":
    main()

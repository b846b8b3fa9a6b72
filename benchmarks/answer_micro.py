"""Time the pure answer path, with no sockets: index build and queries per second.

Builds a generated zone (one million A records by default) from rows and from a master
file, reports the build times and the resident memory the index added, then times
``answer()`` for plain A queries: one hot name, a working set that fits the response
cache, names seen once each (every query a cache miss), and the two floods a served zone
draws: random nonexistent names (NXDOMAIN) and random types at existing names (NODATA).
Run from the repository root:

    .venv/bin/python benchmarks/answer_micro.py [--records N] [--queries N]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import time
from collections.abc import Iterator, Sequence

import dns.message
from zone_rows import ZONE, host_address, rows  # beside this script

from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.zone import ZoneIndex


def master_lines(count: int) -> Iterator[str]:
    yield f"$ORIGIN {ZONE}\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n"
    yield "@ NS ns1\nns1 A 192.0.2.1\n"
    for i in range(count):
        yield f"host{i} 300 A {host_address(i)}\n"


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def wire_query(name: str, edns: bool, rtype: int | str = "A") -> bytes:
    query = dns.message.make_query(name, rtype, use_edns=0 if edns else False)
    return query.to_wire()


def rate(snapshot: Snapshot, queries: Sequence[bytes]) -> float:
    """Answers per second of this process's CPU time (steadier than wall time on a
    machine that is doing other work too), from one snapshot as the server serves it."""
    start = time.process_time()
    for query in queries:
        answer(snapshot, query, transport=Transport.UDP)
    return len(queries) / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200_000)
    args = parser.parse_args()
    if args.queries > args.records:
        parser.error(f"--queries {args.queries} is more than --records {args.records}: the "
                     "cache-miss run asks each of that many distinct names once")

    gc.collect()
    before = rss_mib()
    start = time.perf_counter()
    index = ZoneIndex.from_records(rows(args.records))
    built = time.perf_counter() - start
    gc.collect()
    print(f"index from rows: {index.record_count} records built in {built:.1f} s, "
          f"+{rss_mib() - before:.0f} MiB resident")
    text = "".join(master_lines(args.records))
    start = time.perf_counter()
    ZoneIndex.from_zone_text(text, ZONE)
    print(f"index from a master file of the same zone: {time.perf_counter() - start:.1f} s")
    del text

    rng = random.Random(1)
    count = args.queries
    hot = [wire_query(f"host7.{ZONE}", edns=True)] * count
    working = [wire_query(f"host{rng.randrange(args.records)}.{ZONE}", True) for _ in range(10_000)]
    cached = [working[i % len(working)] for i in range(count)]
    fresh = [wire_query(f"host{i}.{ZONE}", True) for i in rng.sample(range(args.records), count)]
    missing = [wire_query(f"nx{rng.getrandbits(40):x}.{ZONE}", True) for _ in range(count)]
    # Types 1000-60000: unassigned, so never held, and each (name, type) pair is new.
    types = [
        wire_query(f"host{rng.randrange(args.records)}.{ZONE}", True, rng.randrange(1000, 60000))
        for _ in range(count)
    ]
    snapshot = Snapshot(index)
    rate(snapshot, working)  # warm the cache for the working set
    for label, queries in (
        ("one hot name", hot),
        ("10k-name working set (cached)", cached),
        ("distinct names (cache misses)", fresh),
        ("random-name flood (NXDOMAIN)", missing),
        ("random-qtype flood (NODATA)", types),
    ):
        print(f"{label:34} {rate(snapshot, queries):>10,.0f} answers per CPU-second")


if __name__ == "__main__":
    main()

"""Time an NSEC3 zone's chain: built whole for a zone version, patched from the previous
version's when a few owners change (as the zone source swaps versions owner by owner),
an NXDOMAIN answer proven from it, and the signed AXFR's records.

A zone of ``--owners`` owners (A records, with a sprinkling of delegations and empty
non-terminals) is indexed; then, timed with the process's CPU clock: the whole chain
(each name hashed once), a chain patched after one owner is added and one removed
(``ZoneIndex.with_owners_replaced``, then ``chain_for`` from the previous chain), the
same after a bulk change of ``--bulk`` owners, NXDOMAIN answers for random names (DO=1,
signed per query), and with ``--axfr`` the fully signed transfer's records: every RRset
signed the first time, the same version again (from the signatures kept for transfers),
and a version with one owner replaced (only what it touched signed); then, traced by
``tracemalloc``, the memory the signatures kept for transfers take. Run from the
repository root:

    .venv/bin/python benchmarks/nsec3_chain.py [--owners 100000] [--bulk 1000] [--axfr]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable

import dns.message
from zone_rows import ZONE, rows  # beside this script

from valis_core.dns import dnssec, wire
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.dnssec import nsec3
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.transfer.signed import signed_zone_records
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ServedZone, ZoneIndex


def cpu(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The median CPU seconds of ``repeat`` runs, and the last run's result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.process_time()
        result = run()
        times.append(time.process_time() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owners", type=int, default=100_000)
    parser.add_argument("--bulk", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--axfr", action="store_true")
    args = parser.parse_args()
    params = Nsec3Params()
    index = ZoneIndex.from_records(rows(args.owners, mixed=True))
    (zone,) = index.served()
    print(f"zone of {args.owners} owners: {len(zone.nodes)} names with data, "
          f"{len(zone.empty_nonterminals)} empty non-terminals, {len(zone.cuts)} delegations")

    whole, chain = cpu(lambda: nsec3.chain_for(zone, params), args.repeat)
    assert isinstance(chain, nsec3.Chain)
    print(f"whole chain: {len(chain.ring)} NSEC3, {whole * 1000:.0f} ms CPU")

    def patched(count: int) -> tuple[float, float]:
        rng = random.Random(count)
        gone = [f"host{i}.{ZONE}" for i in rng.sample(range(1, args.owners, 10), count)]
        new = [f"new{i}.{ZONE}" for i in range(count)]
        rows_new = [RecordRow(ZONE, name, "A", 300, "192.0.2.9") for name in new]
        changed = index.with_owners_replaced(ZONE, [*gone, *new], rows_new)
        (after,) = changed.served()
        took, result = cpu(lambda: nsec3.chain_for(after, params, chain), args.repeat)
        assert isinstance(result, nsec3.Chain)
        assert list(result.ring) == list(nsec3.chain_for(after, params).ring)
        patch, _ = cpu(lambda: index.with_owners_replaced(ZONE, [*gone, *new], rows_new), 1)
        return took, patch

    took, patch = patched(1)
    print(f"chain after 1 owner added and 1 removed: {took * 1000:.1f} ms CPU "
          f"(the index patch itself: {patch * 1000:.1f} ms)")
    took, patch = patched(args.bulk)
    print(f"chain after {args.bulk} added and {args.bulk} removed: {took * 1000:.1f} ms CPU "
          f"(the index patch itself: {patch * 1000:.1f} ms)")

    apex = wire.from_text(ZONE)
    for algorithm in dnssec.ALGORITHMS:
        key = dnssec.ZoneKey(dnssec.generate_key(algorithm))
        signer = Signer({apex: key}, clock=time.time, nsec3={apex: params})
        snapshot = Snapshot(index, signer=signer)
        signer.chain(zone)
        rng = random.Random(algorithm)
        wires = [dns.message.make_query(f"nx{rng.getrandbits(48):x}.{ZONE}", "A",
                                        want_dnssec=True, use_edns=0).to_wire()
                 for _ in range(args.queries)]
        start = time.process_time()
        for query in wires:
            answer(snapshot, query, transport=Transport.UDP)
        per = (time.process_time() - start) / len(wires)
        print(f"algorithm {algorithm}: NXDOMAIN with NSEC3 proof (3 NSEC3 signed per query): "
              f"{per * 1e6:.0f} us CPU per answer")
        if args.axfr:
            axfr(signer, index, zone, args.owners)


def axfr(signer: Signer, index: ZoneIndex, zone: ServedZone, owners: int) -> None:
    """The signed AXFR's records: signed the first time, the same version again (its
    signatures kept for transfers), and a version with one owner replaced, with the
    signatures each made; and the memory keeping a version's signatures takes."""
    key = signer.zones[zone.apex].key
    assert key is not None
    algorithm = key.algorithm

    def transfer(version: ServedZone = zone, window: int = signer.window()) -> int:
        return sum(1 for _ in signed_zone_records(version, signer, window))

    made = signer.made
    first, records = cpu(transfer, 1)
    first_made = signer.made - made
    made = signer.made
    again, _ = cpu(transfer, 1)
    again_made = signer.made - made
    gone, new = f"host{owners // 2 + 1}.{ZONE}", f"added.{ZONE}"
    changed = index.with_owners_replaced(
        ZONE, [gone, new], [RecordRow(ZONE, new, "A", 300, "192.0.2.9")])
    (after,) = changed.served()
    made = signer.made
    patched, _ = cpu(lambda: transfer(after), 1)
    patched_made = signer.made - made
    print(f"algorithm {algorithm}: signed AXFR records: {records}; first {first:.1f} s CPU "
          f"({first_made} signatures made); the same version again {again:.2f} s "
          f"({again_made} made); after one owner replaced {patched:.2f} s ({patched_made} "
          "made)")
    fresh = Signer({zone.apex: key}, clock=time.time,
                   nsec3={zone.apex: signer.chain(zone).params})
    fresh.chain(zone)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    sum(1 for _ in signed_zone_records(zone, fresh, fresh.window()))
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    count = fresh.cached_by_zone()[zone.apex]
    print(f"algorithm {algorithm}: the transfer's {count} signatures kept cost "
          f"{kept / 2**20:.0f} MiB ({kept / count:.0f} bytes each)")

if __name__ == "__main__":
    main()

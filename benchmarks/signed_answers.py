"""Time signed answers on the pure answer path, with no sockets, beside unsigned ones.

A zone of ``--records`` A records is signed with algorithm 13 and with 15; for each, and
for the zone unsigned, ``answer()`` is timed over: one hot name (the response cache),
a working set of names seen before (cached, DO=1 signed responses kept per refresh
window), names seen once each (each a new RRset to sign: a signature made per query) and
random nonexistent names (compact denial: an NSEC made and signed per query). Reports
answers per second and CPU microseconds per answer. With ``--split`` the zone is also
signed with a KSK and a ZSK of each algorithm (the ZSK signing every answer timed). Run
from the repository root:

    .venv/bin/python benchmarks/signed_answers.py [--records N] [--queries N] [--split]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import random
import time

import dns.message
from zone_rows import ZONE, rows  # beside this script

from valis_core.dns import dnssec, wire
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import Signer, ZoneKeys
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.zone import ZoneIndex


def queries(names: list[str], *, do: bool) -> list[bytes]:
    return [
        dns.message.make_query(name, "A", want_dnssec=do, use_edns=0).to_wire()
        for name in names
    ]


def signer(algorithm: int, *, split: bool) -> Signer:
    """A signer for the zone: one CSK, or with ``split`` a KSK and a ZSK."""
    key = dnssec.ZoneKey(dnssec.generate_key(algorithm))
    if not split:
        return Signer({wire.from_text(ZONE): key}, clock=time.time)
    zsk = dnssec.ZoneKey(dnssec.generate_key(algorithm), dnssec.ZSK_FLAGS)
    keys = ZoneKeys(signer=zsk, published=(key, zsk), key_signers=(key,), parent=(key,))
    return Signer({wire.from_text(ZONE): keys}, clock=time.time)


def run(snapshot: Snapshot, wires: list[bytes]) -> tuple[float, float]:
    """Answers per second and CPU microseconds per answer."""
    start, cpu = time.perf_counter(), time.process_time()
    for query in wires:
        answer(snapshot, query, transport=Transport.UDP)
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    return len(wires) / wall, used / len(wires) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=20000)
    parser.add_argument("--split", action="store_true",
                        help="also time each algorithm signed with a KSK and a ZSK")
    args = parser.parse_args()
    index = ZoneIndex.from_records(rows(args.records))
    rng = random.Random(19)
    hot = [f"host1.{ZONE}"] * args.queries
    working = [f"host{rng.randrange(1000)}.{ZONE}" for _ in range(args.queries)]
    once = [f"host{i % args.records}.{ZONE}" for i in range(args.queries)]
    nxdomain = [f"nx{rng.getrandbits(48):x}.{ZONE}" for _ in range(args.queries)]
    mixes = {"hot name": hot, "working set": working, "seen once": once,
             "random NXDOMAIN": nxdomain}
    print(f"{args.records} records, {args.queries} queries per mix; answers/s, CPU us/answer")
    kinds: list[tuple[str, int | None, bool]] = [
        ("unsigned", None, False), ("alg 13", 13, False), ("alg 15", 15, False),
    ]
    if args.split:
        kinds += [("13 split", 13, True), ("15 split", 15, True)]
    for label, algorithm, split in kinds:
        for mix, names in mixes.items():
            if algorithm is None:
                snapshot = Snapshot(index)
            else:
                snapshot = Snapshot(index, signer=signer(algorithm, split=split))
            wires = queries(names, do=algorithm is not None)
            rate, cpu = run(snapshot, wires)
            print(f"{label:9} {mix:16} {rate:10.0f} /s {cpu:8.1f} us")


if __name__ == "__main__":
    main()

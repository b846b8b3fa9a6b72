"""Time what one change of a zone signed online costs, step by step, as the zone grows.

For each size in ``--sizes`` (records in one zone, ``zone_rows``' mixed zone: hosts,
delegations with glue, names beneath empty non-terminals), each algorithm (13, ECDSA
P-256, production's default; 15, Ed25519) and each denial (NSEC3, RFC 9276's parameters;
compact), a signed zone is served as the resident serves it: an ``IndexHolder`` whose
signer ``signer_for`` made, warmed by one signed answer and one denial (the NSEC3 chain
made whole). Then ``--changes`` times, a change of one owner, alternately one that
appears (a new name: its NSEC3 neighbours change) and one that goes, each timed in wall
seconds step by step as the resident takes it:

- patch: ``ZoneIndex.with_owners_replaced`` (the zone version; another helper's item),
- swap: ``IndexHolder.swap`` (the signer kept),
- signer: the next signer made carrying the last one (``signer_for(carry=...)``, as
  ``SigningFollower`` makes it when the signing rows change) and handed to the holder,
- answer: one DO=1 question at the changed name (for a name gone, at a host beside it),
- denial: one DO=1 question for a name that does not exist beside it (NXDOMAIN with the
  closest encloser proof from the NSEC3 chain; compact: an NSEC made per query),

and the signatures each change made (what was re-signed). Reports the median and the
maximum of each step. Run from the repository root:

    .venv/bin/python benchmarks/resign_change.py [--sizes 10000,100000,1000000]

These are figures for the docs, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import dns.message
import dns.rcode
from zone_rows import ZONE, host_address, rows  # beside this script

from valis_core.dns import dnssec
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.dnssec.zone_keys import file_zone
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.zone_signing import ZoneSigning
from valis_core.resident.signing import signer_for

STEPS = ("patch", "swap", "signer", "answer", "denial")


def timed(run: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def ask(holder: IndexHolder, name: str) -> bytes:
    query = dns.message.make_query(name, "A", want_dnssec=True, use_edns=0, id=1)
    response = answer(holder.snapshot, query.to_wire(), transport=Transport.UDP)
    assert response is not None
    return response


def make_signer(key: dnssec.ZoneKey, denial: Nsec3Params | None, clock: Callable[[], float],
                carry: Signer | None = None) -> Signer:
    rows_ = {ZONE: ZoneSigning(ZONE, key.algorithm, key.tag)}
    ring = {file_zone(ZONE): {key.tag: key}}
    nsec3 = {} if denial is None else {ZONE: denial}
    made, _ = signer_for(rows_, ring, [ZONE], nsec3, carry=carry, clock=clock)
    assert made is not None
    return made


def one_size(size: int, changes: int) -> None:
    start = time.perf_counter()
    index = ZoneIndex.from_records(rows(size, mixed=True))
    print(f"\n{size} records: zone built in {time.perf_counter() - start:.1f} s")
    for algorithm in (dnssec.ECDSAP256SHA256, dnssec.ED25519):
        key = dnssec.ZoneKey(dnssec.generate_key(algorithm))
        for denial in (Nsec3Params(), None):
            run(index, size, key, denial, changes)


def run(index: ZoneIndex, size: int, key: dnssec.ZoneKey, denial: Nsec3Params | None,
        changes: int) -> None:
    now = 1_800_000_000.0

    def clock() -> float:
        return now

    holder = IndexHolder(index, make_signer(key, denial, clock))
    warm, _ = timed(lambda: (ask(holder, f"host1.{ZONE}"), ask(holder, f"nx.{ZONE}")))
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    made: list[int] = []
    served = index
    for n in range(changes):
        signer = holder.signer
        assert signer is not None
        before = signer.made
        if n % 2 == 0:  # a new name appears
            name = f"new{n}.{ZONE}"
            new = [RecordRow(ZONE, name, "A", 300, host_address(n))]
            asked = name
        else:  # a host goes; asked: the one beside it
            at = (size // changes) * n + 1
            at += at % 10 == 0 or at % 100 == 0  # a plain host in the mixed zone
            name, new, asked = f"host{at}.{ZONE}", [], f"host{at + 1}.{ZONE}"
        took, patched = timed(lambda: served.with_owners_replaced(ZONE, [name], new))  # noqa: B023
        assert isinstance(patched, ZoneIndex)
        served = patched
        times["patch"].append(took)
        times["swap"].append(timed(lambda: holder.swap(patched))[0])  # noqa: B023
        times["signer"].append(timed(lambda: holder.sign_with(
            make_signer(key, denial, clock, carry=holder.signer)))[0])
        times["answer"].append(timed(lambda: ask(holder, asked))[0])  # noqa: B023
        missing = f"{name[: -len(ZONE) - 1]}x.{ZONE}"
        took, response = timed(lambda: ask(holder, missing))  # noqa: B023
        assert isinstance(response, bytes)
        assert dns.message.from_wire(response).rcode() == (
            dns.rcode.NOERROR if denial is None else dns.rcode.NXDOMAIN)  # compact: NOERROR
        times["denial"].append(took)
        after = holder.signer
        assert after is not None
        made.append(after.made - before)
    kind = "compact" if denial is None else "NSEC3"
    cells = "  ".join(
        f"{step} {statistics.median(spent) * 1e3:.2f}/{max(spent) * 1e3:.2f}"
        for step, spent in times.items()
    )
    total = [sum(parts) for parts in zip(*times.values(), strict=True)]
    print(f"  alg {key.algorithm:2d} {kind:7s} warm {warm * 1e3:8.1f} ms | ms median/max: "
          f"{cells}  | total {statistics.median(total) * 1e3:.2f}/{max(total) * 1e3:.2f} | "
          f"signatures made per change {statistics.median(made):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args()
    for size in (int(part) for part in args.sizes.split(",")):
        one_size(size, args.changes)


if __name__ == "__main__":
    main()

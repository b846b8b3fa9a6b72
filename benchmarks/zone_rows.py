"""The generated zone the pure-path benchmarks index (answer_micro, signed_answers,
nsec3_chain): an apex, then ``count`` owners named ``host{i}`` with one A record each,
so their figures are of the same zone."""

from __future__ import annotations

from collections.abc import Iterator

from valis_core.dns.wire.records import RecordRow

ZONE = "bench.example."


def host_address(i: int) -> str:
    """Owner ``i``'s address, distinct for the first 2**24 owners."""
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def rows(count: int, *, mixed: bool = False) -> Iterator[RecordRow]:
    """The zone's records; ``mixed`` makes every hundredth owner a delegation with glue
    beneath it and every tenth else an owner beneath an empty non-terminal, the shapes
    a denial chain has to step over."""
    soa = f"ns1.{ZONE} hostmaster.{ZONE} 1 7200 3600 1209600 300"
    yield RecordRow(ZONE, ZONE, "SOA", 3600, soa)
    yield RecordRow(ZONE, ZONE, "NS", 3600, f"ns1.{ZONE}")
    yield RecordRow(ZONE, f"ns1.{ZONE}", "A", 3600, "192.0.2.1")
    for i in range(count):
        if mixed and i % 100 == 0:
            yield RecordRow(ZONE, f"sub{i}.{ZONE}", "NS", 3600, f"ns.sub{i}.{ZONE}")
            yield RecordRow(ZONE, f"ns.sub{i}.{ZONE}", "A", 3600, "192.0.2.2")
        elif mixed and i % 10 == 0:
            yield RecordRow(ZONE, f"x.ent{i}.{ZONE}", "A", 300, "192.0.2.3")
        else:
            yield RecordRow(ZONE, f"host{i}.{ZONE}", "A", 300, host_address(i))

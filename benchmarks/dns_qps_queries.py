"""The zone and the query files `make bench` drives every server with.

Each query kind is one picker (a seeded random source and the zone's size in, one
dnsperf line out); a mix is a weighted choice among kinds, so the normal mix and the
per-kind runs ask exactly the same sorts of question. Pure: no sockets, no files.
"""

from __future__ import annotations

import random
from collections.abc import Callable

ZONE = "bench.example."

Picker = Callable[[random.Random, int], str]


def generate_zone(names: int) -> str:
    """``names`` hosts with an A record, every tenth also AAAA, every twentieth an alias
    CNAME to it; apex SOA, NS and MX with in-zone glue."""
    lines = [
        f"$ORIGIN {ZONE}",
        "$TTL 3600",
        "@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300",
        "@ IN NS ns1",
        "@ IN NS ns2",
        "@ IN MX 10 mail",
        "ns1 IN A 192.0.2.1",
        "ns2 IN A 192.0.2.2",
        "mail IN A 192.0.2.25",
    ]
    for i in range(1, names + 1):
        lines.append(f"host{i} IN A 198.51.100.{i % 254 + 1}")
        if i % 10 == 0:
            lines.append(f"host{i} IN AAAA 2001:db8::{i:x}")
        if i % 20 == 0:
            lines.append(f"alias{i} IN CNAME host{i}")
    return "\n".join(lines) + "\n"


def _a_hit(rng: random.Random, names: int) -> str:
    return f"host{rng.randint(1, names)}.{ZONE} A"


def _aaaa_hit(rng: random.Random, names: int) -> str:
    return f"host{rng.randint(1, names // 10) * 10}.{ZONE} AAAA"


def _cname(rng: random.Random, names: int) -> str:
    return f"alias{rng.randint(1, names // 20) * 20}.{ZONE} A"


def _nxdomain(rng: random.Random, names: int) -> str:
    return f"missing{rng.randint(1, names)}.{ZONE} A"


def _nodata(rng: random.Random, names: int) -> str:
    return f"host{rng.randint(1, names)}.{ZONE} MX"


def _apex(rng: random.Random, names: int) -> str:
    return f"{ZONE} {rng.choice(['SOA', 'NS', 'MX'])}"


def _random_name(rng: random.Random, names: int) -> str:
    # 48 random bits: in 100 000 lines a repeat is rare, so no answer comes from a cache.
    return f"r{rng.getrandbits(48):x}.{ZONE} A"


def _random_qtype(rng: random.Random, names: int) -> str:
    # Types 1000-60000 at hosts that exist: NODATA, nearly every (name, type) pair new.
    return f"host{rng.randint(1, names)}.{ZONE} TYPE{rng.randrange(1000, 60000)}"


# kind -> (what it asks, in a few words; its picker)
KINDS: dict[str, tuple[str, Picker]] = {
    "a": ("A hit", _a_hit),
    "aaaa": ("AAAA hit", _aaaa_hit),
    "cname": ("A via CNAME", _cname),
    "nxdomain": ("NXDOMAIN", _nxdomain),
    "nodata": ("NODATA (MX of a host)", _nodata),
    "apex": ("apex SOA/NS/MX", _apex),
    "random-name": ("random-name flood", _random_name),
    "random-qtype": ("random-qtype flood", _random_qtype),
}

# mix -> (seed, (kind, weight) ...); the weights of a mix sum to 1.
MIXES: dict[str, tuple[int, tuple[tuple[str, float], ...]]] = {
    "normal": (1, (("a", 0.60), ("aaaa", 0.10), ("cname", 0.10), ("nxdomain", 0.10),
                   ("nodata", 0.05), ("apex", 0.05))),
    "random-name": (2, (("random-name", 1.0),)),
    "random-qtype": (3, (("random-qtype", 1.0),)),
}

# The kinds measured on their own; the floods are measured as mixes (the same queries).
SINGLE_KINDS = ("a", "aaaa", "cname", "nxdomain", "nodata", "apex")
KIND_SEED_BASE = 100


def mix_queries(mix: str, names: int, count: int) -> str:
    """``count`` dnsperf lines of ``mix``, the same on every call (seeded)."""
    seed, weights = MIXES[mix]
    return _draw(random.Random(seed), weights, names, count)


def kind_queries(kind: str, names: int, count: int) -> str:
    """``count`` dnsperf lines of one query kind alone, the same on every call."""
    seed = KIND_SEED_BASE + list(KINDS).index(kind)
    return _draw(random.Random(seed), ((kind, 1.0),), names, count)


def _draw(
    rng: random.Random, weights: tuple[tuple[str, float], ...], names: int, count: int
) -> str:
    lines = []
    for _ in range(count):
        if len(weights) == 1:
            kind = weights[0][0]
        else:
            roll, bound, kind = rng.random(), 0.0, weights[-1][0]
            for candidate, weight in weights:
                bound += weight
                if roll < bound:
                    kind = candidate
                    break
        lines.append(KINDS[kind][1](rng, names))
    return "\n".join(lines) + "\n"

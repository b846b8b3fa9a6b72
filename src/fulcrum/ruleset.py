"""The unit's default-deny firewall, rendered as one ``nft -f`` transaction.

fulcrum owns exactly one nftables table inside the unit's netns (``inet fulcrum``). Its
input chain drops by default and accepts loopback, established and related return
traffic, IPv6 neighbour discovery (IPv6's ARP, which an ``inet`` table would otherwise
filter; ARP itself never passes an ``inet`` hook), and one rule per (protocol, port) of
the accept set — nothing else. The script declares the table, deletes it and defines it
again, so applying it replaces whatever an earlier run left in one atomic transaction,
whether or not the table existed.

Pure: text in, text out.
"""

from __future__ import annotations

import re

PROTOCOLS: frozenset[str] = frozenset({"tcp", "udp"})
DEFAULT_TABLE = "fulcrum"
_TABLE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")


def render_ruleset(accept: frozenset[tuple[str, int]], table: str = DEFAULT_TABLE) -> str:
    """The ``nft -f`` script that (re)places table ``inet <table>`` accepting ``accept``."""
    _check_table(table)
    for proto, port in accept:
        if proto not in PROTOCOLS:
            raise ValueError(f"protocol {proto!r} is not one of {sorted(PROTOCOLS)}")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"{port!r} is not a port 1..65535")
    rules = [
        'iif "lo" accept',
        "ct state established,related accept",
        "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert } accept",
    ]
    rules += [f"{proto} dport {port} accept" for proto, port in sorted(accept)]
    body = "\n".join(f"\t\t{rule}" for rule in rules)
    return (
        f"table inet {table} {{}}\n"
        f"delete table inet {table}\n"
        f"table inet {table} {{\n"
        "\tchain input {\n"
        "\t\ttype filter hook input priority filter; policy drop;\n"
        f"{body}\n"
        "\t}\n"
        "}\n"
    )


def render_removal(table: str = DEFAULT_TABLE) -> str:
    """The ``nft -f`` script that removes the table, present or not."""
    _check_table(table)
    return f"table inet {table} {{}}\ndelete table inet {table}\n"


def _check_table(table: str) -> None:
    if not _TABLE_RE.fullmatch(table):
        raise ValueError(f"{table!r} is not an nftables table name fulcrum uses")

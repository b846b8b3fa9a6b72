"""Properties of the rendered default-deny firewall."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fulcrum.ruleset import render_removal, render_ruleset

Accept = frozenset[tuple[str, int]]
accepts = st.frozensets(st.tuples(st.sampled_from(["tcp", "udp"]), st.integers(1, 65535)),
                        max_size=8)
PORT_RULE = re.compile(r"^\t\t(tcp|udp) dport (\d+) accept$", re.MULTILINE)


@given(accepts)
def test_the_rendered_table_accepts_exactly_the_accept_set(accept: Accept) -> None:
    script = render_ruleset(accept)
    assert {(proto, int(port)) for proto, port in PORT_RULE.findall(script)} == accept
    assert len(PORT_RULE.findall(script)) == len(accept)


@given(accepts)
def test_the_table_drops_by_default_and_lets_only_loopback_and_replies_through(
    accept: Accept,
) -> None:
    script = render_ruleset(accept)
    assert "type filter hook input priority filter; policy drop;" in script
    rules = [line.strip() for line in script.splitlines() if line.endswith("accept")]
    fixed = [rule for rule in rules if not PORT_RULE.match("\t\t" + rule)]
    assert fixed[:2] == ['iif "lo" accept', "ct state established,related accept"]
    assert len(fixed) == 3
    assert fixed[2].startswith("icmpv6 type {")


@given(accepts, st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True))
def test_the_script_replaces_the_table_in_one_transaction(accept: Accept, table: str) -> None:
    lines = render_ruleset(accept, table).splitlines()
    # Declaring first makes the delete valid whether or not an earlier run left the table.
    assert lines[:3] == [f"table inet {table} {{}}", f"delete table inet {table}",
                         f"table inet {table} {{"]
    assert render_removal(table).splitlines() == lines[:2]


@pytest.mark.parametrize(
    "accept",
    [frozenset({("sctp", 53)}), frozenset({("tcp", 0)}), frozenset({("udp", 65536)}),
     frozenset({("tcp", True)})],
)
def test_an_accept_nft_could_not_mean_is_refused(accept: Accept) -> None:
    with pytest.raises(ValueError, match="is not"):
        render_ruleset(accept)


def test_a_table_name_that_could_smuggle_a_statement_is_refused() -> None:
    with pytest.raises(ValueError, match="not an nftables table name"):
        render_ruleset(frozenset(), table="fulcrum; flush ruleset")

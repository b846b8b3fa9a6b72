"""fulcrum's one nftables table in a real netns: replaced whole, removed cleanly."""

from __future__ import annotations

import re

import pytest

from fulcrum.errors import LauncherError
from fulcrum.firewall import apply_ruleset, list_table, remove_ruleset
from tests.conftest import require_root
from tests.scenario.proving_ground import run, scratch_netns


def port_accepts(listing: str) -> set[tuple[str, int]]:
    return {(p, int(n)) for p, n in re.findall(r"(tcp|udp) dport (\d+) accept", listing)}


def test_applying_again_replaces_the_table_rather_than_adding_to_it() -> None:
    require_root()
    with scratch_netns() as netns:
        apply_ruleset(netns, frozenset({("udp", 53), ("tcp", 53), ("tcp", 443)}))
        apply_ruleset(netns, frozenset({("udp", 53), ("tcp", 53)}))
        listing = list_table(netns)
        assert listing is not None
        assert port_accepts(listing) == {("udp", 53), ("tcp", 53)}
        tables = run(["ip", "netns", "exec", netns, "nft", "list", "tables"]).stdout
        assert tables.split("\n").count("table inet fulcrum") == 1


def test_removing_leaves_no_table_and_is_harmless_twice() -> None:
    require_root()
    with scratch_netns() as netns:
        apply_ruleset(netns, frozenset({("udp", 53)}))
        remove_ruleset(netns)
        remove_ruleset(netns)
        assert list_table(netns) is None
    remove_ruleset(netns)  # the netns itself is gone: nothing to remove


def test_a_missing_netns_is_a_launcher_error_not_a_traceback() -> None:
    require_root()
    with pytest.raises(LauncherError, match="applying firewall table inet fulcrum in netns"):
        apply_ruleset("vl-no-such-ns", frozenset({("udp", 53)}))

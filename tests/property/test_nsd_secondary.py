"""Properties of the NSD configuration rendered for one secondary
(``valis_core.operator_state.nsd_secondary``): every zone that lists the address has one
``zone:`` stanza transferring from each primary, every key it uses one ``key:`` section,
nothing of other addresses leaks in, and NSD's own checker (``nsd-checkconf``) accepts the
whole file."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.scenario.nsd_conf import nsd_server
from valis_core.operator_state.nsd_secondary import nsd_conf
from valis_core.operator_state.secondaries import Secondary, SecondaryError

ADDRESSES = ("192.0.2.2", "192.0.2.3", "2001:db8::2")
KEYS = {"a.": bytes(range(32)), "b.": bytes(range(1, 33))}

listings = st.lists(
    st.builds(
        Secondary,
        st.from_regex(r"[a-z]{1,8}\.(test|example)\.", fullmatch=True),
        st.sampled_from(ADDRESSES),
        st.sampled_from(sorted(KEYS)),
        st.just("hmac-sha256"),
        st.just(b""),
    ).map(lambda s: Secondary(s.zone, s.address, s.key_name, s.algorithm, KEYS[s.key_name])),
    min_size=1, max_size=12, unique_by=lambda s: (s.zone, s.address),
)
primaries = st.lists(st.sampled_from(["192.0.2.1", "198.51.100.1", "2001:db8::1"]),
                     min_size=1, max_size=3, unique=True)


@given(listings, primaries)
def test_each_zone_of_the_address_once_from_every_primary(
    listed: list[Secondary], nodes: list[str]
) -> None:
    address = listed[0].address
    text = nsd_conf(listed, address, nodes)
    zones = re.findall(r'^zone:\n    name: "([^"]+)"', text, re.MULTILINE)
    assert sorted(zones) == sorted(s.zone for s in listed if s.address == address)
    used = {s.key_name for s in listed if s.address == address}
    assert sorted(re.findall(r'^key:\n    name: "([^"]+)"', text, re.MULTILINE)) == sorted(used)
    for node in nodes:
        assert text.count(f"request-xfr: {node} ") == len(zones)
        assert text.count(f"allow-notify: {node} ") == len(zones)
    for other in {s.zone for s in listed if s.address != address} - set(zones):
        assert f'"{other}"' not in text


@settings(max_examples=scaled(0.2))
@given(listings, primaries)
def test_nsd_checkconf_accepts_it(listed: list[Secondary], nodes: list[str]) -> None:
    address = listed[0].address
    with tempfile.TemporaryDirectory() as work:
        conf = Path(work) / "nsd.conf"
        conf.write_text(nsd_server(Path(work), address) + nsd_conf(listed, address, nodes))
        checked = subprocess.run(["nsd-checkconf", str(conf)], capture_output=True,
                                 text=True, timeout=30, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_address_listed_nowhere_or_a_key_with_two_secrets_is_refused() -> None:
    one = Secondary("a.test.", "192.0.2.2", "k.", "hmac-sha256", bytes(32))
    with pytest.raises(SecondaryError, match=re.escape("no zone lists a secondary at 192.0.2.9")):
        nsd_conf([one], "192.0.2.9", ["192.0.2.1"])
    other = Secondary("b.test.", "192.0.2.2", "k.", "hmac-sha256", bytes(range(32)))
    two = re.escape("another secret for b.test. than for a.test.")
    with pytest.raises(SecondaryError, match=two):
        nsd_conf([one, other], "192.0.2.2", ["192.0.2.1"])
    with pytest.raises(SecondaryError, match="--primary"):
        nsd_conf([one], "192.0.2.2", [])

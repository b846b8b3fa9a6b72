"""The node's status counts its uptime from when bring-up made its views, by the views'
clock: a test moves that clock instead of waiting, and a wall clock stepped back shows an
uptime of zero, never a negative one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.property.node_views import views as node_views
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.zone import ZoneIndex

ZONE_TEXT = """$ORIGIN example.test.
$TTL 300
@ IN SOA ns1 hostmaster 7 7200 900 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
"""
HOLDER = IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, "example.test."))
MOMENTS = st.floats(1e9, 4e9)


@given(MOMENTS, st.floats(-1e6, 1e8))
def test_uptime_is_the_clocks_time_since_the_views_were_made(made: float, later: float) -> None:
    now = [made]
    views = node_views(HOLDER, clock=lambda: now[0])
    assert views.started_at == made
    now[0] = made + later
    status = views.status()
    assert status.started_at == made
    assert status.uptime_seconds == max(0.0, (made + later) - made)

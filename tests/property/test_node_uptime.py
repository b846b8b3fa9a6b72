"""The node's status counts its uptime from when bring-up made its views, by the views'
clock: a test moves that clock instead of waiting, and a wall clock stepped back shows an
uptime of zero, never a negative one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.zone_source import ZoneSourceStats
from valis_core.resident.views import NodeViews

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
    views = NodeViews(
        node="node-a",
        location="rack-1",
        owner_public_key="00" * 32,
        store_generation=0,
        zones=("example.test.",),
        holder=HOLDER,
        serve_stats=ServeStats(),
        zone_stats=ZoneSourceStats(),
        fence_generation=lambda: 0,
        heartbeats=lambda: 1,
        clock=lambda: now[0],
    )
    assert views.started_at == made
    now[0] = made + later
    status = views.status()
    assert status.started_at == made
    assert status.uptime_seconds == max(0.0, (made + later) - made)

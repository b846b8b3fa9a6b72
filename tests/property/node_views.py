"""A node's views (``/status``, the metrics) over one holder, for the tests of what a node
says: node ``node-a`` serving ``example.test.``, every other figure at rest."""

from __future__ import annotations

from valis_core.clock import Clock, wall
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeStats
from valis_core.operator_state.zone_source import ZoneSourceStats
from valis_core.resident.views import NodeViews


def views(holder: IndexHolder, clock: Clock = wall) -> NodeViews:
    return NodeViews(
        node="node-a",
        location="rack-1",
        owner_public_key="00" * 32,
        store_generation=0,
        zones=("example.test.",),
        holder=holder,
        serve_stats=ServeStats(),
        zone_stats=ZoneSourceStats(),
        fence_generation=lambda: 0,
        heartbeats=lambda: 1,
        clock=clock,
    )

"""The ``fabric`` stage: the node's views (``resident.views``) made from what bring-up
has so far, the internal endpoint (``resident.fabric``) started on them, and its public
view asked for every served apex SOA before DNS is served: an answer proves the whole
answering path, a refusal stops the boot naming the zone (and, for a signed zone whose
key this node lacks, what restores it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

import attrs

from valis_core.boot import Boot, BringUpError, need
from valis_core.boot import boot_log as log

if TYPE_CHECKING:
    from valis_core.resident.fabric import FabricAddress
    from valis_core.resident.views import NodeViews


async def start_fabric(boot: Boot) -> Boot:
    from valis_core.dns import wire
    from valis_core.resident.fabric import Fabric
    from valis_core.resident.views import NodeViews

    config, source, watch = need(boot.config), need(boot.source), need(boot.watch)
    pair = need(boot.adopted).adoption
    views = NodeViews(
        node=config.node_name,
        location=config.location,
        owner_public_key=boot.owner_key,
        store_generation=need(boot.manifest).generation,
        zones=source.zones,
        holder=need(boot.holder),
        serve_stats=need(boot.stats),
        zone_stats=source.stats,
        fence_generation=lambda: watch.fence_generation,
        heartbeats=lambda: watch.beats,
        failed_heartbeats=lambda: watch.failed_beats,
        dns_udp=pair.dns_udp.address,
        dns_tcp=pair.dns_tcp.address,
        dns_reachability=boot.reachability,
        fence_holder=lambda: None if watch.fence is None else watch.fence.holder,
        database=lambda: (watch.connected, watch.connected_since),
        modules=tuple(f"{pin.name}=={pin.version}" for pin in need(boot.manifest).modules),
    )
    state_dir = need(boot.state_dir)
    fabric = Fabric(state_dir, views)
    address: FabricAddress = await boot.services.start("fabric", fabric.serve)
    log.info("fabric: listening on %s (token in %s)", address.url, state_dir)
    signer = need(boot.holder).signer
    lacking = () if signer is None else tuple(wire.to_text(apex) for apex in signer.lacking)
    serials = await check_public_view(address, fabric.token, source.zones, lacking, views)
    log.info("fabric: the public view answered every served apex SOA (%s)", serials)
    return attrs.evolve(boot, views=views)


async def check_public_view(
    address: FabricAddress,
    token: str,
    zones: Sequence[str],
    lacking: Sequence[str] = (),
    views: NodeViews | None = None,
) -> str:
    """Ask the fabric's public view for every served apex SOA; raise unless each is
    answered authoritatively. ``lacking`` names the signed zones whose key this node
    lacks (answered SERVFAIL), so the refusal says why and what restores them. Returns
    "zone serial N, ..." for the log.

    The first zone is asked over the real endpoint, which proves it; given the
    ``views`` it serves, the others are asked of the same view the endpoint's route
    answers from (``public_soa``) without a connection each, which a node serving
    thousands of zones would otherwise spend seconds on before it is ready."""
    from valis_core.resident.fabric import fabric_get
    from valis_core.resident.status_document import SOA_ANSWER, SoaAnswer, StatusRefused
    from valis_core.resident.views import public_soa

    shown = []
    for number, zone in enumerate(zones):
        view: SoaAnswer | None
        if number == 0 or views is None:
            status, body = await fabric_get(address, token, f"/view/soa?zone={quote(zone)}")
            try:
                view = SOA_ANSWER.read(body)
            except StatusRefused:
                view = None
        else:
            view = SOA_ANSWER.structure(public_soa(views.holder, zone).document())
            status = 200 if view.answered else 404
        if status != 200 or view is None or not view.answered:
            why = (
                ": the zone is signed in operator state with a key this node's state "
                "directory does not hold (the dnssec line above names it); condense the node "
                "from the backup set of the node that signed it, which carries its keys"
                if zone.lower() in lacking else ""
            )
            raise BringUpError(
                "fabric",
                f"the public view did not answer the apex SOA of {zone} (HTTP {status}, "
                f"rcode {None if view is None else view.rcode}){why}",
            )
        shown.append(f"{zone} serial {view.serial}")
    return ", ".join(shown)

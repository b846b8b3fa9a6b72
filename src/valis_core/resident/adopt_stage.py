"""The ``adopt`` stage: the descriptors fulcrum handed down, each asked what it is
(``resident.descriptors``, judged by ``resident.adopt``), adopted for the stages after
it and closed at teardown. Beside ``descriptors``, not in it: the boot names
``AdoptedSockets``, so the stage that makes them sits in a module of its own.
"""

from __future__ import annotations

import attrs

from valis_core.boot import Boot, need
from valis_core.boot import boot_log as log
from valis_core.resident.adopt import adopted_dns_reachability
from valis_core.resident.descriptors import AdoptedSockets, adopt_descriptors


def _close_listeners(adopted: AdoptedSockets) -> None:
    adopted.close()
    log.info("listener descriptors closed")


async def adopt(boot: Boot) -> Boot:
    record = need(boot.record)
    adopted = adopt_descriptors(record)
    boot.services.stack.callback(_close_listeners, adopted)
    pair = adopted.adoption
    log.info(
        "adopting DNS descriptor pair udp=%s tcp=%s", pair.dns_udp.address,
        pair.dns_tcp.address,
    )
    reachability = adopted_dns_reachability(record, pair)
    if reachability is not None and reachability.problem is not None:
        # Never a refusal (the contract allows the port); said wherever it can be read.
        log.warning("adopt: %s", reachability.problem)
    if pair.owner is not None:
        log.info("adopting owner descriptor %s (the owner terminus: DNS UPDATE goes there)",
                 pair.owner.address)
    else:
        log.info("owner terminus closed (no owner-port in the launcher config): DNS UPDATE "
                 "on the DNS port is answered NOTIMP")
    if pair.edge is not None:
        log.info("adopting edge descriptor %s (served by the edge stage)", pair.edge.address)
    return attrs.evolve(
        boot, adopted=adopted, reachability=reachability, edge_listener=adopted.edge
    )

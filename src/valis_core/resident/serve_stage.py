"""The ``serve DNS`` stage: the UDP loops (one per UDP socket fulcrum handed down, the DNS
workers, each counting into its own ``ServeStats``; worker 0 counts into the node's, which
the TCP loop shares; under the response rate limits the site facts set, which a reload
can change) and the TCP loop on the adopted pair, both answering from
the index the zone source swaps and offering zone transfers. The serve loops themselves
are the DNS engine's (``dns.serve``, ``dns.limited_udp``); this is the resident starting
them.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import attrs
import trio

from valis_core.boot import Boot, Service, need
from valis_core.boot import boot_log as log

if TYPE_CHECKING:
    from valis_core.dns.serve import ServeStats, TcpDrain
    from valis_core.dns.serve.limited_udp import LimitedUdpWorkers
    from valis_core.dns.serve.transfer_serve import Transfers
    from valis_core.resident.descriptors import AdoptedSockets


async def serve_dns(boot: Boot) -> Boot:
    from valis_core.dns.serve import ServeStats, TcpDrain
    from valis_core.dns.serve.limited_udp import LimitedUdp, LimitedUdpWorkers
    from valis_core.dns.serve.rrl import describe
    from valis_core.operator_state.site_facts import rrl_settings

    adopted = need(boot.adopted)
    settings = rrl_settings(need(boot.config).facts)
    udp = LimitedUdpWorkers([
        LimitedUdp(sock, need(boot.holder), settings,
                   stats=need(boot.stats) if n == 0 else ServeStats(),
                   transfers=need(boot.transfers))
        for n, sock in enumerate(adopted.dns_udps)
    ])
    drain = TcpDrain()
    await boot.services.start(
        "serve DNS", _dns_service(adopted, udp, need(boot.stats), need(boot.transfers), drain),
        drain=drain,
    )
    need(boot.views).rate_limits = lambda: udp.settings
    need(boot.views).udp_workers = udp.stats
    log.info("%s", describe(settings))
    pair = adopted.adoption
    log.info("serving DNS on udp=%s (%d worker%s) tcp=%s", pair.dns_udp.address,
             len(udp.workers), "" if len(udp.workers) == 1 else "s", pair.dns_tcp.address)
    return attrs.evolve(boot, udp=udp)


def _dns_service(
    adopted: AdoptedSockets, udp: LimitedUdpWorkers, stats: ServeStats, transfers: Transfers,
    drain: TcpDrain,
) -> Service:
    """UDP and TCP; stopping drains TCP first (``TcpDrain``: no accepted connection is
    closed with its query unanswered, which a handover would otherwise do), UDP serving
    on meanwhile."""
    from valis_core.dns.serve import serve_tcp

    async def serve(task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(udp.run)
            nursery.start_soon(partial(
                serve_tcp, adopted.dns_tcp, udp.holder, stats=stats, transfers=transfers,
                drain=drain,
            ))
            task_status.started()

    return serve

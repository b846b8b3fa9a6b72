"""The edge's two bring-up stages, both only when the edge is elected (its descriptor
adopted, or a socket pushed to fulcrum): ``acme`` (the certificate kept by ACME when the
served domain and the directory are set: ``certificate_keeper``) and ``edge`` (DNS over
HTTPS served on the listener: ``server``, with the certificate files followed for
renewals). Nothing of the edge is imported before the stage runs.
"""

from __future__ import annotations

from functools import partial

import attrs

from valis_core.boot import Boot, fence_final, need
from valis_core.boot import boot_log as log


def edge_elected(boot: Boot) -> bool:
    return boot.edge_listener is not None


def acme_elected(boot: Boot) -> bool:
    return edge_elected(boot) and need(boot.config).obtains_certificate


async def keep_certificate(boot: Boot) -> Boot:
    from valis_core.edge.certificate import CertificateSlot
    from valis_core.edge.certificate_keeper import CertificateKeeper

    config, watch, state_dir = need(boot.config), need(boot.watch), need(boot.state_dir)
    slot = boot.certificates if boot.certificates is not None else CertificateSlot()
    keeper = CertificateKeeper(
        state_dir=state_dir,
        domain=need(config.served_domain),
        directory_url=need(config.acme_directory_url),
        dsn=config.dsn,
        standing=lambda: watch.standing,
        served_zones=need(boot.source).zones,
        holder=need(boot.holder),
        slot=slot,
    )
    if await keeper.ensure(wait=not config.edge_on_demand) is None:
        # On demand: the keeper's first attempt is at once; the edge comes up when it lands.
        log.info("acme: no certificate yet; asking %s for one for %s while DNS serves",
                 keeper.directory_url, keeper.domain)
    await boot.services.start("acme", fence_final(keeper.run))
    need(boot.views).acme = keeper.status
    return attrs.evolve(boot, certificates=slot)


async def start_edge(boot: Boot) -> Boot:
    from valis_core.edge.boot_certificate import boot_certificate
    from valis_core.edge.certificate import CertificateSlot
    from valis_core.edge.certificate_files import follow_certificate_files
    from valis_core.edge.server import serve_edge
    from valis_core.edge.stats import EdgeStats
    from valis_core.state_layout import edge_certificate_path

    state_dir, config = need(boot.state_dir), need(boot.config)
    slot = boot.certificates
    if slot is None:
        # No ACME: the state directory decides, as condense decided before its claim.
        slot = CertificateSlot(
            boot_certificate(state_dir, acme=False, on_demand=config.edge_on_demand)
        )
    certificate = slot.current()
    # With ACME, the acme stage ended with a certificate, or with none only on demand.
    stats = EdgeStats()
    await boot.services.start("edge certificate", partial(follow_certificate_files,
                                                           state_dir, slot))
    await boot.services.start(
        "edge", partial(serve_edge, need(boot.edge_listener), slot, need(boot.holder),
                        stats=stats),
    )
    views = need(boot.views)
    views.edge_stats = stats

    def not_after() -> float | None:
        current = slot.current()
        return None if current is None else current.not_after.timestamp()

    views.edge_not_after = not_after
    if certificate is None:
        log.info("edge: no certificate yet (VALIS_EDGE_CERT=on-demand); DNS over HTTPS "
                 "starts when one arrives in %s", edge_certificate_path(state_dir).parent)
    else:
        log.info("edge: serving DNS over HTTPS (HTTP/2, HTTP/1.1) with the certificate "
                 "valid until %s", certificate.not_after.isoformat())
    return attrs.evolve(boot, certificates=slot, edge_stats=stats)

"""The ``secondaries`` stage: the listed secondaries read (``resident.secondaries``, the
fence with them) and followed, zone transfers offered to them with IXFR from the change
journal (``resident.journal``, pruned while the fence is held), and NOTIFY sent to them
on every change, and the commit → wire latency of every change observed
(``resident.commit_latency``, from the journal). Beside ``secondaries``, which imports
the transfer engine: nothing of the serving stack is imported before the ``codec``
stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import attrs

from valis_core.boot import Boot, need
from valis_core.boot import boot_log as log
from valis_core.clock import wall

if TYPE_CHECKING:
    from valis_core.dns.zone import ServedZone


async def offer_transfers(boot: Boot) -> Boot:
    from valis_core.dns.serve.transfer_serve import Transfers
    from valis_core.dns.transfer.notify_send import NotifySender
    from valis_core.resident.commit_latency import CommitLatency
    from valis_core.resident.journal import JournalLimits, JournalReader
    from valis_core.resident.secondaries import SecondaryReader

    watch, holder, views = need(boot.watch), need(boot.holder), need(boot.views)
    config = need(boot.config)
    reader = SecondaryReader.from_dsn(config.dsn, watch.standing)
    boot.services.stack.callback(reader.close)
    journal = JournalReader.from_dsn(
        config.dsn, JournalLimits.from_facts(config.facts), watch.standing
    )
    boot.services.stack.callback(journal.close)
    listed = await reader.listed_fenced()
    transfers = Transfers(reader.listed, reader.known, journal=journal.difference,
                          current=reader.current)
    transfers.progress.restore(await reader.read_progress())
    await boot.services.start("secondaries", reader.follow)
    await boot.services.start("secondaries' progress",
                              partial(reader.keep_progress, transfers.progress))
    await boot.services.start("journal pruning", journal.prune_forever)
    source = need(boot.adopted).adoption.dns_udp.host
    sender = NotifySender(source, reader.listed_fenced, known=reader.current)
    await boot.services.start("notify", sender.run)
    latency = CommitLatency(journal.commit_times, holder.versions)
    await boot.services.start("commit latency", latency.run)

    def changed(zones: Sequence[ServedZone]) -> None:
        sender.changed(zones)
        latency.swapped(zones)

    holder.changed = changed
    views.commit_latency = latency.family
    # A secondary may lack a version served now: a change committed while no node
    # served, or one whose NOTIFY a stopped node never sent. Tell them at once, as a
    # primary does when it loads a zone, rather than at their SOA refresh.
    behind = {state.zone for state in transfers.progress.report(
        reader.known(), holder.versions, wall()) if state.lag_serials != 0}
    if behind:
        sender.changed([zone for zone in holder.current.served() if zone.origin in behind])
        log.info("secondaries: NOTIFY at start for %d zone(s) a listed secondary may lack",
                 len(behind))
    views.transfer_stats = transfers.stats
    views.notify_stats = sender.stats
    views.secondaries = lambda: transfers.progress.report(
        reader.known(), holder.versions, wall()
    )
    log.info("secondaries: %d listed; zone transfers to them, NOTIFY from %s",
             len(listed), source)
    return attrs.evolve(boot, transfers=transfers)

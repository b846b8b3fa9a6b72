"""The ``zone index`` stage: the zone source (``operator_state.zone_source``) reads every
served zone from the database into the index served, then the resident follows it live
(``ZoneFollower``: LISTEN/NOTIFY, reconnecting, the fence read first) and signs the
signed zones as operator state says (``SigningFollower``). Beside ``reload`` and
``signing``, not in them: the boot names the follower and the signer.
"""

from __future__ import annotations

from functools import partial

import attrs

from valis_core.boot import Boot, fence_final, need
from valis_core.boot import boot_log as log
from valis_core.resident.reload import ZoneFollower


async def index_zones(boot: Boot) -> Boot:
    from valis_core.dns.serve import ServeStats
    from valis_core.dns.transfer.notify_send import ChangeWatch
    from valis_core.heap import RESIDENT_HEAP
    from valis_core.operator_state.zone_source import PgZoneSource

    config, watch = need(boot.config), need(boot.watch)
    source = PgZoneSource.from_dsn(
        config.dsn, config.served_zones, standing=watch.standing, heap=RESIDENT_HEAP
    )
    boot.services.stack.callback(source.close)
    notifier = boot.notifier
    holder = ChangeWatch(await source.load(
        progress=lambda text: notifier.status(f"bring-up: zone index: {text}")
    ))
    log.info(
        "zone index: %d zone(s), %d records in %.3fs", len(holder.current.zones),
        holder.current.record_count, source.stats.last_load_seconds,
    )

    follower = ZoneFollower(source, holder)
    boot.services.stack.callback(follower.close)
    await boot.services.start("zone source", fence_final(follower.run))

    from valis_core.operator_state.site_facts import transfer_signatures
    from valis_core.resident.signing import SigningFollower

    signing = SigningFollower(
        config.dsn, need(boot.state_dir), source.zones, standing=lambda: watch.standing,
        follows=lambda: follower.source.zones,
        transfer_limit=transfer_signatures(config.facts),
    )
    boot.services.stack.callback(signing.close)
    await signing.load(holder)
    await boot.services.start("signing", partial(signing.follow, holder))
    return attrs.evolve(
        boot, source=source, follower=follower, holder=holder, signing=signing,
        stats=ServeStats(),
    )

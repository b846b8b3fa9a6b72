"""The ``operator state`` stage: the fence watch (``resident.fence_watch``) opened over
the DSN, the instance's standing compared with the fence's, the first fenced heartbeat
committed and the heartbeat kept running. A fenced-out verdict left by an earlier
instance of this node is cleared once this one passes the fence. Beside
``fence_watch``, not in it: the boot names ``FenceWatch``.
"""

from __future__ import annotations

import attrs
import trio

from valis_core.boot import Boot, need
from valis_core.boot import boot_log as log
from valis_core.fence_verdict import clear_verdict
from valis_core.identity.instance import holder_name, instance_token
from valis_core.resident.fence_watch import FenceWatch


async def open_fence(boot: Boot) -> Boot:
    config, state_dir = need(boot.config), need(boot.state_dir)
    generation = need(boot.manifest).generation
    watch = FenceWatch(
        config.dsn,
        node=config.node_name,
        holder=holder_name(
            f"{config.node_name}@{config.location}", instance_token(state_dir, generation)
        ),
        generation=generation,
    )
    boot.services.stack.callback(watch.close)
    fence = await trio.to_thread.run_sync(watch.open)
    clear_verdict(state_dir)
    log.info(
        "operator state: fence at generation %d held by %s; this instance writes at "
        "generation %d", fence.generation, fence.holder, generation,
    )
    await boot.services.start("fence", watch.run)
    return attrs.evolve(boot, watch=watch)

"""The ``owner terminus`` stage: DNS UPDATE served on the owner descriptor fulcrum
handed down (``--owner-fd``), TSIG-signed with the key derived from the node's identity,
each update a fenced transaction (``owner.terminus``); the stage applies only when the
descriptor was handed down. Beside ``terminus``, which imports the answering stack:
nothing of it is imported before the resident's ``codec`` stage.
"""

from __future__ import annotations

from valis_core.boot import Boot, fence_final, need
from valis_core.boot import boot_log as log


def has_owner_descriptor(boot: Boot) -> bool:
    return need(boot.adopted).owner is not None


async def serve_owner_terminus(boot: Boot) -> Boot:
    from valis_core.owner.key import derive_owner_tsig
    from valis_core.owner.terminus import OwnerTerminus

    adopted, views = need(boot.adopted), need(boot.views)
    terminus = OwnerTerminus(
        need(adopted.owner),
        key=derive_owner_tsig(need(boot.identity)),
        dsn=need(boot.config).dsn,
        standing=need(boot.watch).standing,
        holder=need(boot.holder),
    )
    boot.services.stack.callback(terminus.close)
    await boot.services.start("owner terminus", fence_final(terminus.serve))
    views.owner_updates = lambda: (terminus.applied, terminus.refused)
    log.info("owner terminus: accepting TSIG-signed DNS UPDATE on %s (key %s)",
             need(adopted.adoption.owner).address, terminus.key_name)
    return boot

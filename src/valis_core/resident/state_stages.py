"""The stages that read the state directory: ``config store`` (the site facts, copied on
the first boot and read ever after), ``store head`` (the manifest, genesis when absent)
and ``identity`` (the owner key, minted on the first boot). The boot names
``ConfigStore``, so these sit beside ``config_store`` rather than in it.
"""

from __future__ import annotations

import attrs

from valis_core.boot import Boot, need
from valis_core.boot import boot_log as log
from valis_core.config_store import HOW_TO_CHANGE, ConfigStore, open_config_store
from valis_core.identity.custody import keyfile_path, load_or_create_keyfile, public_key_hex
from valis_core.resident.process import log_as
from valis_core.resident.state_dir import check_state_dir, resolve_state_dir
from valis_core.store.head import materialise_genesis


def _report_config(config: ConfigStore) -> None:
    if config.first_boot:
        log.info("config store: first boot; site facts copied into %s", config.path)
    for key in config.ignored:
        log.info(
            "config store: %s in the environment differs from the store %s; the store "
            "counts (%s)", key, config.path, HOW_TO_CHANGE,
        )


async def open_config(boot: Boot) -> Boot:
    state_dir = resolve_state_dir(boot.argv, boot.environ)
    check_state_dir(state_dir)
    config = open_config_store(state_dir, boot.environ)
    log_as(boot, config.log_level, config.log_format)
    _report_config(config)
    return attrs.evolve(boot, state_dir=state_dir, config=config)


async def read_store_head(boot: Boot) -> Boot:
    manifest, written = materialise_genesis(need(boot.state_dir))
    log.info(
        "store head: %s generation %d",
        "genesis manifest written at" if written else "store at", manifest.generation,
    )
    return attrs.evolve(boot, manifest=manifest)


async def load_identity(boot: Boot) -> Boot:
    state_dir = need(boot.state_dir)
    existed = keyfile_path(state_dir).exists()
    identity = load_or_create_keyfile(state_dir)
    owner_key = public_key_hex(identity)
    log.info("identity: owner public key %s (%s)", owner_key,
             "loaded" if existed else "minted at genesis")
    return attrs.evolve(boot, identity=identity, owner_key=owner_key)

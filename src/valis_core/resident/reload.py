"""SIGHUP: the running resident re-reads its configuration store and applies what it can.

What a reload applies (``plan_reload`` decides, from the store as it was and as it is):

- ``VALIS_LOG_LEVEL`` and ``VALIS_LOG_FORMAT``: at once.
- the ``VALIS_RRL_*`` facts (response rate limiting): at once, as one new limiter the
  UDP loop restarts under (``valis_core.dns.serve.limited_udp``): turned on, off (rate 0 or
  no rate), or retuned, with fresh buckets.
- ``VALIS_SERVED_ZONES``: a new zone source for the new list is loaded in full first
  (every zone present and indexable), and the public view must answer each new apex SOA
  from that index; only then is it swapped in, in one assignment, and followed instead
  of the old one. A zone that cannot be served refuses the whole change, logged, and the
  node keeps serving what it served.
- anything else (the node's name, location, DSN, the served domain and the ACME CA's
  directory URL the edge's certificate comes from): logged as needing a restart, and
  named in the node's status (``restart_pending``, ``valis status``'s ``restart needed``
  line) until a restart applies it or the store has the running value again; the
  running node keeps its values, never silently.

A reload never stops the node: a store that cannot be read, or a change that is refused,
is one log line and nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from valis_core.config_store import ConfigStore, read_config_store
from valis_core.errors import one_line
from valis_core.operator_state.site_facts import RRL_KEYS

if TYPE_CHECKING:
    from valis_core.dns.answer.signed import Signer
    from valis_core.dns.answer.snapshot import IndexHolder
    from valis_core.dns.serve.rrl import RrlSettings
    from valis_core.dns.zone import ZoneIndex
    from valis_core.fence import FenceState
    from valis_core.operator_state.zone_source import PgZoneSource
    from valis_core.resident.signing import SigningFollower
    from valis_core.resident.views import NodeViews

log = logging.getLogger("valis.resident")

RATE_LIMITS_BOUND = 10.0
"""Seconds a reload waits for the UDP loop to restart under new rate limits."""

_LIVE_KEYS = frozenset({"VALIS_LOG_LEVEL", "VALIS_LOG_FORMAT", "VALIS_SERVED_ZONES"}) | RRL_KEYS


@attrs.frozen
class ReloadPlan:
    """What changed in the store: whether logging is reconfigured, the new served zones
    (None when unchanged), whether rate limiting is, and the keys that only a restart
    applies."""

    logging: bool
    zones: tuple[str, ...] | None
    restart_keys: tuple[str, ...]
    rate_limits: bool = False

    @property
    def empty(self) -> bool:
        return (not self.logging and self.zones is None and not self.rate_limits
                and not self.restart_keys)


def plan_reload(old: ConfigStore, new: ConfigStore) -> ReloadPlan:
    changed = sorted(
        key for key in old.facts.keys() | new.facts.keys()
        if old.facts.get(key) != new.facts.get(key)
    )
    return ReloadPlan(
        logging=old.log_level != new.log_level or old.log_format != new.log_format,
        zones=new.served_zones if "VALIS_SERVED_ZONES" in changed else None,
        restart_keys=tuple(key for key in changed if key not in _LIVE_KEYS),
        rate_limits=any(key in RRL_KEYS for key in changed),
    )


class ZoneFollower:
    """The zone source the node follows into its ``holder``, replaceable while serving.

    A replacement's index is swapped in by the follow task itself, after the old source
    has unwound, so nothing the old source was still building can overwrite it."""

    def __init__(self, source: PgZoneSource, holder: IndexHolder) -> None:
        self.source = source
        self.holder = holder
        self._scope: trio.CancelScope | None = None
        self._pending: tuple[PgZoneSource, ZoneIndex, trio.Event] | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the current source; when it is replaced, follow the new one."""
        status: trio.TaskStatus[None] | None = task_status
        while True:
            with trio.CancelScope() as self._scope:
                if status is not None:
                    await self.source.run(self.holder, task_status=status)
                else:
                    await self.source.run(self.holder)
            status = None
            pending, self._pending = self._pending, None
            if pending is None:  # cancelled from outside: the node is stopping
                return
            self.source, index, swapped = pending
            self.holder.swap(index)
            swapped.set()

    async def replace(self, source: PgZoneSource, index: ZoneIndex) -> None:
        """Serve ``index`` and follow ``source`` (loaded) instead of the current source;
        returns once the swap is made (the old source closed)."""
        swapped = trio.Event()
        self._pending = (source, index, swapped)
        assert self._scope is not None, "replace before the follow task started"
        self._scope.cancel()
        await swapped.wait()

    def close(self) -> None:
        self.source.close()


@attrs.define
class Reloader:
    """What a reload reads and changes in the running node."""

    state_dir: Path
    config: ConfigStore
    follower: ZoneFollower
    views: NodeViews
    standing: FenceState
    configure_logging: Callable[[str, str], None]
    make_source: Callable[..., PgZoneSource]
    rate_limits: Callable[[RrlSettings | None], Awaitable[None]]
    signing: SigningFollower | None = None
    """Told the new served zones before they are answered, so an added zone that
    operator state says is signed is served signed."""
    reloads: int = 0
    refused: int = 0

    async def watch(self, signals: AsyncIterator[int]) -> None:
        """Reload once per SIGHUP, one after another."""
        async for _signum in signals:
            await self.reload()

    async def reload(self) -> bool:
        """Re-read the store and apply it; True when everything it asked for applies."""
        log.info("reload on SIGHUP: re-reading %s", self.config.path)
        try:
            new = read_config_store(self.state_dir)
        except Exception as exc:
            self._refused(f"the configuration store cannot be read: {one_line(exc)}")
            log.error("reload refused: %s; the node runs as it was", one_line(exc))
            return False
        plan = plan_reload(self.config, new)
        # The running config keeps a restart key's old value, so each reload names every
        # key the store still has a new value for (and none once it has the old again).
        self.views.restart_pending = plan.restart_keys
        if plan.empty:
            log.info("reload: the store is unchanged; nothing to apply")
            self.reloads += 1
            self.views.reload_refused = None
            return True
        applied = dict(self.config.facts)
        if plan.logging:
            self.configure_logging(new.log_level, new.log_format)
            for key in ("VALIS_LOG_LEVEL", "VALIS_LOG_FORMAT"):
                if key in new.facts:
                    applied[key] = new.facts[key]
                else:
                    applied.pop(key, None)
            log.info("reload: logging at %s as %s", new.log_level, new.log_format)
        if plan.rate_limits:
            await self._rate_limits(new, applied)
        ok = True
        if plan.zones is not None:
            ok = await self._serve_zones(plan.zones)
            if ok:
                applied["VALIS_SERVED_ZONES"] = new.facts["VALIS_SERVED_ZONES"]
        for key in plan.restart_keys:
            log.warning("reload: %s changed in the store; it takes effect at the next "
                        "restart (the node keeps its running value%s)", key,
                        _RUNNING.get(key, ""))
        self.config = attrs.evolve(self.config, facts=applied)
        if ok:
            self.reloads += 1
            self.views.reload_refused = None
        else:
            self._refused(
                f"served zones {new.facts['VALIS_SERVED_ZONES']} refused; still serving "
                f"{', '.join(self.follower.source.zones)}"
            )
        return ok

    def _refused(self, why: str) -> None:
        """Count a refused reload and say why in the node's status until one applies."""
        self.refused += 1
        self.views.reload_refused = why

    async def _rate_limits(self, new: ConfigStore, applied: dict[str, str]) -> None:
        """Serve UDP under the limits ``new`` sets; the store checked its facts, so
        they make a limiter (or none)."""
        from valis_core.dns.serve.rrl import describe
        from valis_core.operator_state.site_facts import rrl_settings

        settings = rrl_settings(new.facts)
        with trio.move_on_after(RATE_LIMITS_BOUND) as waited:
            await self.rate_limits(settings)
        if waited.cancelled_caught:
            log.warning("reload: the UDP loop has not restarted within %.0fs (an IXFR over "
                        "UDP still being read?); the new limits apply once it does",
                        RATE_LIMITS_BOUND)
        for key in RRL_KEYS:
            if key in new.facts:
                applied[key] = new.facts[key]
            else:
                applied.pop(key, None)
        log.info("reload: %s", describe(settings))

    async def _serve_zones(self, zones: tuple[str, ...]) -> bool:
        from valis_core.dns.answer.snapshot import IndexHolder
        from valis_core.resident.views import public_soa

        before = self.follower.source.zones
        source = self.make_source(self.config.dsn, zones, standing=self.standing)
        try:
            index = await source.load()

            def check(signer: Signer | None) -> None:
                """Every apex answered as it would be served, signed where it is signed
                (a zone whose key is not here answers SERVFAIL: refused, as at boot)."""
                trial = IndexHolder(index, signer)
                unanswered = [z for z in source.zones if not public_soa(trial, z).answered]
                if unanswered:
                    raise ValueError(
                        "the public view does not answer the apex SOA of "
                        f"{', '.join(unanswered)}"
                    )

            if self.signing is None:
                check(None)
            else:
                await self.signing.serve(source.zones, self.follower.holder, check)
        except Exception as exc:
            source.close()
            log.error(
                "reload: served zones %s refused (%s); still serving %s",
                ",".join(zones), one_line(exc), ", ".join(before),
            )
            return False
        await self.follower.replace(source, index)
        self.views.zones = source.zones
        self.views.zone_stats = source.stats
        added = [zone for zone in source.zones if zone not in before]
        removed = [zone for zone in before if zone not in source.zones]
        log.info(
            "reload: now serving %s (added %s; removed %s)", ", ".join(source.zones),
            ", ".join(added) or "none", ", ".join(removed) or "none",
        )
        return True


_RUNNING = {
    "VALIS_SERVED_DOMAIN": ": the edge's certificate is still obtained and renewed for the "
                           "domain it started with",
    "VALIS_ACME_DIRECTORY_URL": ": the edge's certificate is still obtained and renewed "
                                "from the CA it started with",
}
"""What keeping the running value means, for the keys whose effect is not plain."""

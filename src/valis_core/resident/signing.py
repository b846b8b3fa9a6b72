"""The resident's zone signing: which served zones operator state says are signed, the
keys this node holds for them, and the ``Signer`` the serve loop answers with.

A zone signed in operator state (``zone_signing``) is signed with the key its row names
(algorithm and key tag). A node whose state directory holds no such key, or another one,
answers that zone SERVFAIL and says so in one log line naming the remedy, rather than
serving answers every validator holding the parent's DS would reject. A running node
keeps serving its other zones; at boot the fabric's check of every served apex stops the
whole node instead (fail closed, saying which key is missing), and a reload that would
add such a zone is refused, the node serving on as it was. Which keys a zone needs is
``valis_core.dns.dnssec.zone_servable``'s to say, and condense asks it too, before it claims the
fence for a state directory. ``follow`` re-reads the
rows every ``POLL_SECONDS`` so ``valis zone sign`` takes effect on a running node
without a restart; a failed read keeps the signer in place and is logged once until
reads succeed again. Before each read it moves on, at its fence standing, every rollover
of a served zone whose step's time has come (``valis_core.dns.dnssec.rollover``), and the
answers follow the step at once. A ZSK roll ends on time, so its end is the resident's
too: the old ZSK, no longer published and no longer in any signature a resolver may
hold, leaves the state directory then. When a refresh window begins or a zone's signing
changes, it raises the serial of each served NSEC3 zone no change has reached since
(``valis_core.operator_state.zone_resign``), so secondaries transfer it signed anew.
Each new signer carries the last one's signatures by the keys still signing: one zone's
change re-signs no other zone. """

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import trio

from valis_core.clock import Clock, wall
from valis_core.dns import wire
from valis_core.dns.answer.signed import REFRESH, Signer, ZoneKeys
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.dnssec import DnssecError, ZoneKey, rollover
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.dnssec.signature_cache import TRANSFER_SIGNATURES
from valis_core.dns.dnssec.zone_keys import file_zone, forget_zone_key, load_key_ring
from valis_core.dns.dnssec.zone_servable import missing_keys, needed_tags
from valis_core.errors import ValisError
from valis_core.fence import FenceState
from valis_core.operator_state.zone_signing import ZoneSigning, signed_zones
from valis_core.state_layout import signing_keys_dir

log = logging.getLogger("valis.resident")

POLL_SECONDS = 1.0
"""How often the signed zones are read again; a zone signed while the node runs is
answered signed within this (plus the read)."""


def zone_keys_for(row: ZoneSigning, held: dict[int, ZoneKey]) -> ZoneKeys | None:
    """The keys ``row`` (and its roll's step) has the zone publish and sign with, from
    those this node holds; ``None`` when it lacks one of them (``zone_servable``
    decides, as condense does before it claims the fence)."""
    if missing_keys(row, held) is not None:
        return None
    keying = rollover.zone_keying(row.key_tag, row.zsk_tag, row.rollover)
    return ZoneKeys(
        signer=held[keying.zone_signer],
        published=tuple(held[tag] for tag in keying.published),
        key_signers=tuple(held[tag] for tag in keying.key_signers),
        parent=tuple(held[tag] for tag in keying.parent_ds),
        dnskey_ttl=row.timing.dnskey_ttl,
        step=None if row.rollover is None else row.rollover.step,
        kind=None if row.rollover is None else row.rollover.kind,
        since=None if row.rollover is None else row.rollover.since,
        due=None if row.rollover is None else rollover.due(row.rollover),
    )


def signer_for(
    rows: dict[str, ZoneSigning],
    ring: dict[str, dict[int, ZoneKey]],
    served: Sequence[str],
    nsec3: Mapping[str, Nsec3Params] | None = None,
    *,
    carry: Signer | None = None,
    clock: Clock = wall,
    transfer_limit: int = TRANSFER_SIGNATURES,
) -> tuple[Signer | None, list[str]]:
    """The signer for the served zones ``rows`` name (``None`` when none is signed), and
    one log line per signed zone saying how it is answered; ``nsec3`` names the zones
    denying with an NSEC3 chain (the others deny compactly); ``carry``, the signer it
    replaces, whose signatures by keys still signing it keeps; ``transfer_limit``, the
    signatures its signed transfers keep across zones (``VALIS_TRANSFER_SIGNATURES``)."""
    zones: dict[bytes, ZoneKeys | None] = {}
    chains: dict[bytes, Nsec3Params] = {}
    lines = []
    for zone in sorted(set(served) & rows.keys()):
        row = rows[zone]
        held = ring.get(file_zone(zone), {})
        apex = wire.from_text(zone).lower()
        keys = zone_keys_for(row, held)
        zones[apex] = keys
        params = (nsec3 or {}).get(zone)
        if params is not None:
            chains[apex] = params
        if keys is not None:
            roll = row.rollover
            split = "" if row.zsk_tag is None else f" (ZSK; KSK {row.key_tag})"
            lines.append(
                f"dnssec: zone {zone} signed online with algorithm {row.algorithm}, key tag "
                f"{keys.signer.tag}{split}" + ("" if roll is None else (
                    f"; rolling its {roll.kind.upper()} from key tag {roll.old} to "
                    f"{roll.new}, step {roll.step}"
                ))
            )
            continue
        have = "none" if not held else "key tag " + ", ".join(str(t) for t in sorted(held))
        want = " and ".join(str(tag) for tag in needed_tags(row))
        lines.append(
            f"dnssec: zone {zone} is signed in operator state with algorithm "
            f"{row.algorithm} key tag {want}, but this node's state directory holds "
            f"{have} for it; answering the zone SERVFAIL until the key is restored from "
            "the backup set of the node that signed it"
        )
    if not zones:
        return None, lines
    for apex, params in chains.items():
        lines.append(
            f"dnssec: zone {wire.to_text(apex)} denies existence with NSEC3 (iterations "
            f"{params.iterations}, salt {params.salt.hex() or '-'}, no opt-out)"
        )
    signer = Signer(zones, clock=clock, nsec3=chains, carry=carry)
    signer.cache.transfer_limit = transfer_limit
    return signer, lines


class SigningFollower:
    """Reads the signed zones and the keys, and keeps ``holder``'s signer current."""

    def __init__(
        self,
        dsn: str,
        state_dir: Path,
        served: Sequence[str],
        *,
        standing: Callable[[], FenceState] | None = None,
        clock: Clock = wall,
        follows: Callable[[], Sequence[str]] | None = None,
        opens: Callable[[], psycopg.Connection[Any]] | None = None,
        transfer_limit: int = TRANSFER_SIGNATURES,
    ) -> None:
        self.dsn = dsn
        self.transfer_limit = transfer_limit
        """Signatures signed transfers keep across zones (``VALIS_TRANSFER_SIGNATURES``)."""
        self.state_dir = state_dir
        self.served = tuple(served)
        self.follows = follows
        """The zones the source serves now: a node serving every zone of operator state
        (``VALIS_SERVED_ZONES=*``) gains and loses zones while it runs, and a zone it
        gains is signed as operator state says from the next read."""
        self._followed = tuple(follows()) if follows is not None else ()
        self.opens = opens
        """How the connection is made (autocommit); ``None``: ``connect(dsn)``."""
        self.standing = standing
        """This node's fence standing, for moving rollovers on; ``None``: it never does."""
        self.clock = clock
        self.steps = 0
        """Rollover steps this node has moved on."""
        self._seen: tuple[object, ...] | None = None
        self._failing = False
        self._rolling = False
        """Whether the last read found a roll: only then is one looked at to move on."""
        self._conn: psycopg.Connection[Any] | None = None
        self._denials: dict[str, Nsec3Params] = {}
        """The zones denying with NSEC3, as the last read found them."""
        self._applied: dict[str, ZoneSigning] | None = None
        """The rows the last read found: the next read raises serials for them, once the
        signer answers by them (a secondary told of a raise transfers what it signs)."""
        self._resigned: object = None
        """The refresh window and signing rows the NSEC3 zones' serials were last looked
        at for."""
        self._keys: tuple[tuple[str, ...], dict[str, dict[int, ZoneKey]]] = ((), {})
        self._reading = trio.Lock()
        """One read at a time: the poll and a reload's ``serve`` share the connection."""

    def _read(self) -> tuple[dict[str, ZoneSigning], dict[str, dict[int, ZoneKey]]]:
        """The rows, over one connection kept open (made again after a failure), after
        moving on each roll whose step's time has come; and the keys, read from disk
        again only when the key files' names change."""
        from valis_core.operator_state.connection import connect
        from valis_core.operator_state.zone_denial import zone_denials
        from valis_core.operator_state.zone_rollover import advance_rollovers

        if self._conn is None or self._conn.closed:
            self._conn = (
                connect(self.dsn, autocommit=True) if self.opens is None else self.opens()
            )
        try:
            if self._applied is not None:  # what the last read found, answered by now
                self._raise_serials(self._applied)
            if self.standing is not None and self._rolling:
                for zone, before, roll in advance_rollovers(
                    self._conn, self.standing(), self.served, self.clock()
                ):
                    self.steps += 1
                    if roll is None:
                        self._retire(zone, before)
                        continue
                    log.info("dnssec: zone %s rollover from key tag %d to %d: step %s",
                             zone, roll.old, roll.new, roll.step)
            rows = signed_zones(self._conn)
            self._denials = zone_denials(self._conn)
            self._applied = rows
            self._rolling = any(row.rollover is not None for row in rows.values())
        except psycopg.Error:
            self.close()
            raise
        if not rows:
            return rows, {}
        root = signing_keys_dir(self.state_dir)
        names = tuple(sorted(p.name for p in root.iterdir())) if root.is_dir() else ()
        if names != self._keys[0]:
            self._keys = (names, load_key_ring(self.state_dir))
        return rows, self._keys[1]

    def _retire(self, zone: str, roll: rollover.Rollover) -> None:
        """A roll ended on time (a ZSK's): the old key leaves the state directory."""
        log.info("dnssec: zone %s rollover from key tag %d to %d: done; %s key tag %d "
                 "removed", zone, roll.old, roll.new, roll.kind.upper(), roll.old)
        old = load_key_ring(self.state_dir).get(file_zone(zone), {}).get(roll.old)
        if old is not None:
            forget_zone_key(self.state_dir, zone, old)

    def _raise_serials(self, rows: dict[str, ZoneSigning]) -> None:
        """When a refresh window begins or the signing rows change, at this node's
        standing, raise the serial of each served NSEC3 zone unchanged since
        (``operator_state.zone_resign``): its secondaries then transfer it signed anew."""
        from valis_core.operator_state.zone_resign import raise_unchanged_serials

        window = int(self.clock()) // REFRESH
        looked = (window, tuple(sorted(rows.items())), tuple(sorted(self._denials.items())))
        if self.standing is None or not self._denials or looked == self._resigned:
            return
        assert self._conn is not None
        zones = sorted(set(self.served) & self._denials.keys())
        for zone, serial in raise_unchanged_serials(
            self._conn, self.standing(), zones, since=window * REFRESH, now=self.clock()
        ):
            log.info("dnssec: zone %s serial raised to %d: signed anew (a new refresh window, "
                     "or its signing changed), so its secondaries transfer it", zone, serial)
        self._resigned = looked

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def load(self, holder: IndexHolder) -> None:
        """Read once and sign with the result (a failure here fails the bring-up)."""
        async with self._reading:
            rows, keys = await trio.to_thread.run_sync(self._read)
            self._apply(holder, rows, keys)

    async def serve(
        self,
        zones: Sequence[str],
        holder: IndexHolder,
        check: Callable[[Signer | None], None],
    ) -> None:
        """Sign for ``zones`` from now on: a reload changed the served zones, and a zone
        it adds must be answered signed from its first query, its rollovers moved on and
        its NSEC3 serial raised like the others'. ``check`` is given the signer the zones
        would be answered with before anything changes (the reload's trial of every apex,
        so a zone signed without its key here is refused as a boot refuses it); when it
        raises, or the read fails, the zones and the signer stay as they were and the
        error reaches the reload, which then keeps the node as it was."""
        async with self._reading:
            before, self.served = self.served, tuple(zones)
            try:
                rows, keys = await trio.to_thread.run_sync(self._read)
                made = self._signer(holder, rows, keys)
                check(made[0])
            except BaseException:
                self.served = before
                raise
            self._seen = self._looked(rows, keys)
            self._sign_with(holder, *made)

    def _follow_served(self) -> None:
        """Take in the zones the source gained or lost since the last look. Only the
        difference: a reload's ``serve`` has set the zones it changed before the source
        it made replaces the old one, and must not be undone in between."""
        if self.follows is None:
            return
        now = tuple(self.follows())
        if now == self._followed:
            return
        gained = [zone for zone in now if zone not in self._followed]
        lost = set(self._followed) - set(now)
        self._followed = now
        kept = [zone for zone in self.served if zone not in lost]
        self.served = (*kept, *(zone for zone in gained if zone not in kept))

    def _apply(
        self,
        holder: IndexHolder,
        rows: dict[str, ZoneSigning],
        keys: dict[str, dict[int, ZoneKey]],
    ) -> None:
        seen = self._looked(rows, keys)
        if seen == self._seen:
            return
        self._seen = seen
        self._sign_with(holder, *self._signer(holder, rows, keys))

    def _looked(
        self, rows: dict[str, ZoneSigning], keys: dict[str, dict[int, ZoneKey]]
    ) -> tuple[object, ...]:
        """What a signer is made from, to make one only when it changed."""
        return (
            tuple(sorted(self.served)),
            tuple(sorted(rows.items())),
            tuple(sorted((zone, tuple(sorted(tags))) for zone, tags in keys.items())),
            tuple(sorted(self._denials.items())),
        )

    def _signer(
        self,
        holder: IndexHolder,
        rows: dict[str, ZoneSigning],
        keys: dict[str, dict[int, ZoneKey]],
    ) -> tuple[Signer | None, list[str]]:
        return signer_for(
            rows, keys, self.served, self._denials, carry=holder.signer, clock=self.clock,
            transfer_limit=self.transfer_limit,
        )

    @staticmethod
    def _sign_with(holder: IndexHolder, signer: Signer | None, lines: list[str]) -> None:
        for line in lines:
            (log.warning if "SERVFAIL" in line else log.info)("%s", line)
        holder.sign_with(signer)

    async def follow(
        self,
        holder: IndexHolder,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Re-read every ``POLL_SECONDS`` until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(POLL_SECONDS)
            async with self._reading:
                self._follow_served()
                try:
                    rows, keys = await trio.to_thread.run_sync(self._read)
                except (ValisError, DnssecError, OSError, psycopg.Error) as exc:
                    if not self._failing:
                        log.warning("dnssec: cannot read the signed zones (%s); signing as "
                                    "before", " ".join(str(exc).split()))
                    self._failing = True
                    continue
                self._failing = False
                self._apply(holder, rows, keys)

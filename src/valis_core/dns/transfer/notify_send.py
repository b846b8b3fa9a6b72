"""Sending NOTIFY (RFC 1996) to a zone's secondaries when the served version changes:
the trio shell around ``valis_core.dns.transfer.notify``.

``ChangeWatch`` is the ``IndexHolder`` the zone source swaps versions into; on every
swap it hands the zones whose version changed to the ``NotifySender`` (a zone left
untouched is the very same object in the new index). The sender asks for the listed
secondaries once per batch of changes, so a secondary added since is told too, and
sends each of the zone's secondaries a signed NOTIFY over UDP from the node's DNS
address (the secondary's ACL names the primary by that address) to the secondary's own
NOTIFY port when it has one, ``port`` (53) otherwise. A NOTIFY unanswered
after ``timeout`` seconds is sent again, the wait doubling, at most ``attempts`` times;
a newer change of the same zone replaces the NOTIFY still being retried for it. At most
``IN_FLIGHT`` NOTIFYs wait for their answer at once; the others queue for a turn.

Nothing is sent when ``secondaries`` raises ``FencedOut`` (the resident's reader checks
the fence after reading them): a node another instance has superseded tells no one.
Given ``known`` (the list in memory when it is known to be the database's, the
resident's ``SecondaryReader.current``), a batch none of whose zones it lists is sent
to no one without reading: nobody is to be told, fenced or not, and a node taking
many changes to zones without secondaries reads nothing per change.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import socket
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from valis_core.clock import Clock, wall
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.transfer._transfer import Listed, zone_serial
from valis_core.dns.transfer.notify import Notify, answer_to, notify_message, rejection
from valis_core.dns.zone import ServedZone, ZoneIndex
from valis_core.fence import FencedOut

log = logging.getLogger("valis.notify")

ATTEMPTS = 5
TIMEOUT = 1.0
"""Seconds to wait for the first answer; each retry waits twice as long as the last."""
QUEUE = 256
IN_FLIGHT = 64
"""NOTIFYs outstanding at once (each holds a socket while it waits); the rest wait their
turn, so a fleet of secondaries times many zones is told without a socket per pair."""

Secondaries = Callable[[], Awaitable[Sequence[Listed]]]
Known = Callable[[], Sequence[Listed] | None]


class ChangeWatch(IndexHolder):
    """An ``IndexHolder`` that reports, after each swap, the zones whose version changed."""

    __slots__ = ("_clock", "changed", "versions")

    def __init__(self, index: ZoneIndex, clock: Clock = wall) -> None:
        super().__init__(index)
        self._clock = clock
        """When a serial began to be served (UNIX time)."""
        self.changed: Callable[[Sequence[ServedZone]], None] | None = None
        now = clock()
        self.versions: dict[str, tuple[int, float]] = {
            zone.origin: (zone_serial(zone), now) for zone in index.served()
        }
        """Each served zone's serial, and since when (UNIX time) that serial is served."""

    def swap(self, new: ZoneIndex) -> ZoneIndex:
        old = super().swap(new)
        fresh = [  # O(zones changed): the index knows what it shares with the old one
            zone for apex in sorted(new.changed_from(old))
            if (zone := new.zone_for(apex)) is not None and zone.apex == apex
        ]
        now = self._clock()
        for zone in fresh:
            serial = zone_serial(zone)
            if self.versions.get(zone.origin, (None,))[0] != serial:
                self.versions[zone.origin] = (serial, now)
        if fresh and self.changed is not None:
            self.changed(fresh)
        return old


@attrs.define
class NotifyStats:
    sent: int = 0
    """Datagrams sent, retries included."""
    answered: int = 0
    unanswered: int = 0
    """NOTIFYs given up on after every attempt."""
    withheld: int = 0
    """Batches of changes not announced because the node is fenced out."""


class NotifySender:
    """Notify the listed secondaries of each changed zone (see the module docstring)."""

    def __init__(
        self,
        source: str,
        secondaries: Secondaries,
        *,
        port: int = 53,
        attempts: int = ATTEMPTS,
        timeout: float = TIMEOUT,
        known: Known | None = None,
    ) -> None:
        self._source = source
        self._secondaries = secondaries
        self._known = known
        self._port = port
        self._attempts = attempts
        self._timeout = timeout
        self._send, self._receive = trio.open_memory_channel[Sequence[ServedZone]](QUEUE)
        self._pending: dict[tuple[str, str], trio.CancelScope] = {}
        self._in_flight = trio.CapacityLimiter(IN_FLIGHT)
        self.stats = NotifyStats()

    def changed(self, zones: Sequence[ServedZone]) -> None:
        """Announce ``zones`` (called on the trio thread, by ``ChangeWatch.swap``). A
        change no secondary is listed for wakes no task: a node taking many changes
        with none listed pays nothing here for each."""
        if self._none_listed(zones):
            return
        try:
            self._send.send_nowait(zones)
        except trio.WouldBlock:
            log.warning("notify: %d change(s) not queued (the queue is full); the "
                        "secondaries learn of them at the next change or their refresh",
                        len(zones))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send NOTIFYs until cancelled."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            async for zones in self._receive:
                if self._none_listed(zones):
                    continue
                try:
                    listed = await self._secondaries()
                except FencedOut as exc:
                    self.stats.withheld += 1
                    log.error("notify: not sent for %s: %s",
                              ", ".join(zone.origin for zone in zones), exc)
                    continue
                except Exception as exc:
                    log.error("notify: the secondaries cannot be read (%s); not sent for %s",
                              " ".join(str(exc).split()),
                              ", ".join(zone.origin for zone in zones))
                    continue
                for zone in zones:
                    for secondary in listed:
                        if secondary.zone == zone.origin:
                            self._start(nursery, zone, secondary)

    def _none_listed(self, zones: Sequence[ServedZone]) -> bool:
        """Whether the list in memory, known to be current, lists none of ``zones``."""
        listed = None if self._known is None else self._known()
        if listed is None:
            return False
        origins = {zone.origin for zone in zones}
        return not any(secondary.zone in origins for secondary in listed)

    def _start(self, nursery: trio.Nursery, zone: ServedZone, secondary: Listed) -> None:
        slot = (zone.origin, secondary.address)
        older = self._pending.get(slot)
        if older is not None:
            older.cancel()
        scope = trio.CancelScope()
        self._pending[slot] = scope
        nursery.start_soon(self._notify, scope, slot, zone, secondary)

    async def _notify(
        self, scope: trio.CancelScope, slot: tuple[str, str], zone: ServedZone, secondary: Listed
    ) -> None:
        try:
            with scope:
                message = notify_message(zone, random.randrange(65536), secondary.key())
                async with self._in_flight:
                    await self._exchange(message, secondary.address,
                                         secondary.notify_port or self._port)
        finally:
            if self._pending.get(slot) is scope:
                del self._pending[slot]

    async def _exchange(self, message: Notify, address: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with trio.socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                await sock.bind((_source_for(self._source, family), 0))
                await sock.connect((address, port))
            except OSError as exc:
                self.stats.unanswered += 1
                log.warning("notify: %s serial %d to %s: cannot send from %s (%s)",
                            message.zone, message.serial, address, self._source, exc)
                return
            wait = self._timeout
            rejected: str | None = None
            for attempt in range(1, self._attempts + 1):
                try:
                    await sock.send(message.wire)
                except OSError as exc:
                    log.info("notify: %s to %s: send failed (%s)", message.zone, address, exc)
                else:
                    self.stats.sent += 1
                with trio.move_on_after(wait):
                    while True:
                        try:
                            data = await sock.recv(65535)
                        except OSError:
                            # An ICMP error (nothing listens there yet): wait out the
                            # attempt's time rather than retry at once.
                            await trio.sleep_forever()
                        answer = answer_to(message, data)
                        if answer is not None:
                            self.stats.answered += 1
                            log.info("notify: %s serial %d to %s answered %s (attempt %d)",
                                     message.zone, message.serial, address, answer.rcode,
                                     attempt)
                            return
                        rejected = rejection(message, data) or rejected
                wait *= 2
            self.stats.unanswered += 1
            why = (f"; it answered {rejected} (a reply the key does not verify is not taken)"
                   if rejected else "")
            log.warning("notify: %s serial %d to %s: no answer to %d attempts%s; it learns of "
                        "the change at its next SOA refresh", message.zone, message.serial,
                        address, self._attempts, why)


def _source_for(source: str, family: socket.AddressFamily) -> str:
    """The node's DNS address when it is a specific one of ``family``; otherwise any
    address of ``family`` (the kernel then picks the route's)."""
    try:
        ip = ipaddress.ip_address(source)
    except ValueError:
        return ""
    same = (ip.version == 6) == (family == socket.AF_INET6)
    return str(ip) if same and not ip.is_unspecified else ""

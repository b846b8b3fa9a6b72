"""The resident's certificate keeper: obtains the edge's certificate and renews it.

The trio shell around the pure parts: ``renewal`` says when to ask, ``acme_order`` walks
the order, ``acme_client`` speaks to the CA (in a worker thread: the library is
synchronous), ``challenge`` writes the DNS-01 record as a fenced transaction, and
``acme_store`` keeps the keys and the chain. ``ensure`` is the boot's: it serves the
certificate the state directory holds while it is valid (renewing it in the background
when due, so a CA down at boot costs nothing), and otherwise obtains one (the node's :53
is already serving, so the CA can validate against it). ``run`` then
renews a third of the lifetime before expiry, backing off on the CA's errors, and hands
each new certificate to the ``CertificateSlot`` (new handshakes take it; connections in
flight keep theirs). The node keeps serving the certificate it holds while attempts
fail. A ``FencedOut`` from the challenge write ends the keeper, as the heartbeat's does:
a fenced-out node cannot obtain a certificate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import dns.message
import dns.rdatatype
import psycopg
import trio
from cryptography import x509

from valis_core.clock import Clock, monotonic, wall
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.edge import acme_store
from valis_core.edge.acme_client import AcmeRequest, obtain_certificate
from valis_core.edge.acme_order import Order, Stage
from valis_core.edge.certificate import CertificateSlot, EdgeCertificate
from valis_core.edge.challenge import (
    ChallengeError,
    challenge_name,
    challenge_zone,
    publish_request,
    withdraw_request,
    write_fenced,
)
from valis_core.edge.renewal import Lifetime, is_due, next_attempt
from valis_core.edge.stats import AcmeStatus
from valis_core.errors import ValisError
from valis_core.fence import FencedOut, FenceState
from valis_core.operator_state.connection import connect

log = logging.getLogger("valis.edge")

SERVED_BOUND = 10.0
"""Seconds the zone source gets to serve a published challenge record."""
SERVED_POLL = 0.02


def lifetime_of(certificate: EdgeCertificate, domain: str) -> Lifetime | None:
    """The leaf's lifetime, or ``None`` when it does not name ``domain`` (the served
    domain changed): such a certificate is replaced at once, as if there were none."""
    leaf = x509.load_pem_x509_certificate(certificate.chain_pem)
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    if domain.lower() not in {name.lower() for name in names.get_values_for_type(x509.DNSName)}:
        return None
    return Lifetime(
        not_before=leaf.not_valid_before_utc.timestamp(),
        not_after=leaf.not_valid_after_utc.timestamp(),
    )


def served_txt(holder: IndexHolder, name: str) -> set[str]:
    """The TXT strings the served index answers at ``name`` (joined per record)."""
    query = dns.message.make_query(name, dns.rdatatype.TXT)
    wire = answer(holder.current, query.to_wire(), transport=Transport.TCP)
    if wire is None:
        return set()
    found: set[str] = set()
    for rrset in dns.message.from_wire(wire).answer:
        if rrset.rdtype == dns.rdatatype.TXT:
            found.update(b"".join(rdata.strings).decode("ascii", "replace") for rdata in rrset)
    return found


@attrs.define
class KeeperStats:
    """What the keeper has done, for the node's status."""

    orders: int = 0
    failures_in_a_row: int = 0
    last_error: str = ""
    next_attempt: float | None = None
    last_step: str = ""


class CertificateKeeper:
    """Obtains and renews the certificate for ``domain`` from the CA at ``directory_url``."""

    def __init__(
        self,
        *,
        state_dir: Path,
        domain: str,
        directory_url: str,
        dsn: str,
        standing: Callable[[], FenceState],
        served_zones: Sequence[str],
        holder: IndexHolder,
        slot: CertificateSlot,
        clock: Clock = wall,
        ticks: Clock = monotonic,
    ) -> None:
        self.state_dir = state_dir
        self.domain = domain.rstrip(".")
        self.directory_url = directory_url
        self.zone = challenge_zone(self.domain, served_zones)
        self._dsn = dsn
        self._standing = standing
        self._served_zones = tuple(served_zones)
        self._holder = holder
        self.slot = slot
        self._clock = clock
        self._ticks = ticks
        self._conn: psycopg.Connection[Any] | None = None
        self.stats = KeeperStats()

    def status(self) -> AcmeStatus:
        """What the node's status says of the certificate's ACME side."""
        return AcmeStatus(
            domain=self.domain,
            directory_url=self.directory_url,
            orders=self.stats.orders,
            failures_in_a_row=self.stats.failures_in_a_row,
            last_error=self.stats.last_error or None,
            last_step=self.stats.last_step or None,
            next_attempt=self.stats.next_attempt,
        )

    # -- the boot ----------------------------------------------------------------------

    async def ensure(self, *, wait: bool = True) -> EdgeCertificate | None:
        """The certificate to serve from now: the one held while it is valid and names
        the domain (renewed by ``run`` when due), else a new one — or, without ``wait``,
        ``None`` and ``run`` asks for it.

        Raises ``AcmeError`` (or a fence or operator-state error) when none can be had."""
        held = await trio.to_thread.run_sync(acme_store.held_certificate, self.state_dir)
        now = self._clock()
        lifetime = None if held is None else lifetime_of(held, self.domain)
        if held is not None and lifetime is not None and now < lifetime.not_after:
            self.slot.swap(held)
            log.info("edge: serving the certificate in %s (valid until %s); %s",
                     self.state_dir, held.not_after.isoformat(),
                     "it is due, so it is renewed in the background" if is_due(lifetime, now)
                     else "the CA is not asked")
            return held
        if not wait:
            return None
        return await self.obtain()

    # -- serving life ------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Renew until cancelled."""
        task_status.started()
        while True:
            current = self.slot.current()
            lifetime = None if current is None else lifetime_of(current, self.domain)
            now = self._clock()
            when = next_attempt(lifetime, now, self.stats.failures_in_a_row)
            self.stats.next_attempt = when
            await trio.sleep(max(0.0, when - now))
            try:
                await self.obtain()
            except FencedOut:
                raise  # it ends the keeper, and the resident with it
            except (ValisError, psycopg.Error) as exc:
                # The CA, the database or the state directory: tried again after the
                # backoff, while the current certificate is served.
                log.warning("edge: renewal failed (%d in a row): %s; still serving the "
                            "certificate valid until %s", self.stats.failures_in_a_row,
                            exc, "none" if current is None else current.not_after.isoformat())

    async def obtain(self) -> EdgeCertificate:
        """Order a certificate now, store it and swap it in."""
        self.stats.orders += 1
        try:
            # Abandoned at teardown rather than waited for: the order's own requests are
            # bounded, and a record it leaves is replaced by the next order's.
            certificate = await trio.to_thread.run_sync(
                self._obtain_blocking, abandon_on_cancel=True
            )
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.stats.failures_in_a_row += 1
                self.stats.last_error = " ".join(str(exc).split())
            raise
        self.stats.failures_in_a_row = 0
        self.stats.last_error = ""
        self.slot.swap(certificate)
        log.info("edge: certificate for %s obtained from %s, valid until %s", self.domain,
                 self.directory_url, certificate.not_after.isoformat())
        return certificate

    # -- the worker thread -------------------------------------------------------------

    def _obtain_blocking(self) -> EdgeCertificate:
        request = AcmeRequest(
            directory_url=self.directory_url,
            domain=self.domain,
            account_key_pem=acme_store.account_key(self.state_dir),
            leaf_key_pem=acme_store.leaf_key(self.state_dir),
        )
        try:
            chain = obtain_certificate(
                request, self._publish, self._until_served, self._withdraw, self._stepped
            )
        finally:
            self._close()
        stored = acme_store.store_chain(self.state_dir, chain, request.leaf_key_pem)
        self.stats.last_step = Stage.STORED.value
        return stored

    def _stepped(self, order: Order) -> None:
        self.stats.last_step = order.stage.value
        log.debug("edge: ACME order for %s: %s", self.domain, order.stage.value)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._dsn, autocommit=True)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _publish(self, value: str) -> None:
        write_fenced(self._connection(), self._standing(),
                     publish_request(self.zone, self.domain, value), self._served_zones,
                     self._holder.current, now=self._clock())
        log.info("edge: DNS-01 record %s published in %s", challenge_name(self.domain),
                 self.zone)

    def _withdraw(self) -> None:
        write_fenced(self._connection(), self._standing(),
                     withdraw_request(self.zone, self.domain), self._served_zones,
                     self._holder.current, now=self._clock())
        log.info("edge: DNS-01 record %s withdrawn", challenge_name(self.domain))

    def _until_served(self, value: str) -> None:
        name = challenge_name(self.domain)
        deadline = self._ticks() + SERVED_BOUND
        for _ in range(int(SERVED_BOUND / SERVED_POLL) + 1):
            if value in served_txt(self._holder, name) or self._ticks() >= deadline:
                break
            time.sleep(SERVED_POLL)
        if value not in served_txt(self._holder, name):
            raise ChallengeError(
                f"edge: the DNS-01 record {name} was written but the node did not serve it "
                f"within {SERVED_BOUND:.0f}s (is the zone source following the database?)"
            )

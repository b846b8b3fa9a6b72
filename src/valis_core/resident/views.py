"""What the fabric shows: the anonymous public view, the status view and the metrics.

The public view answers a question about the served zones exactly as the wire would:
it builds a DNS query, runs the same ``answer`` the serve loops run against the index
being served, and reads the reply back with an independent parser (dnspython). So a
public view that answers a zone's apex SOA proves the whole answering path, and bring-up
asks it for every served apex before it serves DNS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

from valis_core.clock import Clock, wall
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve import ServeCounts, ServeStats
from valis_core.dns.serve.limited_udp import summed_counts
from valis_core.dns.serve.rrl import RrlSettings
from valis_core.dns.serve.transfer_serve import TransferStats
from valis_core.dns.transfer.notify_send import NotifyStats
from valis_core.dns.transfer.secondary_progress import SecondaryState
from valis_core.edge.stats import AcmeStatus, EdgeStats
from valis_core.operator_state.zone_source import ZoneSourceStats
from valis_core.reachability import DnsReachability
from valis_core.resident.dns_workers import worker_families, worker_rows
from valis_core.resident.metrics import Family, Sample
from valis_core.resident.signing_view import rollover_status, signing_families, signing_status
from valis_core.resident.status_document import (
    DatabaseStatus,
    DnsStatus,
    EdgeStatus,
    NodeStatus,
    RateLimiting,
    RolloverStatus,
    SignedZone,
    ZoneServed,
)


@attrs.frozen
class SoaView:
    """The public view's answer for one zone's apex SOA."""

    zone: str
    rcode: str
    authoritative: bool
    soa: str | None
    serial: int | None

    @property
    def answered(self) -> bool:
        """Answered authoritatively with the zone's SOA."""
        return self.rcode == "NOERROR" and self.authoritative and self.soa is not None

    def document(self) -> dict[str, Any]:
        return {
            "zone": self.zone,
            "rcode": self.rcode,
            "authoritative": self.authoritative,
            "soa": self.soa,
            "serial": self.serial,
            "answered": self.answered,
        }


def public_soa(holder: IndexHolder, zone: str) -> SoaView:
    """Ask the served index for ``zone``'s apex SOA through ``answer``."""
    query = dns.message.make_query(zone, dns.rdatatype.SOA)
    wire = answer(holder.snapshot, query.to_wire(), transport=Transport.TCP)
    if wire is None:
        return SoaView(zone=zone, rcode="DROPPED", authoritative=False, soa=None, serial=None)
    reply = dns.message.from_wire(wire)
    soa = next((rrset for rrset in reply.answer if rrset.rdtype == dns.rdatatype.SOA), None)
    first = next(iter(soa), None) if soa is not None else None
    return SoaView(
        zone=zone,
        rcode=dns.rcode.to_text(reply.rcode()),
        authoritative=bool(reply.flags & dns.flags.AA),
        soa=first.to_text() if first is not None else None,
        serial=int(getattr(first, "serial", 0)) if first is not None else None,
    )


def soa_refresh(view: SoaView) -> int:
    """The REFRESH field of the SOA ``view`` answered (-1: none answered)."""
    return -1 if view.soa is None else int(view.soa.split()[3])


def serving_last_good(since: float | None) -> str:
    """What a node without its database serves, in the words /status and ``valis
    status`` use."""
    if since is None:
        return "serving the last good snapshot"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    return f"serving the last good snapshot since {stamp}"


def _by_transport(counts: Mapping[str, int]) -> tuple[Sample, ...]:
    return tuple(
        Sample(value, (("transport", transport),)) for transport, value in sorted(counts.items())
    )


@attrs.define
class NodeViews:
    """The live node as the fabric reads it. Bring-up sets ``ready`` once serving."""

    node: str
    location: str
    owner_public_key: str
    store_generation: int
    zones: tuple[str, ...]
    holder: IndexHolder
    serve_stats: ServeStats
    zone_stats: ZoneSourceStats
    fence_generation: Callable[[], int | None]
    heartbeats: Callable[[], int]
    ready: bool = False
    failed_heartbeats: Callable[[], int] | None = None
    """Heartbeats that did not reach the database; None when not wired."""
    owner_updates: Callable[[], tuple[int, int]] | None = None
    """(applied, refused) by the owner terminus; set when the node serves one."""
    dns_udp: str = ""
    dns_tcp: str = ""
    udp_workers: tuple[ServeStats, ...] = ()
    """Each DNS worker's counters, worker 0's (``serve_stats``) first; set once serving."""
    dns_reachability: DnsReachability | None = None
    """Whether the DNS pair is reachable through the launcher's firewall; None when the
    resident was not launched behind one."""
    fence_holder: Callable[[], str | None] | None = None
    """The holder the fence row names, as the fence watch last read it; None when not
    wired (the status then says null)."""
    database: Callable[[], tuple[bool, float | None]] | None = None
    """(connected, since when as a UNIX time) of the operator-state session; None when
    not wired."""
    modules: tuple[str, ...] = ()
    """The modules this node runs (name==version)."""
    transfer_stats: TransferStats | None = None
    """Zone transfers served and refused; None when not wired."""
    notify_stats: NotifyStats | None = None
    """NOTIFYs sent to secondaries; None when not wired."""
    commit_latency: Callable[[], Family] | None = None
    """The commit → wire latency histogram (``resident.commit_latency``); None when not
    wired."""
    secondaries: Callable[[], Sequence[SecondaryState]] | None = None
    """Each listed secondary's serial and lag; None when not wired."""
    edge_stats: EdgeStats | None = None
    """What the DNS-over-HTTPS edge has served; None when the edge is not elected."""
    edge_not_after: Callable[[], float | None] | None = None
    """When the edge's certificate expires (UNIX time; None while it has none)."""
    acme: Callable[[], AcmeStatus] | None = None
    """How obtaining and renewing the edge's certificate goes; None without ACME."""
    rate_limits: Callable[[], RrlSettings | None] | None = None
    """The UDP loop's rate limits at the moment (None from it: off); None when not wired."""
    reload_refused: str | None = None
    """Why the last reload (SIGHUP) was refused, until one applies; None: none was."""
    restart_pending: tuple[str, ...] = ()
    """The configuration store's keys a reload found changed that only a restart applies
    (the node runs on their old values); empty once the store has them back."""
    clock: Clock = wall
    """The wall clock the node's start and uptime are read from."""
    started_at: float = attrs.field(
        default=attrs.Factory(lambda self: self.clock(), takes_self=True))
    """When bring-up made these views (UNIX time): the node's uptime is counted from it."""

    def status(self) -> NodeStatus:
        """The status document (``resident.status_document``): what ``/status`` sends."""
        views = [public_soa(self.holder, zone) for zone in self.zones]
        return NodeStatus(
            node=self.node,
            location=self.location,
            owner_public_key=self.owner_public_key,
            generation=self.store_generation,
            fence_generation=self.fence_generation(),
            ready=self.ready,
            zones={view.zone: ZoneServed(serial=view.serial, rcode=view.rcode) for view in views},
            zones_gone_from_database=tuple(sorted(
                zone for zone in self.zone_stats.gone if zone in self.zones
            )),
            reload_refused=self.reload_refused,
            restart_pending=self.restart_pending,
            records=self.holder.current.record_count,
            dns=self.dns_status(),
            fence_holder=None if self.fence_holder is None else self.fence_holder(),
            database=self.database_status(),
            modules=self.modules,
            secondaries=None if self.secondaries is None else tuple(self.secondaries()),
            edge=self.edge_status(),
            rollovers=self.rollover_status(),
            signed_zones=self.signing_status(),
            started_at=self.started_at,
            uptime_seconds=max(0.0, self.clock() - self.started_at),
        )

    def rollover_status(self) -> tuple[RolloverStatus, ...]:
        """Each signed zone's key rollover under way: its step, since and until when."""
        return rollover_status(self.holder.signer)

    def signing_status(self) -> tuple[SignedZone, ...]:
        """Each signed zone as this node signs it (``signing_view.signing_status``)."""
        return signing_status(self.holder.signer)

    def edge_status(self) -> EdgeStatus | None:
        """The edge's certificate expiry and counts; None when the edge is not elected."""
        stats = self.edge_stats
        if stats is None:
            return None
        not_after = None if self.edge_not_after is None else self.edge_not_after()
        return EdgeStatus(
            certificate_not_after=not_after,
            connections=stats.connections,
            handshakes_failed=stats.handshakes_failed,
            displaced=stats.displaced,
            responses=sum(stats.responses.values()),
            acme=None if self.acme is None else self.acme(),
        )

    def database_status(self) -> DatabaseStatus | None:
        """Whether the operator-state session stands, and since when; while it does not,
        what is served (the last good snapshot) is said in words too."""
        if self.database is None:
            return None
        connected, since = self.database()
        serving = None if connected else serving_last_good(since)
        return DatabaseStatus(connected=connected, since=since, serving=serving,
                              following=self.zone_stats.following)

    def dns_status(self) -> DnsStatus:
        """Where DNS is served and whether the outside can reach it (and why not)."""
        reach = self.dns_reachability
        return DnsStatus(
            udp=self.dns_udp,
            tcp=self.dns_tcp,
            behind_launcher_firewall=reach is not None,
            reachable_from_outside=None if reach is None else reach.reachable,
            problem=None if reach is None else reach.problem,
            rate_limiting=self.rate_limit_status(),
            workers=worker_rows(self.udp_workers),
        )

    def rate_limit_settings(self) -> RrlSettings | None:
        """The UDP loop's rate limits at the moment; None when limiting is off."""
        return None if self.rate_limits is None else self.rate_limits()

    def rate_limit_status(self) -> RateLimiting | None:
        """Response rate limiting as the UDP loop applies it now; None when off."""
        settings = self.rate_limit_settings()
        if settings is None:
            return None
        return RateLimiting(
            rate=settings.rate,
            slip=settings.slip,
            ipv4_prefix=settings.ipv4_prefix,
            ipv6_prefix=settings.ipv6_prefix,
            table_size=settings.table_size,
            exempt=tuple(str(network) for network in settings.exempt),
        )

    def metric_families(self) -> list[Family]:
        workers = self.udp_workers or (self.serve_stats,)
        counts = summed_counts([item.snapshot() for item in workers])
        zone_stats = self.zone_stats
        fence = self.fence_generation()
        return [
            *self._node_families(counts, zone_stats, fence),
            *worker_families(worker_rows(workers)),
            *self._database_families(),
            *self._owner_families(),
            *self._transfer_families(),
            *self._edge_families(),
            *signing_families(self.holder.signer),
            *([] if self.commit_latency is None else [self.commit_latency()]),
        ]

    def _edge_families(self) -> list[Family]:
        stats = self.edge_stats
        if stats is None:
            return []
        not_after = None if self.edge_not_after is None else self.edge_not_after()
        return [
            Family(
                "valis_edge_certificate_not_after",
                "gauge",
                "When the edge's certificate expires (UNIX time; 0 while it has none).",
                (Sample(0 if not_after is None else not_after),),
            ),
            Family(
                "valis_edge_connections_total",
                "counter",
                "Connections the DNS-over-HTTPS edge accepted, those whose TLS handshake "
                "failed or timed out, and those closed to make room at the bound.",
                (
                    Sample(stats.connections, (("outcome", "accepted"),)),
                    Sample(stats.handshakes_failed, (("outcome", "handshake_failed"),)),
                    Sample(stats.displaced, (("outcome", "displaced"),)),
                ),
            ),
            Family(
                "valis_edge_responses_total",
                "counter",
                "HTTP responses the edge sent, by status and protocol (h2, http/1.1).",
                tuple(
                    Sample(n, (("status", str(status)), ("protocol", protocol)))
                    for (status, protocol), n in sorted(stats.responses.items())
                ),
            ),
        ]

    def _database_families(self) -> list[Family]:
        views = [public_soa(self.holder, zone) for zone in self.zones]
        families = [
            Family(
                "valis_zone_serial",
                "gauge",
                "The SOA serial served for each zone (-1 when its apex SOA is not answered).",
                tuple(
                    Sample(-1 if view.serial is None else view.serial, (("zone", view.zone),))
                    for view in views
                ),
            ),
            Family(
                "valis_zone_soa_refresh_seconds",
                "gauge",
                "The SOA REFRESH each zone serves: how often its secondaries ask for a newer "
                "serial (-1 when its apex SOA is not answered).",
                tuple(Sample(soa_refresh(view), (("zone", view.zone),)) for view in views),
            ),
        ]
        if self.database is not None:
            connected, _since = self.database()
            families.append(Family(
                "valis_database_up",
                "gauge",
                "1 while the operator-state database answers the heartbeat, else 0.",
                (Sample(1 if connected else 0),),
            ))
            families.append(Family(
                "valis_zone_source_following",
                "gauge",
                "1 while the zone source follows operator state (connected, every served "
                "zone re-read since it connected), else 0: changes are not served.",
                (Sample(1 if self.zone_stats.following else 0),),
            ))
        if self.failed_heartbeats is not None:
            families.append(Family(
                "valis_fence_heartbeats_failed_total",
                "counter",
                "Fenced heartbeats that did not reach the database.",
                (Sample(self.failed_heartbeats()),),
            ))
        return families

    def _transfer_families(self) -> list[Family]:
        families = []
        transfers = self.transfer_stats
        if transfers is not None:
            families.append(Family(
                "valis_zone_transfers_total",
                "counter",
                "Zone transfers (AXFR, IXFR) to listed secondaries, by outcome.",
                (
                    Sample(transfers.completed, (("outcome", "completed"),)),
                    Sample(transfers.failed, (("outcome", "failed"),)),
                ),
            ))
            families.append(Family(
                "valis_zone_transfers_sent_total",
                "counter",
                "Completed zone transfers by what was sent: axfr, incremental (IXFR from the "
                "change journal), whole_zone (IXFR beyond the journal), up_to_date (the SOA).",
                tuple(Sample(n, (("kind", kind),)) for kind, n in transfers.kinds.items()),
            ))
            families.append(Family(
                "valis_zone_transfers_refused_total",
                "counter",
                "Zone transfer requests refused, by why (unlisted address, unsigned, ...).",
                tuple(Sample(n, (("reason", kind),)) for kind, n in transfers.refused.items()),
            ))
        if self.secondaries is not None:
            states = self.secondaries()

            def samples(value: Callable[[SecondaryState], float | None]) -> tuple[Sample, ...]:
                return tuple(
                    Sample(-1 if value(state) is None else value(state) or 0,
                           (("zone", state.zone), ("secondary", state.address)))
                    for state in states
                )

            families.append(Family(
                "valis_secondary_serial",
                "gauge",
                "The serial each listed secondary last had (-1 before its first transfer).",
                samples(lambda state: state.serial),
            ))
            families.append(Family(
                "valis_secondary_lag_serials",
                "gauge",
                "Serials the served version is ahead of each secondary (-1: not known yet).",
                samples(lambda state: state.lag_serials),
            ))
            families.append(Family(
                "valis_secondary_lag_seconds",
                "gauge",
                "Seconds each secondary has been behind the served version (0: up to date).",
                samples(lambda state: state.lag_seconds),
            ))
        notify = self.notify_stats
        if notify is not None:
            families.append(Family(
                "valis_notify_total",
                "counter",
                "NOTIFY messages to secondaries: datagrams sent (retries included), "
                "answered, given up after every retry, and batches withheld while fenced out.",
                (
                    Sample(notify.sent, (("outcome", "sent"),)),
                    Sample(notify.answered, (("outcome", "answered"),)),
                    Sample(notify.unanswered, (("outcome", "unanswered"),)),
                    Sample(notify.withheld, (("outcome", "withheld"),)),
                ),
            ))
        return families

    def _owner_families(self) -> list[Family]:
        if self.owner_updates is None:
            return []
        applied, refused = self.owner_updates()
        return [
            Family(
                "valis_owner_updates_total",
                "counter",
                "DNS UPDATE messages the owner terminus answered, by outcome.",
                (
                    Sample(applied, (("outcome", "applied"),)),
                    Sample(refused, (("outcome", "refused"),)),
                ),
            )
        ]

    def _node_families(
        self, counts: ServeCounts, zone_stats: ZoneSourceStats, fence: int | None
    ) -> list[Family]:
        limits = self.rate_limit_settings()
        return [
            Family(
                "valis_dns_responses_total",
                "counter",
                "DNS responses sent, by transport and response code.",
                tuple(
                    Sample(value, (("transport", transport), ("rcode", rcode)))
                    for (transport, rcode), value in sorted(counts.responses.items())
                ),
            ),
            Family(
                "valis_dns_dropped_total",
                "counter",
                "DNS queries dropped without a response, by transport.",
                _by_transport(counts.dropped),
            ),
            Family(
                "valis_dns_truncated_total",
                "counter",
                "UDP responses truncated (TC=1).",
                (Sample(counts.truncated),),
            ),
            Family(
                "valis_dns_answer_errors_total",
                "counter",
                "Queries the answer path failed on (dropped and logged), by transport.",
                _by_transport(counts.answer_errors),
            ),
            Family(
                "valis_dns_send_failures_total",
                "counter",
                "Responses that could not be sent, by transport.",
                _by_transport(counts.send_failures),
            ),
            Family(
                "valis_dns_rate_limited_total",
                "counter",
                "UDP responses held back by response rate limiting, by action "
                "(dropped, or slipped: sent as a truncated reply).",
                tuple(
                    Sample(value, (("action", action),))
                    for action, value in sorted(counts.rate_limited.items())
                ),
            ),
            Family(
                "valis_dns_rate_limit",
                "gauge",
                "UDP responses a second each rate-limit bucket allows; 0: limiting off.",
                (Sample(0 if limits is None else limits.rate),),
            ),
            Family(
                "valis_dns_udp_compiled_total",
                "counter",
                "UDP responses the compiled fast path built; the rest were answered in "
                "Python (all of them on a build without it, valis_dns_udp_fast_path 0).",
                (Sample(counts.compiled),),
            ),
            Family(
                "valis_dns_tcp_compiled_total",
                "counter",
                "TCP responses the compiled path built; the rest were answered in Python.",
                (Sample(counts.tcp_compiled),),
            ),
            Family(
                "valis_dns_udp_fast_path",
                "gauge",
                "1 when UDP is served through the compiled fast path, 0 on the slower "
                "pure-Python path (the helper was not built).",
                (Sample(1 if fastpath.COMPILED else 0),),
            ),
            Family(
                "valis_dns_tcp_connections_total",
                "counter",
                "DNS TCP connections, by outcome.",
                (
                    Sample(counts.tcp_accepted, (("outcome", "accepted"),)),
                    Sample(counts.tcp_refused, (("outcome", "refused"),)),
                    Sample(counts.tcp_idle_closed, (("outcome", "idle_closed"),)),
                ),
            ),
            Family(
                "valis_zone_index_records",
                "gauge",
                "Records in the zone index being served.",
                (Sample(self.holder.current.record_count),),
            ),
            Family(
                "valis_zone_index_zones",
                "gauge",
                "Zones in the zone index being served.",
                (Sample(len(self.holder.current.zones)),),
            ),
            Family(
                "valis_zone_index_load_seconds",
                "gauge",
                "Seconds the last zone index load or reload took.",
                (Sample(zone_stats.last_load_seconds),),
            ),
            Family(
                "valis_zone_index_reloads_total",
                "counter",
                "Zone index rebuilds after a change, by outcome.",
                (
                    Sample(zone_stats.reloads, (("outcome", "swapped"),)),
                    Sample(zone_stats.failed_reloads, (("outcome", "failed"),)),
                ),
            ),
            Family(
                "valis_zone_index_updates_total",
                "counter",
                "Zones updated after a change: owners patched in, or re-read whole.",
                (
                    Sample(zone_stats.patched_zones, (("kind", "patched"),)),
                    Sample(zone_stats.rebuilt_zones, (("kind", "rebuilt"),)),
                ),
            ),
            Family(
                "valis_zone_source_reconnects_total",
                "counter",
                "Times the zone source reconnected to operator state.",
                (Sample(zone_stats.reconnects),),
            ),
            Family(
                "valis_fence_generation",
                "gauge",
                "The instance fence's generation as last read (-1 before it is read).",
                (Sample(-1 if fence is None else fence),),
            ),
            Family(
                "valis_store_generation",
                "gauge",
                "This instance's store generation.",
                (Sample(self.store_generation),),
            ),
            Family(
                "valis_fence_heartbeats_total",
                "counter",
                "Fenced heartbeat transactions committed.",
                (Sample(self.heartbeats()),),
            ),
            Family(
                "valis_ready",
                "gauge",
                "1 once the node serves DNS.",
                (Sample(1 if self.ready else 0),),
            ),
        ]

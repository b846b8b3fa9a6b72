"""``valis status``: is this node serving, and if not, why not.

Asks the running resident's fabric for its ``/status`` with the capability token kept in
the state directory, so run it on the node, as root or the run account, from the node's
network namespace (``ip netns exec NAME valis status`` behind fulcrum). A summary for
people, ``--json`` for tools. The exit status is 0 when the node is ready and serves every
zone, 1 when it is up but not ready (the reasons are printed) or cannot be asked: usable
as a monitoring check as it is. With ``--serving`` it is 0 whenever the node answers every
served zone, from its last good snapshot too while the database is out of reach: the
check for a load balancer or an anycast health check, which must not pull a node that is
answering. A node that stopped because it was fenced out (evacuated or
restored elsewhere) is said to be, with the holder and generation that fenced it out. A
DNS port the launcher's firewall drops is printed as a warning: the node serves, but
nothing outside reaches it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from valis_core.clock import wall
from valis_core.node_defaults import DEFAULT_STATE_DIR

if TYPE_CHECKING:  # the document's module imports the DNS engine: only when asked
    from valis_core.dns.transfer.secondary_progress import SecondaryState
    from valis_core.edge.stats import AcmeStatus
    from valis_core.resident.status_document import (
        EdgeStatus,
        NodeStatus,
        RolloverStatus,
        SignedZone,
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="ask the running node whether it is ready, and why not (exit 0 when ready)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR),
                        help="the node's state directory (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--serving", action="store_true",
        help="exit 0 whenever the node answers every served zone, even from its last "
        "snapshot while the database is out of reach (for a load balancer's health "
        "check); without it, 0 only when it is also ready in every respect (for alerting)",
    )
    parser.set_defaults(handler=_status)


def not_serving_reasons(status: NodeStatus) -> list[str]:
    """Why the node does not answer every served zone, from its status document (empty:
    it answers each, from its last good snapshot too while the database is away)."""
    reasons = []
    if not status.ready:
        reasons.append("bring-up has not finished (the resident's log says which stage)")
    for zone, view in sorted(status.zones.items()):
        if view.rcode != "NOERROR" or view.serial is None:
            reasons.append(f"zone {zone} answers {view.rcode}, not its SOA")
    return reasons


def not_ready_reasons(status: NodeStatus) -> list[str]:
    """Why the node is not fit to serve, from its status document (empty: it is): every
    reason it does not serve, a served zone gone from the database, a refused reload,
    and a lost database session."""
    reasons = not_serving_reasons(status)
    for zone in status.zones_gone_from_database:
        reasons.append(
            f"zone {zone} is no longer in the operator-state database (its last good "
            "version is served; import it again, or stop serving it)"
        )
    if status.reload_refused:
        reasons.append(
            f"the last reload was refused ({status.reload_refused}); the node runs as "
            "before: correct the store and reload again"
        )
    database = status.database
    if database is not None and database.connected is False:
        reasons.append("the operator-state database is not connected")
    elif database is not None and database.following is False:
        # The heartbeat reconnects first; ready means changes flow, so the zone source
        # must have re-read every served zone on its own connection too.
        reasons.append(
            "the zone source is not following operator state yet (it has not re-read "
            "the served zones since the connection came back): changes are not served"
        )
    return reasons


def _ago(since: float | None, now: float) -> str:
    if since is None:
        return "unknown"
    seconds = max(0, int(now - since))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s"


def _secondary_line(state: SecondaryState) -> str:
    where = f"secondary {state.address} of {state.zone}"
    if state.serial is None:
        return f"{where}: no transfer yet"
    lag = state.lag_serials
    if not lag:
        return f"{where}: serial {state.serial}, up to date"
    seconds = int(state.lag_seconds or 0)
    return f"{where}: serial {state.serial}, {lag} behind for {seconds}s"


def _duration(seconds: float) -> str:
    """``14d``, ``1d2h``, ``90s``: the non-zero parts of a duration."""
    rest, parts = int(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _signed_line(zone: SignedZone) -> str:
    """How a signed zone is signed, in one line (its rollover, if any, has its own)."""
    name = zone.zone
    if not zone.key_held:
        return (
            f"zone {name}: signed in operator state, but this node lacks its key: answered "
            "SERVFAIL until the key is restored from the backup set"
        )
    tags = " ".join(str(tag) for tag in zone.dnskey_tags or ())
    return (
        f"zone {name}: signed with algorithm {zone.algorithm}, key tag "
        f"{zone.key_tag} (DNSKEY {tags}), {zone.denial} denial; signatures "
        f"valid {_duration(zone.signature_validity_seconds or 0)}, made again every "
        f"{_duration(zone.signature_refresh_seconds or 0)}, "
        f"{zone.signatures_cached} cached"
    )


def _rollover_line(roll: RolloverStatus, now: float) -> str:
    zone = roll.zone
    since = _ago(roll.since, now)
    kind = f"{roll.kind.upper()} " if roll.kind in ("ksk", "zsk") else ""
    head = f"zone {zone}: {kind}key rollover at step {roll.step} for {since}"
    due = roll.due
    if due is None:
        return (
            f"{head}, waiting for the parent: give it the DS set 'valis zone ds {zone}' "
            f"prints, then 'valis zone rollover {zone} --ds-published'"
        )
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due))
    return f"{head}, next step in {_ago(now, due)} (at {at})"


def _at(when: float, now: float) -> str:
    """``2026-12-04T20:00:00Z (in 1d2h)`` or ``(3m ago)``: a moment and its distance."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    return f"{at} (in {_duration(when - now)})" if when >= now else \
        f"{at} ({_duration(now - when)} ago)"


def _edge_lines(edge: EdgeStatus, now: float) -> list[str]:
    """The DNS-over-HTTPS edge as ``--json`` has it (``edge``): its certificate and
    counters, then its ACME side; a part the resident did not report is left out."""
    expiry = edge.certificate_not_after
    certificate = "no certificate served yet" if expiry is None else (
        ("certificate valid until " if expiry > now else "certificate EXPIRED at ")
        + _at(expiry, now))
    counters = ", ".join(f"{what} {count}" for what, count in (
        ("connections", edge.connections), ("handshakes failed", edge.handshakes_failed),
        ("displaced", edge.displaced), ("responses", edge.responses)) if count is not None)
    lines = [f"edge: {certificate}" + (f"; {counters}" if counters else "")]
    if edge.acme is not None:
        lines.append(_acme_line(edge.acme, now))
    return lines


def _acme_line(acme: AcmeStatus, now: float) -> str:
    parts = [f"{what} {value}" for what, value in (
        ("for", acme.domain), ("from", acme.directory_url), ("orders", acme.orders),
        ("failures in a row", acme.failures_in_a_row), ("last step", acme.last_step),
    ) if value is not None]
    if acme.next_attempt is not None:
        parts.append(f"next attempt {_at(acme.next_attempt, now)}")
    if acme.last_error is not None:
        parts.append(f"last error: {acme.last_error}")
    return "acme: " + ("; ".join(parts) or "nothing reported")


def render_status(status: NodeStatus, now: float) -> str:
    """The status as a few lines for a person."""
    reasons = not_ready_reasons(status)
    head = "ready" if not reasons else "NOT READY: " + "; ".join(reasons)
    if reasons and not not_serving_reasons(status):
        head = "serving every zone, but " + head
    lines = [f"node {status.node}@{status.location}: {head}"]
    holder = status.fence_holder or "(holder not reported)"
    lines.append(
        f"fence: generation {status.fence_generation} held by {holder}; store "
        f"generation {status.generation}"
    )
    for zone, view in sorted(status.zones.items()):
        lines.append(f"zone {zone}: serial {view.serial} ({view.rcode})")
    for secondary in status.secondaries or ():
        lines.append(_secondary_line(secondary))
    for signed in status.signed_zones:
        lines.append(_signed_line(signed))
    for roll in status.rollovers:
        lines.append(_rollover_line(roll, now))
    database = status.database
    if database is not None:
        state = "connected" if database.connected else "NOT connected"
        lines.append(f"database: {state} for {_ago(database.since, now)}")
        if database.connected is False:
            lines.append(str(database.serving or "serving the last good snapshot"))
    else:
        lines.append("database: not reported by this resident")
    if status.edge is not None:
        lines.extend(_edge_lines(status.edge, now))
    lines.append(f"modules: {', '.join(status.modules) or 'none'}")
    lines.append(f"up for {_ago(status.started_at, now)}")
    dns = status.dns
    lines.append(f"dns: udp {dns and dns.udp} tcp {dns and dns.tcp}")
    for row in dns.workers if dns is not None else ():
        lines.append(
            f"  worker {row.worker}: answered {row.answered} (compiled {row.compiled}, "
            f"handed to Python {row.handed_to_python}), dropped {row.dropped}"
        )
    if dns is not None and dns.problem:
        lines.append(f"warning: {dns.problem}")
    if status.restart_pending:
        lines.append(
            f"warning: restart needed: {', '.join(status.restart_pending)} changed in the "
            "configuration store, and the node runs on the old value until it restarts "
            "(systemctl restart fulcrum-valis)")
    return "\n".join(lines) + "\n"


def _pinned_modules(state_dir: Path) -> list[str]:
    """The modules the store head pins: what the node loaded at boot."""
    from valis_core.store.head import read_store_head
    from valis_core.store.manifest import ManifestError

    try:
        head = read_store_head(state_dir)
    except (ManifestError, OSError):
        return []
    return [] if head is None else [f"{pin.name}=={pin.version}" for pin in head.modules]


def _fenced_out(state_dir: Path) -> str | None:
    """What the fenced-out verdict left in ``state_dir`` says, if one holds for its store."""
    from valis_core.fence_verdict import read_verdict
    from valis_core.store.head import read_store_head
    from valis_core.store.manifest import ManifestError

    try:
        head = read_store_head(state_dir)
    except (ManifestError, OSError):
        return None
    verdict = read_verdict(state_dir, None if head is None else head.generation)
    return None if verdict is None else verdict.describe()


def _status(args: argparse.Namespace) -> int:
    from valis_core.fence_verdict import NodeFencedOut
    from valis_core.resident.node_status import NodeNotRunning, read_node_status
    from valis_core.resident.status_document import render_indented

    try:
        status = read_node_status(args.state_dir)
    except NodeNotRunning:
        fenced = _fenced_out(args.state_dir)
        if fenced is not None:
            raise NodeFencedOut(fenced) from None
        raise
    if not status.modules:
        status = attrs.evolve(status, modules=tuple(_pinned_modules(args.state_dir)))
    reasons = not_serving_reasons if args.serving else not_ready_reasons
    ready = not reasons(status)
    if args.json:
        sys.stdout.write(render_indented(status).decode("ascii"))
    else:
        sys.stdout.write(render_status(status, wall()))
    return 0 if ready else 1

"""A DNS server over master files, without a database: what ``valis serve`` runs.

``load_zone_files`` reads each file under its origin (named, or found by ``origin_of``)
and builds one index; ``serve_zone_files`` answers on bound DNS pairs until SIGINT or
SIGTERM and re-reads every file on SIGHUP, swapping the new zones in whole (a file that
no longer loads leaves the served zones as they were). Given rate-limit settings, its UDP
responses are limited as the resident limits them (``valis_core.dns.serve.rrl``).
"""

from __future__ import annotations

import functools
import logging
import signal
import socket
from collections.abc import Sequence

import attrs
import trio

from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.serve._loops import ServeStats
from valis_core.dns.serve._tcp_loop import serve_tcp
from valis_core.dns.serve._udp_loop import serve_udp
from valis_core.dns.serve.limited_udp import limiter_for, summed_counts
from valis_core.dns.serve.listen import format_address
from valis_core.dns.serve.rrl import RrlSettings, describe
from valis_core.dns.wire import to_text
from valis_core.dns.wire.origin import ZoneFileError, origin_of
from valis_core.dns.zone import ZoneIndex
from valis_core.errors import ValisError

log = logging.getLogger("valis.serve")



@attrs.frozen
class ZoneFile:
    """A master file and the origin it is read under (``None``: the file tells)."""

    path: str
    origin: str | None = None


Pair = tuple[socket.socket, socket.socket]
"""A bound DNS pair: (UDP, listening TCP)."""


def load_zone_files(files: Sequence[ZoneFile]) -> ZoneIndex:
    """Read every zone file and build one index over all of them."""
    texts: list[tuple[str, str | None]] = []
    for file in files:
        try:
            with open(file.path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ZoneFileError(
                f"serve: cannot read zone file {file.path}: {reason}; check the --zone path "
                "and its permissions"
            ) from None
        texts.append((text, file.origin or origin_of(file.path, text)))
    return ZoneIndex.from_zone_texts(texts)


async def serve_zone_files(
    files: Sequence[ZoneFile], pairs: Sequence[Pair], index: ZoneIndex,
    *, signer: Signer | None = None, rrl: RrlSettings | None = None,
    more_udp: Sequence[socket.socket] = (),
) -> str:
    """Answer ``index`` on ``pairs`` (closed on the way out) until SIGINT or SIGTERM,
    reloading ``files`` on SIGHUP; returns the name of the signal that stopped it. With
    ``signer`` its zones are signed online (kept across reloads); with ``rrl`` the UDP
    responses are rate limited (one limiter for every pair). ``more_udp`` are the other
    DNS workers' UDP sockets (each in the ``SO_REUSEPORT`` group of a pair's UDP socket),
    each served by a loop of its own, counting into its own ``ServeStats``."""
    bound = [
        (trio.socket.from_stdlib_socket(udp), trio.socket.from_stdlib_socket(tcp))
        for udp, tcp in pairs
    ]
    more = [trio.socket.from_stdlib_socket(udp) for udp in more_udp]
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        holder = IndexHolder(index, signer)
        stats = ServeStats()
        more_stats = [ServeStats() for _ in more]
        limiter = limiter_for(rrl, holder)
        stopped_by = "?"
        try:
            async with trio.open_nursery() as nursery:
                for udp, tcp in bound:
                    nursery.start_soon(functools.partial(serve_udp, udp, holder, stats=stats,
                                                         limiter=limiter))
                    nursery.start_soon(functools.partial(serve_tcp, tcp, holder, stats=stats))
                for udp, own in zip(more, more_stats, strict=True):
                    nursery.start_soon(functools.partial(serve_udp, udp, holder, stats=own,
                                                         limiter=limiter))
                log.info(
                    "serving %s (%d records) on %s%s",
                    describe_zones(index),
                    index.record_count,
                    ", ".join(_describe_pair(udp, tcp) for udp, tcp in pairs),
                    f" ({len(more) // len(pairs) + 1} UDP workers each)" if more else "",
                )
                if rrl is not None:
                    log.info("%s", describe(rrl))
                for apex, zone in sorted((signer.zones if signer else {}).items()):
                    if zone.key is not None:
                        log.info("signing %s online with algorithm %d, key tag %d",
                                 to_text(apex), zone.key.algorithm, zone.key.tag)
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        await _reload(files, holder)
                        continue
                    stopped_by = signal.Signals(signum).name
                    nursery.cancel_scope.cancel()
                    break
        finally:
            for udp, tcp in bound:
                udp.close()
                tcp.close()
            for udp in more:
                udp.close()
        total = summed_counts([stats.snapshot(), *(item.snapshot() for item in more_stats)])
        held = "" if rrl is None else (
            f"; rate limiting dropped {total.rate_limited['dropped']} and slipped "
            f"{total.rate_limited['slipped']}"
        )
        log.info("stopped on %s after %d responses%s", stopped_by, total.responses_total,
                 held)
    return stopped_by


async def _reload(files: Sequence[ZoneFile], holder: IndexHolder) -> None:
    try:
        index = await trio.to_thread.run_sync(load_zone_files, files)
    except ValisError as exc:
        log.error("reload refused, still serving the previous zones: %s", exc)
        return
    holder.swap(index)
    log.info("reloaded: serving %s (%d records)", describe_zones(index), index.record_count)


def describe_zones(index: ZoneIndex) -> str:
    zones = sorted(str(zone) for zone in index.zones)
    noun = "zone" if len(zones) == 1 else "zones"
    return f"{len(zones)} {noun} ({', '.join(zones)})"


def _describe_pair(udp: socket.socket, tcp: socket.socket) -> str:
    udp_host, udp_port = udp.getsockname()[:2]
    tcp_port = tcp.getsockname()[1]
    where = format_address(udp_host, udp_port)
    return f"{where} udp+tcp" if udp_port == tcp_port else f"{where} udp, tcp port {tcp_port}"

"""``valis serve``: answer zone files over DNS on an unprivileged port, for development
and for trying valis out.

No launcher is involved, so this command binds its own UDP+TCP pair, and for that
reason it refuses privileged ports: valis never binds :53 itself (the resident serves
:53 only on descriptors the launcher hands down)."""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

import attrs
import dns.exception
import dns.name
import trio

from valis_core.dns.serve import IndexHolder, ServeStats, serve_tcp, serve_udp
from valis_core.dns.zone import ZoneIndex
from valis_core.errors import ValisError

log = logging.getLogger("valis.serve")

DEFAULT_LISTEN = "127.0.0.1:5353"
_BIND_ATTEMPTS = 20
_FIRST_UNPRIVILEGED_PORT = 1024
_ZONE_FILE_SUFFIXES = (".zone", ".db")

_EPILOG = f"""\
zone origin, for each --zone:
  example.com=PATH    the origin is named explicitly;
  PATH                the origin is the file's leading $ORIGIN directive or its absolute
                      SOA owner; failing both, the file name: example.com.zone,
                      example.com.db, db.example.com and example.com all mean example.com.

listening:
  --listen ADDRESS:PORT binds UDP and TCP on the same port (default {DEFAULT_LISTEN});
  IPv6 as [::1]:5353; repeat --listen for several addresses. Port 0 picks a free port;
  privileged ports (below 1024) are refused: valis never binds :53 itself.

signals:
  SIGINT, SIGTERM  stop and exit 0.
  SIGHUP           re-read every zone file and swap the new zones in while serving; a
                   file that no longer loads leaves the zones being served unchanged.

try it:
  valis serve --zone example.com=example.com.zone --listen 127.0.0.1:5353
  dig @127.0.0.1 -p 5353 example.com SOA
"""


class ServeSetupError(ValisError):
    """``valis serve`` cannot start: a zone file or a listen address is unusable."""


@attrs.frozen
class ZoneSource:
    """One ``--zone`` argument: a master file and the origin it is read under (``None``
    until the file itself has been looked at)."""

    path: str
    origin: str | None


@attrs.frozen
class ListenAddress:
    family: socket.AddressFamily
    host: str
    port: int


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="answer zone files over DNS on an unprivileged port (development server)",
        description=(
            "Serve RFC 1035 zone files authoritatively over UDP and TCP until SIGINT or "
            "SIGTERM. Logs one line when it starts and one when it stops."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--zone",
        dest="zones",
        action="append",
        required=True,
        metavar="[ORIGIN=]FILE",
        help="a zone master file to serve (repeatable; see 'zone origin' below)",
    )
    parser.add_argument(
        "--listen",
        dest="listen",
        action="append",
        metavar="ADDRESS:PORT",
        help=f"where to answer, UDP and TCP (repeatable; default {DEFAULT_LISTEN})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    sources = [parse_zone_argument(text) for text in args.zones]
    addresses = [parse_listen(text) for text in (args.listen or [DEFAULT_LISTEN])]
    _configure_logging()
    index = load_zones(sources)
    return trio.run(_serve, sources, addresses, index)


def parse_zone_argument(text: str) -> ZoneSource:
    """``ORIGIN=FILE`` or ``FILE``; an existing file named with ``=`` is a file."""
    origin, sep, path = text.partition("=")
    if sep and origin and "/" not in origin and not os.path.exists(text):
        return ZoneSource(path=path, origin=origin if origin.endswith(".") else origin + ".")
    return ZoneSource(path=text, origin=None)


def parse_listen(text: str) -> ListenAddress:
    """``127.0.0.1:5353`` or ``[::1]:5353``: a literal address and a port."""
    remedy = f"give --listen as ADDRESS:PORT with a literal IP, e.g. {DEFAULT_LISTEN} or [::1]:5353"
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ServeSetupError(f"serve: listen address {text!r} is not ADDRESS:PORT; {remedy}")
    try:
        info = socket.getaddrinfo(
            host, int(port_text), type=socket.SOCK_DGRAM, flags=socket.AI_NUMERICHOST
        )
    except socket.gaierror:
        raise ServeSetupError(
            f"serve: listen address {text!r} is not a literal IP address; {remedy}"
        ) from None
    port = int(port_text)
    if 0 < port < _FIRST_UNPRIVILEGED_PORT:
        raise ServeSetupError(
            f"serve: refusing privileged port {port} in --listen {text!r}: valis never binds "
            "a privileged port itself (fulcrum binds :53 and hands it to the resident); "
            "use a port of 1024 or above"
        )
    family, _, _, _, sockaddr = info[0]
    return ListenAddress(family=family, host=str(sockaddr[0]), port=port)


def load_zones(sources: Sequence[ZoneSource]) -> ZoneIndex:
    """Read every zone file and build one index over all of them."""
    texts: list[tuple[str, str | None]] = []
    for source in sources:
        try:
            with open(source.path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ServeSetupError(
                f"serve: cannot read zone file {source.path}: {_reason(exc)}; "
                "check the --zone path and its permissions"
            ) from None
        texts.append((text, source.origin or origin_of(source.path, text)))
    return ZoneIndex.from_zone_texts(texts)


def origin_of(path: str, text: str) -> str:
    """The origin a zone file names for itself, else the one its file name implies."""
    named = _origin_in_text(text)
    if named is not None:
        return named
    name = os.path.basename(path)
    if name.startswith("db."):
        name = name[3:]
    for suffix in _ZONE_FILE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name:
        try:
            return dns.name.from_text(name).to_text()
        except dns.exception.DNSException:
            pass
    raise ServeSetupError(
        f"serve: cannot tell the origin of zone file {path}; name it on the command line "
        f"(--zone example.com={path}) or start the file with '$ORIGIN example.com.'"
    )


def _origin_in_text(text: str) -> str | None:
    """A leading ``$ORIGIN`` directive, or the owner of a first record that is an SOA
    with an absolute owner name."""
    for line in text.splitlines():
        content = line.split(";", 1)[0]
        if not content.strip():
            continue
        tokens = content.split()
        if tokens[0].upper() == "$ORIGIN" and len(tokens) > 1:
            return tokens[1] if tokens[1].endswith(".") else None
        if tokens[0].startswith("$"):
            continue
        if content[0].isspace():
            return None
        owner = tokens[0]
        if owner.endswith(".") and "SOA" in (token.upper() for token in tokens[1:]):
            return owner
        return None
    return None


async def _serve(
    sources: Sequence[ZoneSource], addresses: Sequence[ListenAddress], index: ZoneIndex
) -> int:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        pairs = await _bind_all(addresses)
        holder = IndexHolder(index)
        stats = ServeStats()
        stopped_by = "?"
        try:
            async with trio.open_nursery() as nursery:
                for udp, tcp in pairs:
                    nursery.start_soon(functools.partial(serve_udp, udp, holder, stats=stats))
                    nursery.start_soon(functools.partial(serve_tcp, tcp, holder, stats=stats))
                log.info(
                    "serving %s (%d records) on %s",
                    _describe_zones(index),
                    index.record_count,
                    ", ".join(_describe_pair(udp, tcp) for udp, tcp in pairs),
                )
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        await _reload(sources, holder)
                        continue
                    stopped_by = signal.Signals(signum).name
                    nursery.cancel_scope.cancel()
                    break
        finally:
            for udp, tcp in pairs:
                udp.close()
                tcp.close()
        counts = stats.snapshot()
        log.info("stopped on %s after %d responses", stopped_by, counts.responses_total)
    return 0


async def _reload(sources: Sequence[ZoneSource], holder: IndexHolder) -> None:
    try:
        index = await trio.to_thread.run_sync(load_zones, sources)
    except ValisError as exc:
        log.error("reload refused, still serving the previous zones: %s", exc)
        return
    holder.swap(index)
    log.info("reloaded: serving %s (%d records)", _describe_zones(index), index.record_count)


async def _bind_all(
    addresses: Sequence[ListenAddress],
) -> list[tuple[trio.socket.SocketType, trio.socket.SocketType]]:
    pairs: list[tuple[trio.socket.SocketType, trio.socket.SocketType]] = []
    try:
        for address in addresses:
            pairs.append(await _bind_pair(address))
    except BaseException:
        for udp, tcp in pairs:
            udp.close()
            tcp.close()
        raise
    return pairs


async def _bind_pair(
    address: ListenAddress,
) -> tuple[trio.socket.SocketType, trio.socket.SocketType]:
    """Bind TCP then UDP on one port; for port 0, retry until both get the same one."""
    for _ in range(_BIND_ATTEMPTS):
        tcp = trio.socket.socket(address.family, socket.SOCK_STREAM)
        udp = trio.socket.socket(address.family, socket.SOCK_DGRAM)
        try:
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if address.family == socket.AF_INET6:
                tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            await tcp.bind((address.host, address.port))
            port = tcp.getsockname()[1]
            await udp.bind((address.host, port))
            tcp.listen(socket.SOMAXCONN)
        except OSError as exc:
            tcp.close()
            udp.close()
            if address.port == 0 and exc.errno == errno.EADDRINUSE:
                continue
            raise ServeSetupError(
                f"serve: cannot listen on {_format(address.host, address.port)}: "
                f"{_reason(exc)}; choose another --listen address or port, or stop the "
                "process holding it"
            ) from None
        return udp, tcp
    raise ServeSetupError(
        f"serve: found no port free for both UDP and TCP on {address.host}; "
        "name a port in --listen"
    )


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("valis serve: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _describe_zones(index: ZoneIndex) -> str:
    zones = sorted(str(zone) for zone in index.zones)
    noun = "zone" if len(zones) == 1 else "zones"
    return f"{len(zones)} {noun} ({', '.join(zones)})"


def _describe_pair(udp: trio.socket.SocketType, tcp: trio.socket.SocketType) -> str:
    udp_host, udp_port = udp.getsockname()[:2]
    tcp_port = tcp.getsockname()[1]
    where = _format(udp_host, udp_port)
    return f"{where} udp+tcp" if udp_port == tcp_port else f"{where} udp, tcp port {tcp_port}"


def _format(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)

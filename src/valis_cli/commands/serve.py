"""``valis serve``: answer zone files over DNS on an unprivileged port, for development
and for trying valis out.

No launcher is involved, so this command binds its own UDP+TCP pair, and for that
reason it refuses privileged ports: valis never binds :53 itself (the resident serves
:53 only on descriptors the launcher hands down). The serving is the library's
(``valis_core.dns.serve.file_server``); this module reads the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from valis_cli.rrl_options import RRL_EPILOG, add_rrl_arguments, rrl_facts
from valis_core.errors import ValisError

if TYPE_CHECKING:
    from valis_core.dns.answer.signed import Signer
    from valis_core.dns.serve.file_server import ZoneFile
    from valis_core.dns.zone import ZoneIndex

DEFAULT_LISTEN = "127.0.0.1:5310"
"""Not 5353: that is multicast DNS, which a desktop's avahi or resolver already holds."""

_EPILOG = f"""\
zone origin, for each --zone:
  example.com=PATH    the origin is named explicitly;
  PATH                the origin is the file's leading $ORIGIN directive or its absolute
                      SOA owner; failing both, the file name: example.com.zone,
                      example.com.db, db.example.com and example.com all mean example.com.

listening:
  --listen ADDRESS:PORT binds UDP and TCP on the same port (default {DEFAULT_LISTEN});
  IPv6 as [::1]:5310; repeat --listen for several addresses. Port 0 picks a free port;
  privileged ports (below 1024) are refused: valis never binds :53 itself.
  --workers N binds N UDP sockets on each address (one SO_REUSEPORT group; the kernel
  spreads clients across them), each answered by a worker of its own (default 1; a node
  under fulcrum takes VALIS_DNS_WORKERS, default one per CPU). TCP keeps one listener.

signing:
  --sign-key ZONE=KEYFILE signs ZONE online (DNSSEC, compact denial) with the private key
  in KEYFILE: unencrypted PKCS #8 PEM, P-256 (algorithm 13) or Ed25519 (15), as 'valis
  zone sign' keeps them. 'dig +dnssec @127.0.0.1 -p PORT ZONE DNSKEY' shows the key.

{RRL_EPILOG}
signals:
  SIGINT, SIGTERM  stop and exit 0.
  SIGHUP           re-read every zone file and swap the new zones in while serving; a
                   file that no longer loads leaves the zones being served unchanged.

try it:
  valis serve --zone example.com=example.com.zone --listen 127.0.0.1:5310
  dig @127.0.0.1 -p 5310 example.com SOA
"""


class ServeSetupError(ValisError):
    """``valis serve`` cannot start: a listen address is unusable."""


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
    parser.add_argument(
        "--sign-key",
        dest="sign_keys",
        action="append",
        default=[],
        metavar="ZONE=KEYFILE",
        help="sign ZONE online with the key in KEYFILE (repeatable; see 'signing' below)",
    )
    parser.add_argument(
        "--workers",
        dest="workers",
        metavar="N",
        help="UDP sockets (and workers) per --listen address, 1..1024 (default 1; see "
        "'listening' below)",
    )
    add_rrl_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from valis_core.dns.answer import fastpath
    from valis_core.dns.serve.file_server import load_zone_files, serve_zone_files
    from valis_core.dns.serve.listen import bind_dns_sockets
    from valis_core.operator_state.site_facts import rrl_settings

    rrl = rrl_settings(rrl_facts(args))
    workers = parse_workers(args.workers)
    files = [parse_zone_argument(text) for text in args.zones]
    addresses = [parse_listen(text) for text in (args.listen or [DEFAULT_LISTEN])]
    _configure_logging()
    index = load_zone_files(files)
    signer = signer_for_keys(index, args.sign_keys)
    pairs: list[tuple[socket.socket, socket.socket]] = []
    more: list[socket.socket] = []
    try:
        for address in addresses:
            (udp, *others), tcp = bind_dns_sockets(
                address.family, address.host, address.port, workers
            )
            pairs.append((udp, tcp))
            more.extend(others)
    except BaseException:
        for sock in (*(item for pair in pairs for item in pair), *more):
            sock.close()
        raise
    fastpath.time_slice(fastpath.SERVING_SLICE_NS)  # before any thread: they inherit it
    trio.run(partial(serve_zone_files, files, pairs, index, signer=signer, rrl=rrl,
                     more_udp=more))
    return 0


def parse_workers(text: str | None) -> int:
    """``--workers N``: 1..1024 UDP sockets per address, checked as the site fact
    ``VALIS_DNS_WORKERS`` is; absent, 1 (the development server as it always was)."""
    from valis_core.operator_state.site_facts import SiteFactsError, dns_workers

    if text is None:
        return 1
    try:
        return dns_workers(text, 1, given_as="serve: --workers")
    except SiteFactsError as exc:
        raise ServeSetupError(str(exc)) from None


def signer_for_keys(index: ZoneIndex, texts: list[str]) -> Signer | None:
    """The signer for the ``ZONE=KEYFILE`` arguments (``None``: none given); a zone not
    served, or named twice, is refused."""
    from valis_core.clock import wall
    from valis_core.dns import wire
    from valis_core.dns.answer.signed import Signer
    from valis_core.dns.dnssec.zone_keys import read_key_file

    keys = {}
    for text in texts:
        zone, sep, path = text.partition("=")
        if not sep or not zone or not path:
            raise ServeSetupError(
                f"serve: --sign-key {text!r} is not ZONE=KEYFILE, e.g. "
                "example.com=Kexample.com+013+12345.pem"
            )
        zone = zone.lower() if zone.endswith(".") else zone.lower() + "."
        if zone not in index.zones:
            raise ServeSetupError(
                f"serve: --sign-key names zone {zone}, which no --zone serves; serve it "
                f"({', '.join(index.zones)} are served) or drop the --sign-key"
            )
        apex = wire.from_text(zone).lower()
        if apex in keys:
            raise ServeSetupError(f"serve: --sign-key names zone {zone} twice; give one key")
        keys[apex] = read_key_file(Path(path))
    return Signer(dict(keys), clock=wall) if keys else None


def parse_zone_argument(text: str) -> ZoneFile:
    """``ORIGIN=FILE`` or ``FILE``; an existing file named with ``=`` is a file."""
    from valis_core.dns.serve.file_server import ZoneFile

    origin, sep, path = text.partition("=")
    if sep and origin and "/" not in origin and not os.path.exists(text):
        return ZoneFile(path=path, origin=origin if origin.endswith(".") else origin + ".")
    return ZoneFile(path=text, origin=None)


def parse_listen(text: str) -> ListenAddress:
    """``127.0.0.1:5310`` or ``[::1]:5310``: a literal address and a port."""
    from valis_core.dns.serve.listen import PRIVILEGED_PORT_LIMIT

    remedy = f"give --listen as ADDRESS:PORT with a literal IP, e.g. {DEFAULT_LISTEN} or [::1]:5310"
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
    if 0 < port < PRIVILEGED_PORT_LIMIT:
        raise ServeSetupError(
            f"serve: refusing privileged port {port} in --listen {text!r}: valis never binds "
            "a privileged port itself (fulcrum binds :53 and hands it to the resident); "
            "use a port of 1024 or above"
        )
    family, _, _, _, sockaddr = info[0]
    return ListenAddress(family=family, host=str(sockaddr[0]), port=port)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("valis serve: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)

"""``valis zone sign --denial``: how a signed zone denies existence, compactly (RFC 9824,
the default) or from an NSEC3 chain (RFC 5155) that zone transfers carry.

The arguments and the fenced write ``valis zone sign`` makes with them; kept here so the
choice of denial is one concept in one place.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from valis_core.errors import ValisError

if TYPE_CHECKING:
    from valis_core.dns.dnssec.nsec3 import Nsec3Params
    from valis_core.fence import FenceState


class DenialVerbError(ValisError):
    """NSEC3 parameters the verb cannot take as given."""


def add_denial_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--denial", choices=("compact", "nsec3"),
        help="compact: RFC 9824, made per query (the default for a zone signed anew); "
        "nsec3: an NSEC3 chain (RFC 5155) that zone transfers carry, so secondaries serve "
        "the zone signed. Without it a signed zone keeps the denial it has",
    )
    parser.add_argument(
        "--nsec3-iterations", type=int, default=0, metavar="N",
        help="extra NSEC3 hash iterations (default 0, as RFC 9276 asks)",
    )
    parser.add_argument(
        "--nsec3-salt", default="-", metavar="HEX",
        help="the NSEC3 salt in hex, '-' for none (the default, as RFC 9276 asks)",
    )


def denial_asked(args: argparse.Namespace) -> tuple[bool, Nsec3Params | None]:
    """Whether the verb was asked to set the denial, and the NSEC3 parameters (``None``:
    compact), checked before anything is written."""
    from valis_core.operator_state.zone_denial import NSEC3, checked_params

    if args.denial != NSEC3:
        return args.denial is not None, None
    text = args.nsec3_salt.strip()
    try:
        salt = b"" if text == "-" else bytes.fromhex(text)
    except ValueError:
        raise DenialVerbError(
            f"--nsec3-salt {text!r} is not hex; give the salt as hex digits, or '-' for none"
        ) from None
    return True, checked_params(args.nsec3_iterations, salt)


def set_asked_denial(
    conn: Any, standing: FenceState, zone: str, asked: tuple[bool, Nsec3Params | None]
) -> str:
    """Write the denial asked for (fenced); what the verb says of it ("" when none was)."""
    from valis_core.operator_state.zone_denial import set_denial

    given, nsec3 = asked
    if not given:
        return ""
    set_denial(conn, standing, zone, nsec3)
    if nsec3 is None:
        return "; denial of existence: compact (RFC 9824)"
    return (
        f"; denial of existence: NSEC3 (iterations {nsec3.iterations}, salt "
        f"{nsec3.salt.hex() or '-'}, no opt-out)"
    )

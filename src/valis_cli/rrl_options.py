"""The response rate limiting flags of ``valis serve``: the ``VALIS_RRL_*`` site facts
as command-line flags, so an operator can try limiting without a resident. Each value is
checked by the site facts' own checks and refused naming its flag."""

from __future__ import annotations

import argparse

from valis_core.errors import ValisError
from valis_core.operator_state.site_facts import (
    RRL_EXEMPT_KEY,
    RRL_IPV4_PREFIX_KEY,
    RRL_IPV6_PREFIX_KEY,
    RRL_RATE_KEY,
    RRL_SLIP_KEY,
    RRL_TABLE_SIZE_KEY,
    SiteFactsError,
    check_rrl_number,
    rrl_exempt_networks,
)

RRL_FLAGS = {
    "rrl_rate": ("--rrl-rate", RRL_RATE_KEY),
    "rrl_slip": ("--rrl-slip", RRL_SLIP_KEY),
    "rrl_ipv4_prefix": ("--rrl-ipv4-prefix", RRL_IPV4_PREFIX_KEY),
    "rrl_ipv6_prefix": ("--rrl-ipv6-prefix", RRL_IPV6_PREFIX_KEY),
    "rrl_table_size": ("--rrl-table-size", RRL_TABLE_SIZE_KEY),
}
"""Each whole-number flag: its spelling and the site fact it stands for."""

RRL_EPILOG = """\
response rate limiting (UDP only; off unless --rrl-rate is given, as the resident's
VALIS_RRL_* site facts; see docs/rate-limiting.md):
  --rrl-rate N          responses a second per source prefix and response class (0: off)
  --rrl-slip N          every Nth limited response is sent truncated (TC); 0 drops all
  --rrl-ipv4-prefix N   IPv4 source prefix length (default 24); --rrl-ipv6-prefix (56)
  --rrl-table-size N    buckets (default 393241)
  --rrl-exempt PREFIX   a source address or CIDR prefix never limited (repeatable, or
                        several joined by commas)
"""


class RrlOptionError(ValisError):
    """A rate-limit flag whose value cannot be used."""


def add_rrl_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("response rate limiting (see below)")
    for dest, (flag, key) in RRL_FLAGS.items():
        group.add_argument(flag, dest=dest, metavar="N", help=f"as the site fact {key}")
    group.add_argument(
        "--rrl-exempt", dest="rrl_exempt", action="append", default=[], metavar="PREFIX",
        help=f"never limit this source prefix (repeatable; as the site fact {RRL_EXEMPT_KEY})",
    )


def rrl_facts(args: argparse.Namespace) -> dict[str, str]:
    """The rate-limit site facts the flags stand for, each checked as the site fact is;
    a refusal names the flag. Tuning flags without ``--rrl-rate`` are refused."""
    facts: dict[str, str] = {}
    try:
        for dest, (flag, key) in RRL_FLAGS.items():
            value = getattr(args, dest)
            if value is not None:
                check_rrl_number(key, value, given_as=f"serve: {flag}")
                facts[key] = value
        if args.rrl_exempt:
            exempt = ",".join(args.rrl_exempt)
            rrl_exempt_networks(exempt, given_as="serve: --rrl-exempt")
            facts[RRL_EXEMPT_KEY] = exempt
    except SiteFactsError as exc:
        raise RrlOptionError(str(exc)) from None
    tuning = [flag for dest, (flag, key) in RRL_FLAGS.items() if key in facts and
              key != RRL_RATE_KEY] + (["--rrl-exempt"] if RRL_EXEMPT_KEY in facts else [])
    if tuning and RRL_RATE_KEY not in facts:
        raise RrlOptionError(
            f"serve: {', '.join(tuning)} {'tunes' if len(tuning) == 1 else 'tune'} response "
            "rate limiting, which is off without --rrl-rate; give --rrl-rate N too, or drop "
            f"{'it' if len(tuning) == 1 else 'them'}"
        )
    return facts

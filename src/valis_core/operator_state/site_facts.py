"""Site facts: the node's environment file, its first-boot seed.

Rendered off the node, staged onto it, read once by the node into its configuration
store. The format is a systemd ``EnvironmentFile=``: one ``VALIS_*="value"`` line per
fact, in sorted key order, after one header comment. Every value is double-quoted and
inside the quotes exactly the four characters ``\\ " $ ``` `` are backslash-escaped; that
is the one quoting systemd's parser reads the same way for every value (spaces, quotes,
``$``, backslashes, leading or trailing blanks) and which ``parse_site_facts`` inverts
exactly. A value may not hold a control character (newline and NUL among them): systemd
would split or truncate it.

``VALIS_SERVED_ZONES`` is a comma-separated list of zone names with no blanks, e.g.
``example.org.,example.net.``; ``served_zones`` splits it. ``*`` alone (``EVERY_ZONE``)
serves every zone the operator-state database holds, as it holds them: a zone imported
there later is served without a site-facts edit, and a node of 10^5 zones needs no value
longer than the 128 KiB the kernel lets one environment string be (``execve``'s
``MAX_ARG_STRLEN``; the launcher hands site facts down in the environment).

The file is written mode 0640: it is the node's configuration (the operator-state DSN
names the database, its socket and its role; under peer authentication it holds no
password, but it is still no business of other accounts). Group read lets the operator
hand it to the run group; systemd reads it as root either way.

This module renders and parses; ``site_facts_file.write_site_facts`` writes. A refusal
happens before anything touches the disk, and the write itself is atomic, so a refused
render leaves no file, no temporary file, and any previous file untouched.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from valis_core.errors import ValisError

if TYPE_CHECKING:
    from valis_core.dns.serve.rrl import RrlSettings

DSN_KEY = "VALIS_OPERATOR_STATE_DSN"
EVERY_ZONE = "*"
"""``VALIS_SERVED_ZONES=*``: serve every zone of operator state (never a zone's name:
no zone is named ``*``)."""
REQUIRED_KEYS: frozenset[str] = frozenset(
    {"VALIS_NODE_NAME", "VALIS_LOCATION", DSN_KEY, "VALIS_SERVED_ZONES"}
)
EDGE_CERT_KEY = "VALIS_EDGE_CERT"
EDGE_CERT_MODES: frozenset[str] = frozenset({"required", "on-demand"})
"""``required`` (the default): an elected edge without a certificate stops the boot;
``on-demand``: :53 serves and the edge comes up when the certificate arrives."""
ACME_DIRECTORY_KEY = "VALIS_ACME_DIRECTORY_URL"
"""The ACME CA's directory URL (``acme-directory-url``): where the edge's certificate is
obtained. No default: a URL names a host, and a default would be somebody else's CA."""
DNS_WORKERS_KEY = "VALIS_DNS_WORKERS"
"""How many UDP sockets fulcrum binds on the DNS address (``SO_REUSEPORT``), each
drained by a worker of its own; absent: the CPUs the unit may run on
(``sched_getaffinity``). Read by fulcrum at launch (``dns_workers``)."""
MAX_DNS_WORKERS = 1024
OPTIONAL_KEYS: frozenset[str] = frozenset(
    {"VALIS_SERVED_DOMAIN", "VALIS_LOG_LEVEL", "VALIS_LOG_FORMAT", EDGE_CERT_KEY,
     ACME_DIRECTORY_KEY, DNS_WORKERS_KEY}
)
JOURNAL_MAX_AGE_KEY = "VALIS_JOURNAL_MAX_AGE"
"""Seconds each zone's change journal keeps a change, so IXFR reaches back that far
(default 604800, a week); a secondary further behind gets the whole zone."""
JOURNAL_MAX_RECORDS_KEY = "VALIS_JOURNAL_MAX_RECORDS"
"""Changed records each zone's change journal keeps at most (default 100000)."""
JOURNAL_HOLD_MAX_AGE_KEY = "VALIS_JOURNAL_HOLD_MAX_AGE"
"""Seconds a change is kept past ``VALIS_JOURNAL_MAX_AGE`` while a listed secondary still
needs it for an IXFR (default 2419200, four weeks); beyond it that secondary gets the
whole zone."""
JOURNAL_KEYS: frozenset[str] = frozenset(
    {JOURNAL_MAX_AGE_KEY, JOURNAL_MAX_RECORDS_KEY, JOURNAL_HOLD_MAX_AGE_KEY}
)
TRANSFER_SIGNATURES_KEY = "VALIS_TRANSFER_SIGNATURES"
"""Signatures the signed transfers of NSEC3 zones keep across zones (default 2000000,
about 500 MiB); past it the zone transferred longest ago loses its store
(``valis_core.dns.dnssec.signature_cache``). Applied at the next start."""
RRL_RATE_KEY = "VALIS_RRL_RATE"
"""UDP responses a second per source prefix and response class; present and not 0, it
turns response rate limiting on (``valis_core.dns.serve.rrl``); absent or 0 it is off (0, as
in NSD and Knot, so a reload can turn it off without removing the fact)."""
RRL_SLIP_KEY = "VALIS_RRL_SLIP"
"""Every Nth limited response goes out as a truncated reply (0: none, 1: all; 2)."""
RRL_IPV4_PREFIX_KEY = "VALIS_RRL_IPV4_PREFIX"
RRL_IPV6_PREFIX_KEY = "VALIS_RRL_IPV6_PREFIX"
RRL_TABLE_SIZE_KEY = "VALIS_RRL_TABLE_SIZE"
RRL_EXEMPT_KEY = "VALIS_RRL_EXEMPT"
"""Source prefixes never limited: IPv4 and IPv6 addresses or CIDR prefixes joined by
commas (Knot's ``whitelist``), e.g. the node's monitoring and its secondaries."""
RRL_RANGES: Mapping[str, tuple[int, int]] = {
    RRL_RATE_KEY: (0, 1_000_000),
    RRL_SLIP_KEY: (0, 100),
    RRL_IPV4_PREFIX_KEY: (8, 32),
    RRL_IPV6_PREFIX_KEY: (16, 128),
    RRL_TABLE_SIZE_KEY: (1024, 4_194_304),
}
"""The rate-limit facts and the whole numbers each may be (its bounds included)."""
RRL_KEYS: frozenset[str] = frozenset(RRL_RANGES) | {RRL_EXEMPT_KEY}
"""Every rate-limit fact: what a reload applies to the UDP loop at once."""
KNOWN_KEYS: frozenset[str] = (
    REQUIRED_KEYS | OPTIONAL_KEYS | JOURNAL_KEYS | RRL_KEYS | {TRANSFER_SIGNATURES_KEY}
)

DEVELOPMENT_LISTENER_KEY = "VALIS_REPL_PORT"
LOG_LEVELS: frozenset[str] = frozenset({"debug", "info", "warning", "error", "critical"})
LOG_FORMATS: frozenset[str] = frozenset({"text", "json"})
SITE_FACTS_MODE = 0o640

HEADER = "# valis site facts: the node's first-boot seed. Rendered; do not edit by hand."

_ESCAPED = frozenset('\\"$`')
_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE_VALUE_RE = re.compile(r"[^\s'\"\\]+")
_LINE_BREAK_RE = re.compile(r"[\r\n]")


class SiteFactsError(ValisError):
    """Site facts that cannot be rendered, parsed or written as given."""


class IncompleteSiteFacts(SiteFactsError):
    """A site-facts set missing required keys; names every one of them."""

    def __init__(self, missing: frozenset[str]) -> None:
        self.missing = missing
        names = ", ".join(sorted(missing))
        super().__init__(
            f"site facts: refusing a partial set; missing {names} "
            "(supply every required key; nothing was written)"
        )


def check_site_facts(facts: Mapping[str, str]) -> None:
    """Raise a ``SiteFactsError`` unless ``facts`` is a complete, renderable set."""
    if DEVELOPMENT_LISTENER_KEY in facts:
        raise SiteFactsError(
            f"site facts: {DEVELOPMENT_LISTENER_KEY} is the development listener and is "
            "never provisioned; remove it (set it by hand on a development host only)"
        )
    unknown = sorted(key for key in facts if key not in KNOWN_KEYS)
    if unknown:
        raise SiteFactsError(
            f"site facts: unknown key(s) {', '.join(unknown)}; the known keys are "
            f"{', '.join(sorted(KNOWN_KEYS))}"
        )
    missing = REQUIRED_KEYS - facts.keys()
    if missing:
        raise IncompleteSiteFacts(frozenset(missing))
    for key in sorted(facts):
        _check_value(key, facts[key])
    tuning = sorted(key for key in facts if key in RRL_KEYS and key != RRL_RATE_KEY)
    if tuning and RRL_RATE_KEY not in facts:
        raise SiteFactsError(
            f"site facts: {', '.join(tuning)} tune response rate limiting, which is off "
            f"without {RRL_RATE_KEY}; set {RRL_RATE_KEY} too, or remove them"
        )


def render_site_facts(facts: Mapping[str, str], header: str = HEADER) -> str:
    """Render a complete set of site facts as a systemd environment file under the
    comment ``header`` (the seed's, or the configuration store's)."""
    check_site_facts(facts)
    lines = [header]
    lines.extend(f"{key}={_quote(facts[key])}" for key in sorted(facts))
    return "\n".join(lines) + "\n"


def parse_site_facts(text: str) -> dict[str, str]:
    """Read an environment file back into facts; the inverse of ``render_site_facts``.

    Besides the rendered form it reads what an operator may write by hand and systemd
    reads identically: blank lines, ``#``/``;`` comment lines, single-quoted values and
    bare values without blanks, quotes or backslashes.
    """
    facts: dict[str, str] = {}
    for number, raw in enumerate(_LINE_BREAK_RE.split(text), start=1):
        line = raw.strip(" \t")
        if line[:1] in ("#", ";") and line.endswith("\\"):
            # Older systemd continues such a comment onto the next line; newer does not.
            raise SiteFactsError(f"site facts line {number}: a comment ends in a backslash")
        if not line or line[0] in "#;":
            continue
        key, sep, rest = line.partition("=")
        key = key.rstrip(" \t")
        if not sep or not _KEY_RE.fullmatch(key):
            raise SiteFactsError(f"site facts line {number}: expected KEY=value, got {raw!r}")
        if key in facts:
            raise SiteFactsError(f"site facts line {number}: {key} is given twice")
        facts[key] = _unquote(rest.strip(" \t"), key, number)
    check_site_facts(facts)
    return facts


def transfer_signatures(facts: Mapping[str, str]) -> int:
    """The bound ``VALIS_TRANSFER_SIGNATURES`` sets (checked when the facts were read),
    or the default."""
    from valis_core.dns.dnssec.signature_cache import TRANSFER_SIGNATURES

    value = facts.get(TRANSFER_SIGNATURES_KEY)
    return TRANSFER_SIGNATURES if value is None else int(value)


def served_zones(facts: Mapping[str, str]) -> tuple[str, ...]:
    """The zone names of ``VALIS_SERVED_ZONES``, in the order given (``(EVERY_ZONE,)``
    for every zone: ``serves_every_zone``)."""
    return tuple(facts["VALIS_SERVED_ZONES"].split(","))


def serves_every_zone(zones: Sequence[str]) -> bool:
    """Whether served ``zones`` (as ``served_zones`` gives them) mean every zone of
    operator state; ``*`` among names is refused, since it would say two things."""
    if EVERY_ZONE not in zones:
        return False
    if len(zones) > 1:
        raise SiteFactsError(
            f"site facts: VALIS_SERVED_ZONES is {EVERY_ZONE!r} alone (every zone of "
            f"operator state) or zone names, not both: {','.join(zones)!r}"
        )
    return True


def _check_value(key: str, value: str) -> None:
    if not isinstance(value, str):
        raise SiteFactsError(f"site facts: {key} must be a string, got {type(value).__name__}")
    if value == "":
        raise SiteFactsError(f"site facts: {key} is empty; give it a value or leave it out")
    if "\n" in value or "\r" in value:
        raise SiteFactsError(f"site facts: {key} holds a line break; a value is one line")
    if "\0" in value:
        raise SiteFactsError(f"site facts: {key} holds a NUL byte; remove it")
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise SiteFactsError(f"site facts: {key} holds control character {bad!r}; remove it")
    if (key in JOURNAL_KEYS or key == TRANSFER_SIGNATURES_KEY) and not (
        value.isascii() and value.isdigit() and 0 < int(value) < 2**31
    ):
        raise SiteFactsError(
            f"site facts: {key} {value!r} is not a whole number from 1 to 2147483647"
        )
    if key in RRL_RANGES:
        check_rrl_number(key, value)
    if key == DNS_WORKERS_KEY:
        dns_workers(value, 1)
    if key == RRL_EXEMPT_KEY:
        rrl_exempt_networks(value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SiteFactsError(f"site facts: {key} is not valid UTF-8 text") from exc
    if key == "VALIS_SERVED_ZONES":
        for zone in value.split(","):
            if zone == "" or any(c.isspace() for c in zone):
                raise SiteFactsError(
                    f"site facts: VALIS_SERVED_ZONES must be zone names joined by commas "
                    f"with no blanks or empty entries (or {EVERY_ZONE} alone: every zone "
                    f"of operator state), got {value!r}"
                )
        serves_every_zone(value.split(","))
    if key == ACME_DIRECTORY_KEY:
        url = urlsplit(value)
        if url.scheme != "https" or not url.hostname:
            raise SiteFactsError(
                f"site facts: {ACME_DIRECTORY_KEY} {value!r} is not an https URL naming a "
                "host (the ACME CA's directory, e.g. https://acme.example/directory)"
            )
    if key == "VALIS_LOG_LEVEL" and value.lower() not in LOG_LEVELS:
        raise SiteFactsError(
            f"site facts: VALIS_LOG_LEVEL {value!r} is not one of "
            f"{', '.join(sorted(LOG_LEVELS))}"
        )
    if key == "VALIS_LOG_FORMAT" and value not in LOG_FORMATS:
        raise SiteFactsError(
            f"site facts: VALIS_LOG_FORMAT {value!r} is not one of "
            f"{', '.join(sorted(LOG_FORMATS))}"
        )
    if key == EDGE_CERT_KEY and value not in EDGE_CERT_MODES:
        raise SiteFactsError(
            f"site facts: {EDGE_CERT_KEY} {value!r} is not one of "
            f"{', '.join(sorted(EDGE_CERT_MODES))}"
        )


def dns_workers(value: str | None, cpus: int, given_as: str = DNS_WORKERS_KEY) -> int:
    """The DNS workers ``value`` (``VALIS_DNS_WORKERS``, or a command's flag named
    ``given_as``) asks for: a whole number 1..``MAX_DNS_WORKERS``; absent, ``cpus`` (the
    CPUs the unit may use, at most ``MAX_DNS_WORKERS``)."""
    if value is None:
        return max(1, min(cpus, MAX_DNS_WORKERS))
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_DNS_WORKERS):
        raise SiteFactsError(
            f"{'site facts: ' if given_as == DNS_WORKERS_KEY else ''}{given_as} {value!r} "
            f"is not a whole number from 1 to {MAX_DNS_WORKERS} (the UDP sockets, one per "
            "worker, DNS is answered on; leave it out for one per CPU the unit may use)"
        )
    return int(value)


def check_rrl_number(key: str, value: str, given_as: str = "") -> int:
    """The whole number ``value`` of the rate-limit fact ``key``, within its range; a
    refusal names it ``given_as`` (a command's flag, say) or else as a site fact."""
    low, high = RRL_RANGES[key]
    if not (value.isascii() and value.isdigit() and low <= int(value) <= high):
        raise SiteFactsError(
            f"{given_as or 'site facts: ' + key} {value!r} is not a whole number from {low} "
            f"to {high}"
        )
    return int(value)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def rrl_exempt_networks(value: str, given_as: str = "") -> tuple[Network, ...]:
    """The prefixes ``VALIS_RRL_EXEMPT`` lists, in order; the first entry that is not an
    address or a prefix (or has bits set past its length) is refused by name, and the
    list by ``given_as`` (a command's flag, say) or else as the site fact."""
    networks = []
    for entry in value.split(","):
        text = entry.strip()
        try:
            networks.append(ipaddress.ip_network(text, strict=True))
        except ValueError as exc:
            hint = ""
            try:
                loose = ipaddress.ip_network(text, strict=False)
                hint = f"; bits are set past the prefix length, did you mean {loose}?"
            except ValueError:
                hint = (
                    f" ({' '.join(str(exc).split())}); give IPv4 or IPv6 addresses or CIDR "
                    "prefixes joined by commas, e.g. 192.0.2.0/24,2001:db8::/32"
                )
            raise SiteFactsError(
                f"{given_as or 'site facts: ' + RRL_EXEMPT_KEY} entry {text!r} is not an "
                f"address or prefix{hint}"
            ) from None
    return tuple(networks)


def rrl_settings(facts: Mapping[str, str]) -> RrlSettings | None:
    """The rate-limit settings the site facts ask for, as the engine takes them
    (``valis_core.dns.serve.rrl``); ``None`` (off) without a rate or with rate 0. The
    values were validated with the site facts (``check_site_facts``)."""
    from valis_core.dns.serve.rrl import (
        DEFAULT_IPV4_PREFIX,
        DEFAULT_IPV6_PREFIX,
        DEFAULT_SLIP,
        DEFAULT_TABLE_SIZE,
        RrlSettings,
    )

    rate = int(facts.get(RRL_RATE_KEY, "0"))
    if rate == 0:
        return None
    exempt = facts.get(RRL_EXEMPT_KEY)
    return RrlSettings(
        rate=rate,
        slip=int(facts.get(RRL_SLIP_KEY, DEFAULT_SLIP)),
        ipv4_prefix=int(facts.get(RRL_IPV4_PREFIX_KEY, DEFAULT_IPV4_PREFIX)),
        ipv6_prefix=int(facts.get(RRL_IPV6_PREFIX_KEY, DEFAULT_IPV6_PREFIX)),
        table_size=int(facts.get(RRL_TABLE_SIZE_KEY, DEFAULT_TABLE_SIZE)),
        exempt=rrl_exempt_networks(exempt) if exempt is not None else (),
    )


def _quote(value: str) -> str:
    return '"' + "".join("\\" + c if c in _ESCAPED else c for c in value) + '"'


def _unquote(text: str, key: str, number: int) -> str:
    if text[:1] == '"':
        return _unquote_double(text, key, number)
    if text[:1] == "'":
        end = text.find("'", 1)
        if end != len(text) - 1:
            raise SiteFactsError(
                f"site facts line {number}: {key} has an unterminated or trailing quote"
            )
        return text[1:end]
    if text == "" or _BARE_VALUE_RE.fullmatch(text):
        return text
    raise SiteFactsError(
        f"site facts line {number}: {key}'s value has blanks, quotes or backslashes; "
        'double-quote it, escaping \\ " $ ` with a backslash'
    )


def _unquote_double(text: str, key: str, number: int) -> str:
    out: list[str] = []
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            if i != len(text) - 1:
                raise SiteFactsError(
                    f"site facts line {number}: {key} has text after its closing quote"
                )
            return "".join(out)
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            # systemd drops the backslash only before these four; elsewhere it stays.
            out.append(nxt if nxt in _ESCAPED else c + nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    raise SiteFactsError(f"site facts line {number}: {key} has an unterminated double quote")

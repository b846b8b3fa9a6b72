"""The serving codec's self-test: can this build actually answer a DNS query?

A binary without the serving stack must fail closed rather than serve degraded, and an
operator must be able to ask a staged binary the same question without starting it
(``valis selftest``, which ``valis assess`` runs). The test imports the serving stack,
indexes a synthetic zone, and answers a synthetic SOA query and a query outside the zone
through the same ``answer`` the serve loops call, checking the wire replies with an
independent parser (dnspython). Any shortfall is ``ServingCodecUnavailable``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.errors import ValisError

if TYPE_CHECKING:
    from valis_core.dns.zone import ZoneIndex

SELFTEST_ZONE = "valis-selftest.invalid."
_ZONE_TEXT = f"""\
$ORIGIN {SELFTEST_ZONE}
$TTL 300
@   IN SOA ns.{SELFTEST_ZONE} hostmaster.{SELFTEST_ZONE} 1 7200 900 1209600 300
@   IN NS  ns.{SELFTEST_ZONE}
ns  IN A   192.0.2.53
"""


class ServingCodecUnavailable(ValisError):
    """The serving stack is missing or answers wrongly: this build must not serve."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"serving codec not available: {cause}; stage the serving-capable binary "
            "(the delivery's build), not a plain core"
        )


def run_selftest() -> str:
    """Answer a synthetic query through the serving stack; a one-line summary on success."""
    try:
        import dns.flags
        import dns.message
        import dns.rcode
        import dns.rdatatype

        import valis_core.dns.serve._tcp_loop as tcp_loop  # noqa: F401 - the serve loops must
        import valis_core.dns.serve._udp_loop as udp_loop  # noqa: F401 - import too
        from valis_core.dns.answer import Transport, answer
        from valis_core.dns.zone import ZoneIndex
    except ImportError as exc:
        raise ServingCodecUnavailable(f"cannot import {exc.name or exc}") from exc

    try:
        index = ZoneIndex.from_zone_text(_ZONE_TEXT, SELFTEST_ZONE)
    except ValisError as exc:
        raise ServingCodecUnavailable(f"cannot index the synthetic zone ({exc})") from exc

    def ask(name: str) -> dns.message.Message:
        query = dns.message.make_query(name, dns.rdatatype.SOA, use_edns=0)
        wire = answer(index, query.to_wire(), transport=Transport.UDP)
        if wire is None:
            raise ServingCodecUnavailable(f"no reply to an SOA query for {name}")
        try:
            reply = dns.message.from_wire(wire)
        except Exception as exc:
            raise ServingCodecUnavailable(f"a reply that does not parse ({exc})") from exc
        if reply.id != query.id:
            raise ServingCodecUnavailable("a reply with another query's id")
        return reply

    apex = ask(SELFTEST_ZONE)
    soa = [rrset for rrset in apex.answer if rrset.rdtype == dns.rdatatype.SOA]
    if apex.rcode() != dns.rcode.NOERROR or not apex.flags & dns.flags.AA or len(soa) != 1:
        raise ServingCodecUnavailable(
            f"the synthetic apex SOA was answered {dns.rcode.to_text(apex.rcode())} "
            f"(aa={bool(apex.flags & dns.flags.AA)}, {len(soa)} SOA RRset(s))"
        )
    outside = ask("example.")
    if outside.rcode() != dns.rcode.REFUSED or outside.flags & dns.flags.AA:
        raise ServingCodecUnavailable(
            f"a name outside every zone was answered {dns.rcode.to_text(outside.rcode())}, "
            "not REFUSED"
        )
    path = _fast_path(index, dns.message.make_query(SELFTEST_ZONE, "SOA", use_edns=0).to_wire())
    return (
        f"serving codec answered: {SELFTEST_ZONE} SOA authoritative, outside REFUSED; "
        f"UDP fast path: {path}"
    )


def _fast_path(index: ZoneIndex, query: bytes) -> str:
    """Which path serves UDP; when it is the compiled one, it must give the bytes the
    Python path gives for a cached question, or this build must not serve."""
    from valis_core.dns.answer import Transport, answer, fastpath
    from valis_core.dns.answer.snapshot import Snapshot

    if not fastpath.COMPILED:
        return fastpath.path_name()
    snapshot = Snapshot(index)
    table = fastpath.table_for(snapshot)
    if table is None:
        raise ServingCodecUnavailable("the compiled UDP fast path could not make its table")
    reference = answer(snapshot, query, transport=Transport.UDP)
    _, key, wanted = table.ask(query)
    fastpath.learn(table, snapshot, key, wanted)
    if table.ask(query)[0] != reference:
        raise ServingCodecUnavailable("the compiled UDP fast path answers unlike the Python path")
    return fastpath.path_name()

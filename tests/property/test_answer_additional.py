"""The additional section, referrals that cannot carry their glue, and negative answers
made once per zone: one example per behaviour, asserting the exact sections."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode

from tests.dns_ask import answered, question
from tests.property.expected_answer import expect, lines, norm
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.zone import ZoneIndex

MANY_NS = "\n".join(f"crowd NS ns{i}.crowd" for i in range(12))
MANY_GLUE = "\n".join(f"ns{i}.crowd AAAA 2001:db8::{i:x}" for i in range(12))
SIBLINGS = "\n".join(f"crowd2 NS ns{i}.crowd" for i in range(12))

EXAMPLE_COM = f"""\
$ORIGIN example.com.
$TTL 3600
@        SOA   ns1 hostmaster 1 7200 3600 1209600 300
@        NS    ns1
@        NS    ns.sub
@        NS    ns.example.org.
@        MX    10 mail.example.org.
@        MX    20 mail.sub
@        MX    30 mx
@        A     192.0.2.10
@        HTTPS 1 . alpn=h2
ns1      A     192.0.2.1
mx       A     192.0.2.2
mx       AAAA  2001:db8::2
sub      NS    ns.sub
ns.sub   A     192.0.2.4
mail.sub A     192.0.2.44
_sip._udp SRV  0 5 5060 sip
sip      A     192.0.2.5
sip      AAAA  2001:db8::5
svc      A     192.0.2.6
enum     NAPTR 10 10 "S" "SIP+D2U" "" _sip._udp.example.com.
enum     NAPTR 20 10 "A" "SIP+D2T" "" svc.example.com.
enum     NAPTR 30 10 "U" "E2U+sip" "!^.*$!sip:info@example.com!" .
enum     NAPTR 40 10 "A" "SIP+D2T" "" www.example.org.
web      SVCB  1 svc alpn=h2
web      SVCB  2 web-other.example.org.
alias    HTTPS 0 web2
web2     HTTPS 1 . alpn=h3
web2     AAAA  2001:db8::7
gone     HTTPS 0 .
{MANY_NS}
{MANY_GLUE}
{SIBLINGS}
"""

EXAMPLE_ORG = """\
$ORIGIN example.org.
$TTL 1800
@        SOA   ns hostmaster 7 7200 3600 1209600 900
@        NS    ns1.example.com.
@        MX    10 mx.example.com.
ns       A     192.0.2.20
mail     A     192.0.2.21
www      A     192.0.2.22
web-other A    192.0.2.23
"""

INDEX = ZoneIndex.from_zone_texts([(EXAMPLE_COM, "example.com."), (EXAMPLE_ORG, "example.org.")])


def ask(name: str, rtype: str, *, edns: bool = True,
        transport: Transport = Transport.UDP) -> dns.message.Message:
    return answered(INDEX, question(name, rtype, edns=edns), transport=transport,
                    general_too=True)


def test_additional_data_never_comes_from_another_served_zone() -> None:
    expect(
        ask("example.org.", "NS"),
        answer=("example.org. 1800 IN NS ns1.example.com.",),
    )
    expect(
        ask("example.org.", "MX"),
        answer=("example.org. 1800 IN MX 10 mx.example.com.",),
    )
    response = ask("example.com.", "MX")
    assert lines(response.additional) == [norm("mx.example.com. 3600 IN A 192.0.2.2"),
                                          norm("mx.example.com. 3600 IN AAAA 2001:db8::2")]


def test_ns_targets_bring_glue_and_other_targets_only_authoritative_addresses() -> None:
    expect(
        ask("example.com.", "NS"),
        answer=(
            "example.com. 3600 IN NS ns1.example.com.",
            "example.com. 3600 IN NS ns.sub.example.com.",
            "example.com. 3600 IN NS ns.example.org.",
        ),
        additional=(
            "ns1.example.com. 3600 IN A 192.0.2.1",
            "ns.sub.example.com. 3600 IN A 192.0.2.4",
        ),
    )
    # mail.sub lies beneath the delegation of sub: glue, never an MX target's address.
    assert "mail.sub" not in " ".join(lines(ask("example.com.", "MX").additional))


def test_naptr_brings_the_srv_or_the_addresses_its_flag_names() -> None:
    response = ask("enum.example.com.", "NAPTR")
    assert len(response.answer[0]) == 4
    assert lines(response.additional) == sorted(map(norm, (
        "_sip._udp.example.com. 3600 IN SRV 0 5 5060 sip.example.com.",
        "sip.example.com. 3600 IN A 192.0.2.5",
        "sip.example.com. 3600 IN AAAA 2001:db8::5",
        "svc.example.com. 3600 IN A 192.0.2.6",
    )))


def test_svcb_brings_its_targets_addresses_in_the_zone() -> None:
    expect(
        ask("web.example.com.", "SVCB"),
        answer=(
            "web.example.com. 3600 IN SVCB 1 svc.example.com. alpn=\"h2\"",
            "web.example.com. 3600 IN SVCB 2 web-other.example.org.",
        ),
        additional=("svc.example.com. 3600 IN A 192.0.2.6",),
    )


def test_https_target_dot_is_the_owner_in_service_mode() -> None:
    response = ask("example.com.", "HTTPS")
    assert lines(response.additional) == [norm("example.com. 3600 IN A 192.0.2.10")]


def test_https_alias_mode_brings_the_target_records_and_their_addresses() -> None:
    expect(
        ask("alias.example.com.", "HTTPS"),
        answer=("alias.example.com. 3600 IN HTTPS 0 web2.example.com.",),
        additional=(
            "web2.example.com. 3600 IN HTTPS 1 . alpn=\"h3\"",
            "web2.example.com. 3600 IN AAAA 2001:db8::7",
        ),
    )
    expect(ask("gone.example.com.", "HTTPS"), answer=("gone.example.com. 3600 IN HTTPS 0 .",))


def test_a_referral_whose_glue_does_not_fit_is_truncated() -> None:
    response = ask("x.crowd.example.com.", "A", edns=False)
    assert response.flags & dns.flags.TC
    assert not response.authority
    whole = ask("x.crowd.example.com.", "A", transport=Transport.TCP)
    assert not whole.flags & dns.flags.AA
    assert len(whole.authority[0]) == 12
    assert sum(len(rrset) for rrset in whole.additional) == 12


def test_sibling_glue_is_dropped_before_truncating() -> None:
    response = ask("x.crowd2.example.com.", "A", edns=False)
    assert not response.flags & dns.flags.TC
    assert len(response.authority[0]) == 12
    assert not response.additional
    whole = ask("x.crowd2.example.com.", "A", transport=Transport.TCP)
    assert sum(len(rrset) for rrset in whole.additional) == 12


def test_negative_answers_are_made_once_per_zone_and_never_fill_the_cache() -> None:
    snapshot = Snapshot(INDEX)
    soa = ("example.com. 300 IN SOA ns1.example.com. hostmaster.example.com. "
           "1 7200 3600 1209600 300")
    for i in range(40):
        for name, rtype, rcode in (
            (f"{'n' * (i % 20 + 1)}{i}.example.com.", "A", dns.rcode.NXDOMAIN),
            (f"Q{i}.sub2.EXAMPLE.com.", "AAAA", dns.rcode.NXDOMAIN),
            ("mx.example.com.", f"TYPE{1000 + i}", dns.rcode.NOERROR),
            ("sip.example.com.", "MX", dns.rcode.NOERROR),
        ):
            wire = dns.message.make_query(name, rtype).to_wire()
            raw = answer(snapshot, wire, transport=Transport.UDP)
            assert raw is not None
            assert raw[12 : len(wire)] == wire[12:]
            expect(dns.message.from_wire(raw), rcode=rcode, authority=(soa,))
    assert len(snapshot.cache) == 0
    assert len(snapshot.cache.kept.answers) == 0  # nor what later versions may take
    # One per RCODE and offset of the apex in the question, whatever the names.
    assert len(snapshot.cache.kept.negatives) <= 2 + 20 + 2


def test_a_negative_answer_after_a_cname_keeps_the_chain() -> None:
    snapshot = Snapshot(ZoneIndex.from_zone_text(
        "$ORIGIN example.net.\n$TTL 60\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n"
        "a CNAME b\n",
        "example.net.",
    ))
    for _ in range(2):
        raw = answer(snapshot, dns.message.make_query("a.example.net.", "A").to_wire(),
                     transport=Transport.UDP)
        assert raw is not None
        expect(
            dns.message.from_wire(raw),
            rcode=dns.rcode.NXDOMAIN,
            answer=("a.example.net. 60 IN CNAME b.example.net.",),
            authority=("example.net. 5 IN SOA ns.example.net. h.example.net. 1 2 3 4 5",),
        )
    assert len(snapshot.cache) == 1  # an answer with a chain is encoded and kept

"""One example per answering behaviour, asserting the exact sections of the response.

Every plain query is also put through the general (dnspython-parsed) path, which must
give the same bytes as the hand-decoded fast path.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsigkeyring
import dns.update
import pytest

from tests.dns_ask import answered
from tests.property.expected_answer import expect, lines
from valis_core.dns.answer import (
    SERVER_PAYLOAD,
    UPDATE_ELSEWHERE,
    Transport,
    answer,
    answer_general,
)
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.zone import ZoneIndex

# By path: the package's face exports the ``answer`` function under the module's name.
answer_module = importlib.import_module("valis_core.dns.answer._answer")

LONG = ".".join(["l" * 60] * 3) + ".example.org."  # 186 octets in wire form
MANY = "\n".join(f"many AAAA 2001:db8::{i:x}" for i in range(1, 21))  # 560 octets compressed

EXAMPLE_COM = f"""\
$ORIGIN example.com.
$TTL 3600
@        SOA   ns1 hostmaster 2024010101 7200 3600 1209600 300
@        NS    ns1
@        NS    ns2.example.net.
@        MX    10 mail
@        A     192.0.2.10
ns1      A     192.0.2.1
ns1      AAAA  2001:db8::1
mail     A     192.0.2.2
www      CNAME web
web  300 A     192.0.2.3
loop1    CNAME loop2
loop2    CNAME loop1
ext      CNAME www.example.net.
cross    CNAME www.example.org.
dangling CNAME nothing
a.b.c    A     192.0.2.9
*.wild   TXT   "wild"
*.wild   MX    10 mail
here.wild A    192.0.2.11
deep.ent.wild A 192.0.2.12
*.cw     CNAME web
sub      NS    ns.sub
sub      NS    ns.elsewhere.net.
sub      DS    12345 8 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE5C4E6E3F3E7E6C0B2A1D0F3E
ns.sub   A     192.0.2.4
*.sub    A     192.0.2.99
nods     NS    ns1.example.net.
child    NS    ns1.child
ns1.child A    192.0.2.30
child    DS    54321 8 2 AB0D46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE5C4E6E3F3E7E6C0B2A1D0F3E
dn  600  DNAME example.org.
far      DNAME {LONG}
_sip._tcp SRV  0 5 5060 sip
sip      A     192.0.2.5
big      TXT   "{"a" * 200}"
big      TXT   "{"b" * 200}"
big      TXT   "{"c" * 200}"
heavy    MX    10 many
{MANY}
"""

EXAMPLE_ORG = """\
$ORIGIN example.org.
$TTL 1800
@    SOA ns1.example.com. hostmaster.example.com. 7 7200 3600 1209600 900
@    NS  ns1.example.com.
www  A   192.0.2.20
"""

CHILD = """\
$ORIGIN child.example.com.
$TTL 60
@    SOA ns1 hostmaster 1 7200 3600 1209600 60
@    NS  ns1
ns1  A   192.0.2.30
www  A   192.0.2.31
"""

INDEX = ZoneIndex.from_zone_texts(
    [(EXAMPLE_COM, "example.com."), (EXAMPLE_ORG, "example.org."), (CHILD, "child.example.com.")]
)

COM_SOA = (
    "example.com. 300 IN SOA ns1.example.com. hostmaster.example.com. "
    "2024010101 7200 3600 1209600 300"
)


def send(
    wire: bytes, *, transport: Transport = Transport.UDP, plain: bool = True
) -> dns.message.Message:
    return answered(INDEX, wire, transport=transport, general_too=plain)


def query(name: str, rtype: str, *, edns: int | bool = False, **kwargs: Any) -> bytes:
    message = dns.message.make_query(name, rtype, use_edns=edns, **kwargs)
    return message.to_wire()


def ask(
    name: str, rtype: str, *, transport: Transport = Transport.UDP, **kwargs: Any
) -> dns.message.Message:
    return send(query(name, rtype, **kwargs), transport=transport)


# --- authority and negative answers ---------------------------------------------------


def test_an_authoritative_answer_sets_aa() -> None:
    expect(ask("web.example.com.", "A"), answer=("web.example.com. 300 IN A 192.0.2.3",))


def test_a_name_outside_every_served_zone_is_refused_without_aa() -> None:
    expect(ask("www.example.net.", "A"), rcode=dns.rcode.REFUSED, aa=False)
    expect(ask("com.", "SOA"), rcode=dns.rcode.REFUSED, aa=False)


def test_a_missing_name_is_nxdomain_with_the_soa_at_the_negative_ttl() -> None:
    expect(ask("nothing.example.com.", "A"), rcode=dns.rcode.NXDOMAIN, authority=(COM_SOA,))


def test_a_missing_type_is_nodata_with_the_soa() -> None:
    expect(ask("web.example.com.", "AAAA"), authority=(COM_SOA,))


def test_an_empty_non_terminal_is_nodata_not_nxdomain() -> None:
    expect(ask("b.c.example.com.", "A"), authority=(COM_SOA,))
    expect(ask("c.example.com.", "TXT"), authority=(COM_SOA,))


def test_the_apex_answers_its_soa_with_its_own_ttl() -> None:
    expect(ask("example.com.", "SOA"), answer=(COM_SOA.replace(" 300 IN", " 3600 IN"),))


# --- CNAME ----------------------------------------------------------------------------


def test_a_cname_is_followed_to_its_target_data() -> None:
    expect(
        ask("www.example.com.", "A"),
        answer=(
            "www.example.com. 3600 IN CNAME web.example.com.",
            "web.example.com. 300 IN A 192.0.2.3",
        ),
    )


def test_a_cname_question_gets_the_cname_alone() -> None:
    expect(
        ask("www.example.com.", "CNAME"),
        answer=("www.example.com. 3600 IN CNAME web.example.com.",),
    )


def test_a_cname_loop_stops_after_going_round_once() -> None:
    expect(
        ask("loop1.example.com.", "A"),
        answer=(
            "loop1.example.com. 3600 IN CNAME loop2.example.com.",
            "loop2.example.com. 3600 IN CNAME loop1.example.com.",
        ),
    )


def test_a_cname_leaving_the_served_zones_is_not_followed() -> None:
    expect(
        ask("ext.example.com.", "A"),
        answer=("ext.example.com. 3600 IN CNAME www.example.net.",),
    )


def test_a_cname_into_another_served_zone_is_followed() -> None:
    expect(
        ask("cross.example.com.", "A"),
        answer=(
            "cross.example.com. 3600 IN CNAME www.example.org.",
            "www.example.org. 1800 IN A 192.0.2.20",
        ),
    )


def test_a_cname_to_a_missing_name_is_nxdomain_for_the_last_link() -> None:
    expect(
        ask("dangling.example.com.", "A"),
        rcode=dns.rcode.NXDOMAIN,
        answer=("dangling.example.com. 3600 IN CNAME nothing.example.com.",),
        authority=(COM_SOA,),
    )


# --- delegation -----------------------------------------------------------------------

SUB_NS = (
    "sub.example.com. 3600 IN NS ns.sub.example.com.",
    "sub.example.com. 3600 IN NS ns.elsewhere.net.",
)


def test_a_name_beneath_a_delegation_gets_a_referral_with_glue() -> None:
    expect(
        ask("host.sub.example.com.", "A"),
        aa=False,
        authority=SUB_NS,
        additional=("ns.sub.example.com. 3600 IN A 192.0.2.4",),
    )


def test_the_delegation_point_itself_gets_a_referral() -> None:
    for rtype in ("A", "NS", "SOA"):
        expect(
            ask("sub.example.com.", rtype),
            aa=False,
            authority=SUB_NS,
            additional=("ns.sub.example.com. 3600 IN A 192.0.2.4",),
        )


def test_glue_itself_is_answered_by_referral() -> None:
    expect(
        ask("ns.sub.example.com.", "A"),
        aa=False,
        authority=SUB_NS,
        additional=("ns.sub.example.com. 3600 IN A 192.0.2.4",),
    )


def test_ds_at_the_cut_is_answered_by_the_parent() -> None:
    response = ask("sub.example.com.", "DS")
    assert response.flags & dns.flags.AA
    assert [rrset.name.to_text() for rrset in response.answer] == ["sub.example.com."]
    assert response.answer[0].rdtype == dns.rdatatype.DS
    expect(ask("nods.example.com.", "DS"), authority=(COM_SOA,))


def test_ds_beneath_the_cut_gets_the_referral() -> None:
    expect(
        ask("x.sub.example.com.", "DS"),
        aa=False,
        authority=SUB_NS,
        additional=("ns.sub.example.com. 3600 IN A 192.0.2.4",),
    )


def test_a_served_child_zone_answers_for_itself() -> None:
    expect(
        ask("www.child.example.com.", "A"),
        answer=("www.child.example.com. 60 IN A 192.0.2.31",),
    )
    expect(
        ask("child.example.com.", "NS"),
        answer=("child.example.com. 60 IN NS ns1.child.example.com.",),
        additional=("ns1.child.example.com. 60 IN A 192.0.2.30",),
    )
    expect(
        ask("nothing.child.example.com.", "A"),
        rcode=dns.rcode.NXDOMAIN,
        authority=(
            "child.example.com. 60 IN SOA ns1.child.example.com. "
            "hostmaster.child.example.com. 1 7200 3600 1209600 60",
        ),
    )


def test_ds_at_a_served_child_apex_comes_from_the_served_parent() -> None:
    response = ask("child.example.com.", "DS")
    assert response.flags & dns.flags.AA
    assert response.answer[0].rdtype == dns.rdatatype.DS
    assert response.answer[0][0].key_tag == 54321


# --- wildcards ------------------------------------------------------------------------


def test_a_wildcard_synthesizes_records_owned_by_the_query_name() -> None:
    expect(
        ask("anything.wild.example.com.", "TXT"),
        answer=('anything.wild.example.com. 3600 IN TXT "wild"',),
    )
    expect(
        ask("x.y.wild.example.com.", "MX"),
        answer=("x.y.wild.example.com. 3600 IN MX 10 mail.example.com.",),
        additional=("mail.example.com. 3600 IN A 192.0.2.2",),
    )


def test_a_wildcard_match_without_the_type_is_nodata() -> None:
    expect(ask("anything.wild.example.com.", "AAAA"), authority=(COM_SOA,))


def test_a_wildcard_never_covers_a_name_that_exists() -> None:
    expect(ask("here.wild.example.com.", "TXT"), authority=(COM_SOA,))
    expect(ask("ent.wild.example.com.", "TXT"), authority=(COM_SOA,))


def test_a_wildcard_only_covers_names_whose_closest_encloser_is_its_parent() -> None:
    expect(
        ask("x.here.wild.example.com.", "TXT"), rcode=dns.rcode.NXDOMAIN, authority=(COM_SOA,)
    )


def test_a_wildcard_beneath_a_delegation_is_never_used() -> None:
    expect(
        ask("x.sub.example.com.", "A"),
        aa=False,
        authority=SUB_NS,
        additional=("ns.sub.example.com. 3600 IN A 192.0.2.4",),
    )


def test_a_wildcard_cname_is_synthesized_and_followed() -> None:
    expect(
        ask("foo.cw.example.com.", "A"),
        answer=(
            "foo.cw.example.com. 3600 IN CNAME web.example.com.",
            "web.example.com. 300 IN A 192.0.2.3",
        ),
    )


def test_the_wildcard_name_itself_is_answered_literally() -> None:
    expect(ask("*.wild.example.com.", "TXT"), answer=('*.wild.example.com. 3600 IN TXT "wild"',))


# --- DNAME ----------------------------------------------------------------------------


def test_a_dname_gives_itself_and_a_synthesized_cname_with_its_ttl() -> None:
    expect(
        ask("www.dn.example.com.", "A"),
        answer=(
            "dn.example.com. 600 IN DNAME example.org.",
            "www.dn.example.com. 600 IN CNAME www.example.org.",
            "www.example.org. 1800 IN A 192.0.2.20",
        ),
    )


def test_a_dname_owner_itself_is_answered_normally() -> None:
    expect(ask("dn.example.com.", "DNAME"), answer=("dn.example.com. 600 IN DNAME example.org.",))
    expect(ask("dn.example.com.", "A"), authority=(COM_SOA,))


def test_a_dname_substitution_too_long_is_yxdomain() -> None:
    prefix = ".".join(["p" * 30] * 2)  # 62 octets: 186 + 62 + ... exceeds 255
    name = f"{prefix}.far.example.com."
    response = ask(name, "A")
    assert response.rcode() == dns.rcode.YXDOMAIN
    assert response.flags & dns.flags.AA
    assert lines(response.answer) == [f"far.example.com. 3600 IN DNAME {LONG}"]


def test_a_dname_into_its_own_subtree_ends_the_chain_at_its_first_synthesis() -> None:
    # A DNAME whose target lies beneath itself applies again to every name it makes: the
    # chain could only grow (a longer name each link) until the link limit, never
    # reaching data, and over UDP it overflowed 512 octets into an empty TC answer. It
    # ends at the first synthesized CNAME, the DNAME listed once, as NSD answers.
    index = ZoneIndex.from_zone_texts([(
        "$ORIGIN self.test.\n$TTL 300\n@ SOA ns1 hostmaster 1 7200 3600 1209600 60\n"
        "@ NS ns1\nns1 A 192.0.2.1\ndn DNAME sub.dn\n", "self.test.")])
    for name in ("x.dn.self.test.", "y5aeuxw.d1kxm-vack-long-label.dn.self.test."):
        wire = query(name, "A")
        response = answer(index, wire, transport=Transport.UDP)
        assert response is not None
        message = dns.message.from_wire(response)
        assert message.rcode() == dns.rcode.NOERROR
        assert not message.flags & dns.flags.TC
        records = [line for rrset in message.answer for line in rrset.to_text().splitlines()]
        prefix = name.removesuffix("dn.self.test.")
        assert sorted(records) == [
            "dn.self.test. 300 IN DNAME sub.dn.self.test.",
            f"{name} 300 IN CNAME {prefix}sub.dn.self.test.",
        ]
        assert answer_general(index, wire, transport=Transport.UDP) == response


# --- additional section ---------------------------------------------------------------


def test_ns_mx_and_srv_targets_bring_their_addresses() -> None:
    expect(
        ask("example.com.", "NS"),
        answer=(
            "example.com. 3600 IN NS ns1.example.com.",
            "example.com. 3600 IN NS ns2.example.net.",
        ),
        additional=(
            "ns1.example.com. 3600 IN A 192.0.2.1",
            "ns1.example.com. 3600 IN AAAA 2001:db8::1",
        ),
    )
    expect(
        ask("example.com.", "MX"),
        answer=("example.com. 3600 IN MX 10 mail.example.com.",),
        additional=("mail.example.com. 3600 IN A 192.0.2.2",),
    )
    expect(
        ask("_sip._tcp.example.com.", "SRV"),
        answer=("_sip._tcp.example.com. 3600 IN SRV 0 5 5060 sip.example.com.",),
        additional=("sip.example.com. 3600 IN A 192.0.2.5",),
    )


def test_any_is_answered_with_one_rrset() -> None:
    expect(ask("example.com.", "ANY"), answer=("example.com. 3600 IN A 192.0.2.10",))
    expect(
        ask("www.example.com.", "ANY"),
        answer=("www.example.com. 3600 IN CNAME web.example.com.",),
    )


# --- EDNS and sizes -------------------------------------------------------------------


def test_edns_is_echoed_with_the_server_payload_and_the_do_bit() -> None:
    response = ask("web.example.com.", "A", edns=0, payload=4096)
    assert response.edns == 0
    assert response.payload == SERVER_PAYLOAD
    assert not response.ednsflags & dns.flags.DO
    response = ask("web.example.com.", "A", edns=0, want_dnssec=True)
    assert response.ednsflags & dns.flags.DO
    assert response.answer


def test_an_unknown_edns_version_gets_badvers() -> None:
    response = send(query("web.example.com.", "A", edns=1))
    assert response.rcode() == dns.rcode.BADVERS
    assert response.edns == 0
    assert not response.answer
    assert not response.flags & dns.flags.AA


def with_additional(wire: bytes, count: int, records: bytes) -> bytes:
    return wire[:10] + struct.pack("!H", count) + wire[12:] + records


OPT_RR = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)


def test_a_malformed_opt_is_formerr() -> None:
    plain = query("web.example.com.", "A")
    cases = {
        "two OPT records": with_additional(plain, 2, OPT_RR + OPT_RR),
        "OPT with a non-root owner": with_additional(
            plain, 1, b"\x01x\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
        ),
        "option overrunning the rdata": with_additional(
            plain, 1, b"\x00" + struct.pack("!HHIHHH", 41, 1232, 0, 4, 10, 8)
        ),
        "rdata length past the end": with_additional(
            plain, 1, b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 9)
        ),
        "OPT in the answer section": plain[:6] + b"\x00\x01" + plain[8:] + OPT_RR,
    }
    for label, wire in cases.items():
        response = send(wire, plain=False)
        assert response.rcode() == dns.rcode.FORMERR, label
        assert response.id == dns.message.from_wire(plain).id


def test_without_edns_a_large_udp_answer_is_truncated_to_the_question() -> None:
    wire = query("big.example.com.", "TXT")
    response = send(wire)
    assert response.flags & dns.flags.TC
    assert response.flags & dns.flags.AA
    assert not response.answer
    assert not response.authority
    assert not response.additional
    assert len(answer(INDEX, wire, transport=Transport.UDP) or b"") <= 512


def test_with_edns_or_over_tcp_the_large_answer_is_whole() -> None:
    for response in (
        ask("big.example.com.", "TXT", edns=0, payload=1232),
        ask("big.example.com.", "TXT", transport=Transport.TCP),
    ):
        assert not response.flags & dns.flags.TC
        assert len(response.answer[0]) == 3


def test_a_truncated_edns_response_keeps_its_opt() -> None:
    response = ask("big.example.com.", "TXT", edns=0, payload=512)
    assert response.flags & dns.flags.TC
    assert response.edns == 0
    assert not response.answer


def test_optional_additional_records_are_dropped_before_truncating() -> None:
    response = ask("heavy.example.com.", "MX")
    assert not response.flags & dns.flags.TC
    assert lines(response.answer) == ["heavy.example.com. 3600 IN MX 10 many.example.com."]
    assert not response.additional
    whole = ask("heavy.example.com.", "MX", transport=Transport.TCP)
    assert len(whole.additional[0]) == 20


# --- malformed and unusual queries ----------------------------------------------------


def test_short_packets_and_responses_are_dropped() -> None:
    wire = query("web.example.com.", "A")
    assert answer(INDEX, wire[:11], transport=Transport.UDP) is None
    as_response = wire[:2] + bytes([wire[2] | 0x80]) + wire[3:]
    assert answer(INDEX, as_response, transport=Transport.UDP) is None


def test_a_question_count_other_than_one_is_formerr() -> None:
    wire = query("web.example.com.", "A")
    for count in (0, 2):
        response = send(wire[:4] + struct.pack("!H", count) + wire[6:], plain=False)
        assert response.rcode() == dns.rcode.FORMERR
        assert not response.question


def test_an_opcode_other_than_query_is_notimp() -> None:
    for opcode in (dns.opcode.NOTIFY, dns.opcode.UPDATE, dns.opcode.STATUS):
        message = dns.message.make_query("example.com.", "SOA")
        message.set_opcode(opcode)
        response = send(message.to_wire(), plain=False)
        assert response.rcode() == dns.rcode.NOTIMP
        assert response.opcode() == opcode


def test_an_opcode_other_than_query_carrying_an_opt_is_answered_with_one() -> None:
    # RFC 6891 section 7: a responder answers an OPT with an OPT, NOTIMP included (as
    # Knot does); the DO bit is echoed. A NOTIFY's SOA in the answer section is skipped
    # to find it, and so is an UPDATE's zone section of a type dnspython cannot read. An
    # EDNS version above 0 is BADVERS whatever the opcode (section 6.1.3; as Knot).
    notify = dns.message.make_query("example.com.", "SOA", use_edns=0, want_dnssec=True)
    notify.set_opcode(dns.opcode.NOTIFY)
    soa = COM_SOA.split(" SOA ")[1]
    notify.answer.append(dns.rrset.from_text("example.com.", 300, "IN", "SOA", soa))
    response = send(notify.to_wire(), plain=False)
    assert response.rcode() == dns.rcode.NOTIMP
    assert response.edns == 0
    assert response.ednsflags & dns.flags.DO
    update = dns.message.make_query("example.com.", "NS", use_edns=0)
    update.set_opcode(dns.opcode.UPDATE)
    reply = answer(INDEX, update.to_wire(), transport=Transport.UDP)
    assert reply is not None
    assert reply[3] & 0xF == dns.rcode.NOTIMP
    assert reply[10:12] == b"\x00\x01"
    assert reply[-len(UPDATE_ELSEWHERE) - 17:-len(UPDATE_ELSEWHERE) - 14] == b"\x00\x00\x29"
    plain = dns.message.make_query("example.com.", "SOA")
    plain.set_opcode(dns.opcode.STATUS)
    assert send(plain.to_wire(), plain=False).edns < 0
    later = dns.message.make_query("example.com.", "SOA", use_edns=1)
    later.set_opcode(dns.opcode.NOTIFY)
    response = send(later.to_wire(), plain=False)
    assert response.rcode() == dns.rcode.BADVERS
    assert response.opcode() == dns.opcode.NOTIFY
    assert response.edns == 0


def test_an_update_on_the_query_port_is_notimp_even_signed_with_a_right_key() -> None:
    """nsupdate sent to :53 with the owner key heard NOTAUTH(BADKEY), as though the key
    were wrong: the query port takes no updates, so it says NOTIMP (unsigned; its TSIG
    is not judged), and to a client speaking EDNS where updates go (RFC 8914)."""
    keyring = dns.tsigkeyring.from_text({"owner.": "c2VjcmV0c2VjcmV0c2VjcmV0"})
    for edns in (-1, 0):
        update = dns.update.UpdateMessage("example.com.", keyring=keyring,
                                          keyname=dns.name.from_text("owner."))
        update.add("new", 300, "A", "192.0.2.9")
        update.use_edns(edns)
        for transport in Transport:
            raw = answer(INDEX, update.to_wire(), transport=transport)
            assert raw is not None
            reply = dns.message.from_wire(raw)
            assert (reply.opcode(), reply.rcode()) == (dns.opcode.UPDATE, dns.rcode.NOTIMP)
            assert reply.id == update.id
            assert reply.tsig is None
            assert reply.edns == edns
            if edns < 0:
                continue
            (option,) = reply.options
            assert isinstance(option, dns.edns.EDEOption)
            assert option.code == dns.edns.EDECode.NOT_SUPPORTED
            assert option.text == UPDATE_ELSEWHERE
            assert "owner terminus" in option.text
            assert "owner-port" in option.text


def test_a_class_other_than_in_is_refused() -> None:
    for rdclass in ("CH", "HS", "ANY"):
        response = ask("version.bind.", "TXT", rdclass=rdclass)
        assert response.rcode() == dns.rcode.REFUSED
        assert not response.flags & dns.flags.AA
        response = ask("example.com.", "SOA", rdclass=rdclass)
        assert response.rcode() == dns.rcode.REFUSED


def test_zone_transfers_are_not_offered() -> None:
    assert ask("example.com.", "AXFR").rcode() == dns.rcode.NOTIMP
    assert ask("example.com.", "AXFR", transport=Transport.TCP).rcode() == dns.rcode.REFUSED
    for transport in Transport:
        assert ask("example.com.", "IXFR", transport=transport).rcode() == dns.rcode.REFUSED


def test_other_meta_types_are_looked_up_like_data() -> None:
    for rtype in ("MAILB", "TKEY", "TSIG", "OPT"):
        expect(ask("example.com.", rtype), authority=(COM_SOA,))
        expect(ask("nothing.example.com.", rtype), rcode=dns.rcode.NXDOMAIN, authority=(COM_SOA,))


def test_trailing_bytes_are_formerr() -> None:
    response = send(query("web.example.com.", "A") + b"\x00", plain=False)
    assert response.rcode() == dns.rcode.FORMERR


def test_a_signed_query_is_notauth_since_no_key_is_held() -> None:
    message = dns.message.make_query("example.com.", "SOA")
    keyring = dns.tsigkeyring.from_text({"k.": "c2VjcmV0c2VjcmV0c2VjcmV0"})
    message.use_tsig(keyring, keyname="k.")
    raw = answer(INDEX, message.to_wire(), transport=Transport.UDP)
    assert raw is not None
    response = dns.message.from_wire(raw, keyring=lambda _message, _name: False)
    assert response.rcode() == dns.rcode.NOTAUTH
    assert response.tsig is not None
    assert response.tsig_error == dns.rcode.BADKEY
    assert response.tsig[0].mac == b""
    assert response.tsig[0].original_id == message.id


def test_the_question_id_rd_and_cd_are_echoed_exactly() -> None:
    message = dns.message.make_query("WeB.eXaMpLe.CoM.", "A")
    message.id = 0xBEEF
    message.flags = dns.flags.RD | dns.flags.CD
    wire = message.to_wire()
    raw = answer(INDEX, wire, transport=Transport.UDP)
    assert raw is not None
    question = wire[12:]
    assert raw[12 : 12 + len(question)] == question
    response = send(wire)
    assert response.id == 0xBEEF
    assert response.flags & dns.flags.RD
    assert response.flags & dns.flags.CD
    assert not response.flags & dns.flags.RA
    assert response.answer[0].name == dns.name.from_text("web.example.com.")


@pytest.mark.parametrize(
    "name",
    ["web.example.com.", "WWW.EXAMPLE.COM.", "nothing.example.com.", "a.wild.example.com.",
     "x.sub.example.com.", "www.dn.example.com.", "example.org.", "elsewhere.test."],
)
@pytest.mark.parametrize("rtype", ["A", "NS", "MX", "TXT", "ANY", "DS", "SOA", "CNAME"])
@pytest.mark.parametrize("edns", [False, 0])
def test_the_fast_and_general_paths_give_identical_answers(
    name: str, rtype: str, edns: int | bool
) -> None:
    for transport in Transport:
        wire = query(name, rtype, edns=edns)
        assert answer(INDEX, wire, transport=transport) == answer_general(
            INDEX, wire, transport=transport
        )


# --- the response cache ---------------------------------------------------------------


def test_the_response_cache_stays_bounded_and_answers_survive_eviction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answer_module, "CACHE_ENTRIES", 4)
    snapshot = Snapshot(ZoneIndex.from_zone_texts([(EXAMPLE_COM, "example.com.")]))
    names = [f"n{i}.wild.example.com." for i in range(10)] + ["web.example.com."] * 3
    for name in names * 2:
        raw = answer(snapshot, query(name, "TXT"), transport=Transport.UDP)
        assert raw is not None
        assert len(snapshot.cache) <= 4
        response = dns.message.from_wire(raw)
        assert response.rcode() == dns.rcode.NOERROR
        assert response.flags & dns.flags.AA


def test_names_outside_every_zone_are_not_kept_in_the_cache() -> None:
    snapshot = Snapshot(ZoneIndex.from_zone_texts([(EXAMPLE_COM, "example.com.")]))
    for i in range(20):
        raw = answer(snapshot, query(f"n{i}.example.net.", "A"), transport=Transport.UDP)
        assert raw is not None
        assert dns.message.from_wire(raw).rcode() == dns.rcode.REFUSED
    assert len(snapshot.cache) == 0


def test_a_swapped_in_index_never_answers_from_the_old_snapshots_cache() -> None:
    old = ZoneIndex.from_zone_texts([(EXAMPLE_COM, "example.com.")])
    new = ZoneIndex.from_zone_texts([(EXAMPLE_COM.replace("192.0.2.", "198.51.100."),
                                      "example.com.")])
    holder = IndexHolder(old)
    wire = query("web.example.com.", "A")
    first = answer(holder.snapshot, wire, transport=Transport.UDP)
    assert len(holder.snapshot.cache) == 1
    holder.swap(new)
    assert len(holder.snapshot.cache) == 0
    second = answer(holder.snapshot, wire, transport=Transport.UDP)
    assert first is not None
    assert second is not None
    assert second == answer(new, wire, transport=Transport.UDP) != first

"""Response rate limiting's pure core: the bucket bound, the exact slip ratio, the
bounded table, independent buckets, the classes read off real answers, and the site
facts that turn it on."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import dns.flags
import dns.message
import dns.name
import dns.rcode
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from valis_core.config_store import ConfigStore
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.dnssec import ZoneKey, generate_key
from valis_core.dns.serve.rrl import (
    DEFAULT_IPV6_PREFIX,
    DEFAULT_SLIP,
    Kind,
    RateLimiter,
    RrlSettings,
    Verdict,
    bucket_key,
    classify,
    describe,
    slip_reply,
    source_prefix,
)
from valis_core.dns.wire import from_text
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.site_facts import (
    RRL_EXEMPT_KEY,
    RRL_RANGES,
    RRL_RATE_KEY,
    RRL_SLIP_KEY,
    SiteFactsError,
    check_site_facts,
    rrl_settings,
)
from valis_core.resident.reload import plan_reload

KEY = bytes(range(16))
ZONE = """$ORIGIN example.com.
$TTL 3600
@ SOA ns1 hostmaster 1 7200 3600 1209600 300
@ NS ns1
ns1 A 192.0.2.1
www A 192.0.2.80
sub NS ns.sub
ns.sub A 192.0.2.53
"""
INDEX = ZoneIndex.from_zone_text(ZONE, "example.com.")
FACTS = {
    "VALIS_NODE_NAME": "origin-1",
    "VALIS_LOCATION": "ams",
    "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
    "VALIS_SERVED_ZONES": "example.com.",
}

rates = st.integers(min_value=1, max_value=50)
# Times in milliseconds, so sums are exact in floating point.
steps = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 400)), min_size=1, max_size=300
)


def response(name: str, rtype: str) -> bytes:
    query = dns.message.make_query(name, rtype, use_edns=False).to_wire()
    wire = answer(INDEX, query, transport=Transport.UDP)
    assert wire is not None
    return wire


@given(rates, st.integers(1, 60), steps)
def test_a_bucket_never_sends_more_than_its_rate_over_the_time_seen_plus_its_burst(
    rate: int, burst: int, sequence: list[tuple[int, int]]
) -> None:
    limiter = RateLimiter(RrlSettings(rate=rate, burst=burst, table_size=1024), KEY)
    buckets = [b"bucket-%d" % n for n in range(4)]
    now = 0
    seen: dict[int, list[float]] = {}
    sent: dict[int, int] = {}
    for which, delta in sequence:
        now += delta
        slot = limiter.slot(buckets[which])
        seen.setdefault(slot, []).append(now / 1000)
        if limiter.take(buckets[which], now / 1000) is Verdict.SEND:
            sent[slot] = sent.get(slot, 0) + 1
    for slot, times in seen.items():
        assert sent.get(slot, 0) <= rate * (times[-1] - times[0]) + burst + 1e-9


@given(st.integers(0, 10), rates, st.integers(0, 500))
def test_every_slip_th_limited_response_slips_and_the_rest_are_dropped(
    slip: int, rate: int, flood: int
) -> None:
    limiter = RateLimiter(RrlSettings(rate=rate, slip=slip, table_size=1024), KEY)
    verdicts = [limiter.take(b"victim", 7.0) for _ in range(rate + flood)]
    assert verdicts[:rate] == [Verdict.SEND] * rate
    limited = verdicts[rate:]
    assert Verdict.SEND not in limited
    slipped = [n for n, verdict in enumerate(limited, start=1) if verdict is Verdict.SLIP]
    assert slipped == ([n for n in range(1, flood + 1) if n % slip == 0] if slip else [])


@given(st.lists(st.binary(max_size=40), max_size=200), st.integers(1024, 4096))
def test_the_table_stays_its_fixed_size_whatever_the_keys(keys: list[bytes], size: int) -> None:
    limiter = RateLimiter(RrlSettings(rate=1, table_size=size), KEY)
    footprint = limiter.footprint
    assert footprint == 24 * size
    for n, key in enumerate(keys):
        limiter.take(key, float(n))
        assert 0 <= limiter.slot(key) < size
    assert limiter.footprint == footprint


@given(rates, steps, st.integers(0, 400))
def test_a_flood_at_one_prefix_changes_nothing_for_another(
    rate: int, sequence: list[tuple[int, int]], flood: int
) -> None:
    settings = RrlSettings(rate=rate, table_size=4096)
    www = response("www.example.com.", "A")
    victim, honest = "198.51.100.7", "203.0.113.9"
    alone, flooded = RateLimiter(settings, KEY), RateLimiter(settings, KEY)
    name = from_text("www.example.com.")
    honest_key = bucket_key(source_prefix(honest, 24, 56), Kind.POSITIVE, name)
    victim_key = bucket_key(source_prefix(victim, 24, 56), Kind.POSITIVE, name)
    assume(alone.slot(honest_key) != alone.slot(victim_key))
    now = 0
    for _, delta in sequence:
        now += delta
        for _ in range(flood):
            flooded.limit(www, victim, now / 1000)
        assert alone.limit(www, honest, now / 1000) == flooded.limit(www, honest, now / 1000)


def test_the_slot_depends_on_the_process_key() -> None:
    settings = RrlSettings(rate=1, table_size=1 << 20)
    keys = [b"bucket-%d" % n for n in range(8)]
    one, other = RateLimiter(settings, KEY), RateLimiter(settings, bytes(16))
    assert [one.slot(k) for k in keys] != [other.slot(k) for k in keys]


@given(st.sampled_from(["aa.example.com.", "x.y.example.com.", "NoPe.Example.COM."]),
       st.sampled_from(["A", "MX", "TXT"]))
def test_every_name_missing_from_a_zone_shares_the_zone_s_nxdomain_bucket(
    name: str, rtype: str
) -> None:
    kind, keyed, _ = classify(response(name, rtype))
    assert (kind, keyed) == (Kind.NXDOMAIN, from_text("example.com."))


def test_answers_nodata_referrals_and_errors_are_classes_of_their_own() -> None:
    www = from_text("www.example.com.")
    assert classify(response("WWW.example.com.", "A"))[:2] == (Kind.POSITIVE, www)
    assert classify(response("www.example.com.", "TXT"))[:2] == (Kind.NODATA, www)
    referral = classify(response("host.deep.sub.example.com.", "A"))
    assert referral[:2] == (Kind.REFERRAL, from_text("sub.example.com."))
    assert classify(response("example.org.", "A"))[:2] == (Kind.ERROR, b"")


@given(st.sampled_from(["www.example.com.", "nope.example.com.", "a.sub.example.com.",
                        "example.org."]), st.booleans())
def test_a_slip_reply_is_the_question_with_tc_and_no_records(name: str, edns: bool) -> None:
    query = dns.message.make_query(name, "A", use_edns=0 if edns else False)
    full = answer(INDEX, query.to_wire(), transport=Transport.UDP)
    assert full is not None
    reply = dns.message.from_wire(slip_reply(full, classify(full)[2]))
    assert reply.id == query.id
    assert reply.flags & dns.flags.TC
    assert reply.flags & dns.flags.QR
    assert reply.question == query.question
    assert (reply.answer, reply.authority, reply.additional) == ([], [], [])
    assert reply.rcode() == dns.message.from_wire(full).rcode()


@given(st.binary(max_size=600))
def test_classifying_any_bytes_never_raises(wire: bytes) -> None:
    kind, _, qend = classify(wire)
    assert kind in Kind
    slip_reply(wire + bytes(12), qend)


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(8, 32))
def test_ipv4_sources_share_a_bucket_exactly_when_they_share_the_prefix(
    a: int, b: int, prefix: int
) -> None:
    first, second = str(ipaddress.IPv4Address(a)), str(ipaddress.IPv4Address(b))
    same = a >> (32 - prefix) == b >> (32 - prefix)
    assert (source_prefix(first, prefix, 56) == source_prefix(second, prefix, 56)) == same
    mapped = f"::ffff:{first}"
    assert source_prefix(mapped, prefix, 56) == source_prefix(first, prefix, 56)


@given(st.integers(0, 2**128 - 1), st.integers(0, 2**128 - 1), st.integers(16, 128))
def test_ipv6_sources_share_a_bucket_exactly_when_they_share_the_prefix(
    a: int, b: int, prefix: int
) -> None:
    assume(a >> 32 != 0xFFFF and b >> 32 != 0xFFFF)
    first, second = str(ipaddress.IPv6Address(a)), str(ipaddress.IPv6Address(b))
    same = a >> (128 - prefix) == b >> (128 - prefix)
    assert (source_prefix(first, 24, prefix) == source_prefix(second, 24, prefix)) == same
    assert source_prefix(first + "%eth0", 24, prefix) == source_prefix(first, 24, prefix)


def test_an_ipv4_and_an_ipv6_source_never_share_a_prefix() -> None:
    assert source_prefix("0.0.0.1", 8, 16) != source_prefix("::1", 8, 16)
    assert source_prefix("not an address", 24, 56).startswith(b"?")


def test_rate_limiting_is_off_without_a_rate_and_tuned_by_the_other_facts() -> None:
    assert rrl_settings(FACTS) is None
    on = rrl_settings({**FACTS, RRL_RATE_KEY: "20"})
    assert on == RrlSettings(rate=20)
    assert (on.slip, on.ipv6_prefix, on.burst) == (DEFAULT_SLIP, DEFAULT_IPV6_PREFIX, 20)
    tuned = {**FACTS, RRL_RATE_KEY: "5", RRL_SLIP_KEY: "0", "VALIS_RRL_IPV4_PREFIX": "32",
             "VALIS_RRL_IPV6_PREFIX": "64", "VALIS_RRL_TABLE_SIZE": "4096"}
    check_site_facts(tuned)
    assert rrl_settings(tuned) == RrlSettings(
        rate=5, slip=0, ipv4_prefix=32, ipv6_prefix=64, table_size=4096
    )


@pytest.mark.parametrize("key", sorted(RRL_RANGES))
@given(value=st.sampled_from(["", "-1", "1.5", " 20", "2e3", "٣", "99999999999"]))
def test_a_rate_limit_fact_out_of_its_range_is_refused_in_one_line(key: str, value: str) -> None:
    low, high = RRL_RANGES[key]
    facts = {**FACTS, RRL_RATE_KEY: "20"}
    check_site_facts({**facts, key: str(low)})
    check_site_facts({**facts, key: str(high)})
    for bad in (value, str(low - 1), str(high + 1)):
        with pytest.raises(SiteFactsError, match=key) as refused:
            check_site_facts({**facts, key: bad})
        assert "\n" not in str(refused.value)


def test_tuning_without_a_rate_is_refused_naming_the_missing_rate() -> None:
    with pytest.raises(SiteFactsError, match=f"off without {RRL_RATE_KEY}"):
        check_site_facts({**FACTS, RRL_SLIP_KEY: "1"})


def test_a_flood_from_ever_new_sources_leaves_the_memory_as_it_was() -> None:
    limiter = RateLimiter(RrlSettings(rate=1, table_size=4096), KEY)
    footprint, www = limiter.footprint, response("www.example.com.", "A")
    for n in range(10_000):
        limiter.limit(www, str(ipaddress.IPv4Address(n * 256)), 1.0)
        assert limiter.remembered <= 4096
    assert limiter.footprint == footprint


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 300)),
                max_size=200), st.integers(0, 3))
def test_limit_spends_the_bucket_its_response_and_source_name(
    sequence: list[tuple[int, int, int]], slip: int
) -> None:
    settings = RrlSettings(rate=5, slip=slip, table_size=1024)
    remembering, plain = RateLimiter(settings, KEY), RateLimiter(settings, KEY)
    hosts = ("192.0.2.1", "192.0.2.200", "198.51.100.1", "2001:db8::1")
    replies = [response(name, rtype) for name, rtype in (
        ("www.example.com.", "A"), ("nope.example.com.", "A"),
        ("a.sub.example.com.", "A"), ("example.org.", "A"))]
    now = 0
    for host, which, delta in sequence:
        now += delta
        wire = replies[which]
        kind, name, qend = classify(wire)
        bucket = bucket_key(source_prefix(hosts[host], 24, 56), kind, name)
        expected = {Verdict.SEND: wire, Verdict.DROP: None,
                    Verdict.SLIP: slip_reply(wire, qend)}[plain.take(bucket, now / 1000)]
        assert remembering.limit(wire, hosts[host], now / 1000) == expected


WILD = """$ORIGIN example.net.
$TTL 3600
@ SOA ns1 hostmaster 1 7200 3600 1209600 300
@ NS ns1
ns1 A 192.0.2.1
*.w A 192.0.2.99
own.w A 192.0.2.7
deep.own.w TXT "below a name of its own"
*.alias CNAME own.w
sub NS ns.sub
ns.sub A 192.0.2.53
moved DNAME example.com.
*.sub A 192.0.2.66
"""
WILD_INDEX = ZoneIndex.from_zone_text(WILD, "example.net.")
labels = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


def wild_response(name: str, rtype: str = "A") -> bytes:
    query = dns.message.make_query(name, rtype, use_edns=False).to_wire()
    wire = answer(WILD_INDEX, query, transport=Transport.UDP)
    assert wire is not None
    return wire


def wild_kind(name: str, rtype: str = "A") -> tuple[Kind, bytes]:
    kind, keyed, _ = classify(wild_response(name, rtype), WILD_INDEX)
    return kind, keyed


@given(st.lists(labels, min_size=2, max_size=2, unique=True), st.sampled_from(["A", "MX"]))
def test_any_two_names_a_wildcard_answers_share_the_wildcard_s_bucket(
    names: list[str], rtype: str
) -> None:
    assume("own" not in names)
    first, second = (wild_kind(f"{n}.w.example.net.", rtype) for n in names)
    # An answer (A) and a NODATA (MX) the wildcard synthesized are keyed by its owner.
    assert first == second == (Kind.WILDCARD, from_text("*.w.example.net."))
    limiter = RateLimiter(RrlSettings(rate=1, table_size=1024), KEY, lambda: WILD_INDEX)
    one, other = (wild_response(f"{n}.w.example.net.", rtype) for n in names)
    assert limiter.limit(one, "198.51.100.7", 1.0) is one
    assert limiter.limit(other, "198.51.100.8", 1.0) is None  # the same bucket, spent


@given(labels)
def test_a_name_with_records_of_its_own_keeps_its_own_bucket_beside_a_wildcard(
    label: str
) -> None:
    assert wild_kind("own.w.example.net.") == (Kind.POSITIVE, from_text("own.w.example.net."))
    assert wild_kind("own.w.example.net.", "MX") == (
        Kind.NODATA, from_text("own.w.example.net."))
    # Beneath an existing name the wildcard above does not apply (RFC 4592: NXDOMAIN).
    assert wild_kind(f"{label}.own.w.example.net.") == (Kind.NXDOMAIN, from_text("example.net."))
    # A CNAME the wildcard synthesized is the wildcard's too.
    assert wild_kind(f"{label}.alias.example.net.") == (
        Kind.WILDCARD, from_text("*.alias.example.net."))


@given(labels)
def test_names_beneath_a_delegation_or_a_dname_are_never_wildcard_answers(label: str) -> None:
    assert wild_kind(f"{label}.sub.example.net.") == (Kind.REFERRAL, from_text("sub.example.net."))
    for name in (f"{label}.moved.example.net.", f"{label}.sub.example.net."):
        zone = WILD_INDEX.zone_for(from_text(name))
        assert zone is not None
        assert zone.wildcard_covering(from_text(name)) is None


def test_without_the_lookup_a_wildcard_answer_is_keyed_by_its_own_name() -> None:
    kind, keyed, _ = classify(wild_response("x.w.example.net."))
    assert (kind, keyed) == (Kind.POSITIVE, from_text("x.w.example.net."))
    assert classify(response("nope.example.com.", "A"), INDEX)[:2] == (
        Kind.NXDOMAIN, from_text("example.com."))


SIGNED = Snapshot(WILD_INDEX, signer=Signer(
    {from_text("example.net."): ZoneKey(generate_key(13))}, clock=lambda: 1_800_000_000))


@given(labels)
def test_under_compact_denial_a_missing_name_s_nodata_is_the_zone_s_nxdomain(
    label: str
) -> None:
    assume(label not in ("ns1", "w", "alias", "sub", "moved"))
    query = dns.message.make_query(f"{label}.example.net.", "A", want_dnssec=True)
    wire = answer(SIGNED, query.to_wire(), transport=Transport.UDP)
    assert wire is not None
    denial = dns.message.from_wire(wire)
    # RFC 9824: NOERROR and no answer for a name that does not exist.
    assert (denial.rcode(), denial.answer) == (dns.rcode.NOERROR, [])
    assert classify(wire)[:2] == (Kind.NODATA, from_text(f"{label}.example.net."))
    assert classify(wire, WILD_INDEX)[:2] == (Kind.NXDOMAIN, from_text("example.net."))
    # A name that exists keeps its own NODATA bucket; a wildcard's keeps the wildcard's.
    own = answer(SIGNED, dns.message.make_query(
        "own.w.example.net.", "MX", want_dnssec=True).to_wire(), transport=Transport.UDP)
    assert own is not None
    assert classify(own, WILD_INDEX)[:2] == (Kind.NODATA, from_text("own.w.example.net."))
    wild = answer(SIGNED, dns.message.make_query(
        f"{label}.w.example.net.", "MX", want_dnssec=True).to_wire(), transport=Transport.UDP)
    assert wild is not None
    assert classify(wild, WILD_INDEX)[:2] == (Kind.WILDCARD, from_text("*.w.example.net."))


v4_networks = st.builds(
    lambda value, length: ipaddress.IPv4Network((value >> (32 - length) << (32 - length), length)),
    st.integers(0, 2**32 - 1), st.integers(8, 32),
)
v6_networks = st.builds(
    lambda value, length: ipaddress.IPv6Network(
        (value >> (128 - length) << (128 - length), length)),
    st.integers(0, 2**128 - 1), st.integers(16, 128),
)


@given(st.lists(st.one_of(v4_networks, v6_networks), min_size=1, max_size=4),
       st.integers(0, 2**128 - 1), st.integers(0, 60))
def test_a_source_in_an_exempt_prefix_is_never_limited_and_others_are_as_before(
    exempt: list[ipaddress.IPv4Network | ipaddress.IPv6Network], pick: int, flood: int
) -> None:
    www = response("www.example.com.", "A")
    inside = exempt[pick % len(exempt)]
    host = str(inside.network_address + pick % inside.num_addresses)
    hosts = [host, f"::ffff:{host}" if inside.version == 4 else host]
    limiter = RateLimiter(RrlSettings(rate=1, table_size=1024, exempt=tuple(exempt)), KEY)
    for n in range(flood):
        assert limiter.limit(www, hosts[n % 2], 1.0) is www
    outside = "192.0.2.1" if not any(
        ipaddress.ip_address("192.0.2.1") in net for net in exempt) else None
    if outside is not None:
        plain = RateLimiter(RrlSettings(rate=1, table_size=1024), KEY)
        for _ in range(flood):
            assert limiter.limit(www, outside, 1.0) == plain.limit(www, outside, 1.0)


def test_an_exempt_list_is_read_from_the_site_facts_and_a_bad_entry_named() -> None:
    facts = {**FACTS, RRL_RATE_KEY: "20",
             RRL_EXEMPT_KEY: "192.0.2.0/24, 2001:db8::/32,198.51.100.7"}
    check_site_facts(facts)
    on = rrl_settings(facts)
    assert on is not None
    assert [str(net) for net in on.exempt] == [
        "192.0.2.0/24", "2001:db8::/32", "198.51.100.7/32"]
    for bad, said in (("192.0.2.1/24", "did you mean 192.0.2.0/24"),
                      ("example.net", "'example.net' is not an address"),
                      ("192.0.2.0/33", "'192.0.2.0/33'"), ("", "''")):
        with pytest.raises(SiteFactsError, match=RRL_EXEMPT_KEY) as refused:
            check_site_facts({**facts, RRL_EXEMPT_KEY: f"203.0.113.0/24,{bad}"})
        assert said in str(refused.value)
        assert "\n" not in str(refused.value)
    with pytest.raises(SiteFactsError, match=f"off without {RRL_RATE_KEY}"):
        check_site_facts({**FACTS, RRL_EXEMPT_KEY: "192.0.2.0/24"})


def test_rate_zero_is_off_with_its_tuning_kept() -> None:
    facts = {**FACTS, RRL_RATE_KEY: "0", RRL_SLIP_KEY: "1", RRL_EXEMPT_KEY: "192.0.2.0/24"}
    check_site_facts(facts)
    assert rrl_settings(facts) is None
    assert describe(None) == "response rate limiting: off"
    assert "exempt 192.0.2.0/24" in describe(RrlSettings(
        rate=5, exempt=(ipaddress.IPv4Network("192.0.2.0/24"),)))


def test_a_reload_applies_any_change_to_the_rate_limit_facts_at_once() -> None:
    def store(**changes: str) -> ConfigStore:
        return ConfigStore(path=Path("/s"), facts={**FACTS, **changes}, first_boot=False)

    for before, after in (({}, {RRL_RATE_KEY: "20"}),
                          ({RRL_RATE_KEY: "20"}, {RRL_RATE_KEY: "0"}),
                          ({RRL_RATE_KEY: "20"}, {}),
                          ({RRL_RATE_KEY: "20"}, {RRL_RATE_KEY: "20", RRL_SLIP_KEY: "1"}),
                          ({RRL_RATE_KEY: "20"},
                           {RRL_RATE_KEY: "20", RRL_EXEMPT_KEY: "192.0.2.0/24"})):
        plan = plan_reload(store(**before), store(**after))
        assert plan.rate_limits
        assert plan.restart_keys == ()
        assert not plan.empty
    assert not plan_reload(store(), store(VALIS_LOCATION="elsewhere")).rate_limits


@given(st.lists(labels, min_size=1, max_size=3),
       st.sampled_from(["example.net.", "w.example.net.", "own.w.example.net.",
                        "alias.example.net.", "sub.example.net."]),
       st.sampled_from(["A", "TXT", "CNAME"]))
def test_the_wildcard_found_is_the_one_the_answer_path_synthesized_from(
    prefix: list[str], under: str, rtype: str
) -> None:
    name = ".".join([*prefix, under])
    zone = WILD_INDEX.zone_for(from_text(name))
    assert zone is not None
    owner = zone.wildcard_covering(from_text(name))
    got = dns.message.from_wire(wild_response(name, rtype))
    if owner is None:
        # No wildcard: a name the zone lacks is NXDOMAIN, or a referral beneath the cut.
        if not zone.exists(from_text(name).lower()):
            assert (got.rcode() == dns.rcode.NXDOMAIN) != name.endswith("sub.example.net.")
        return
    # The wildcard's own records, asked for by its literal name, are what was synthesized.
    literal = dns.message.from_wire(wild_response(dns.name.from_wire(owner, 0)[0].to_text(),
                                                  rtype))
    assert got.rcode() == literal.rcode() == dns.rcode.NOERROR
    assert [(r.rdtype, sorted(map(str, r))) for r in got.answer[:1]] == [
        (r.rdtype, sorted(map(str, r))) for r in literal.answer[:1]]
    assert all(str(r.name) == name.lower() for r in got.answer[:1])

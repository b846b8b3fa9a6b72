"""Site facts: rendered whole or not at all, and read back (by us and by systemd) exactly."""

from __future__ import annotations

import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.errors import ValisError
from valis_core.operator_state.local_cluster import socket_dsn
from valis_core.operator_state.site_facts import (
    DNS_WORKERS_KEY,
    MAX_DNS_WORKERS,
    OPTIONAL_KEYS,
    REQUIRED_KEYS,
    SITE_FACTS_MODE,
    TRANSFER_SIGNATURES_KEY,
    IncompleteSiteFacts,
    SiteFactsError,
    dns_workers,
    parse_site_facts,
    render_site_facts,
    served_zones,
    transfer_signatures,
)
from valis_core.operator_state.site_facts_file import write_site_facts

# Any one-line text: no control characters (newline, NUL, ...) and no lone surrogates.
values = st.text(
    st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=40
)
tricky_values = st.text(st.sampled_from(" \"'$`\\#;=aé"), min_size=1, max_size=12)
zone_names = st.from_regex(r"[a-z0-9-]{1,12}(\.[a-z0-9-]{1,12}){0,3}\.?", fullmatch=True)
zones = st.lists(zone_names, min_size=1, max_size=4).map(",".join)
levels = st.sampled_from(["debug", "info", "warning", "error", "critical", "INFO", "Warning"])


@st.composite
def site_facts(draw: st.DrawFn) -> dict[str, str]:
    text = st.one_of(values, tricky_values)
    facts = {
        "VALIS_NODE_NAME": draw(text),
        "VALIS_LOCATION": draw(text),
        # Written site facts must name a socket (tests/property/test_dsn.py); its
        # directory is where the tricky text goes (a comma would make it a host list).
        "VALIS_OPERATOR_STATE_DSN": socket_dsn("/" + draw(text).replace(",", "_")),
        "VALIS_SERVED_ZONES": draw(zones),
    }
    if draw(st.booleans()):
        facts["VALIS_SERVED_DOMAIN"] = draw(text)
    if draw(st.booleans()):
        facts["VALIS_LOG_LEVEL"] = draw(levels)
    return facts


EXAMPLE = {
    "VALIS_NODE_NAME": "origin-1",
    "VALIS_LOCATION": "fra 1",
    "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/valis_state?host=/var/run/postgresql",
    "VALIS_SERVED_ZONES": "example.org.,example.net.",
}


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        entry.name: (entry.read_bytes(), stat.S_IMODE(entry.stat().st_mode))
        for entry in directory.iterdir()
    }


def systemd_env_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= reading (src/basic/env-file.c, parse_env_file_internal),
    transcribed state for state, so the rendered file is checked against the reader
    that actually consumes it rather than against our own parser."""
    whitespace, newline, escapable = " \t\n\r", "\n\r", '"\\`$'
    out: dict[str, str] = {}
    state, key, value = "PRE_KEY", "", ""
    last_value_ws: int | None = None
    last_key_ws: int | None = None

    def push() -> None:
        k = key if last_key_ws is None else key[:last_key_ws]
        out[k] = value

    for c in text:
        if state == "PRE_KEY":
            if c in "#;":
                state = "COMMENT"
            elif c not in whitespace:
                state, key, last_key_ws = "KEY", c, None
        elif state == "KEY":
            if c in newline:
                state, key = "PRE_KEY", ""
            elif c == "=":
                state, value, last_value_ws = "PRE_VALUE", "", None
            else:
                if c not in whitespace:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key += c
        elif state == "PRE_VALUE":
            if c in newline:
                push()
                state, key = "PRE_KEY", ""
            elif c == "'":
                state = "SINGLE"
            elif c == '"':
                state = "DOUBLE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in whitespace:
                state, value = "VALUE", value + c
        elif state == "VALUE":
            if c in newline:
                if last_value_ws is not None:
                    value = value[:last_value_ws]
                push()
                state, key = "PRE_KEY", ""
            elif c == "\\":
                state, last_value_ws = "VALUE_ESCAPE", None
            else:
                if c not in whitespace:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value += c
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in newline:
                value += c
        elif state == "SINGLE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value += c
        elif state == "DOUBLE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_ESCAPE"
            else:
                value += c
        elif state == "DOUBLE_ESCAPE":
            state = "DOUBLE"
            if c in escapable:
                value += c
            elif c != "\n":
                value += "\\" + c
        elif state == "COMMENT" and c in newline:
            state = "PRE_KEY"
    assert state == "PRE_KEY", f"file ends inside {state}"
    return out


@given(site_facts())
def test_rendered_facts_parse_back_exactly(facts: dict[str, str]) -> None:
    assert parse_site_facts(render_site_facts(facts)) == facts


@given(site_facts())
def test_systemd_reads_the_rendered_file_as_the_same_facts(facts: dict[str, str]) -> None:
    assert systemd_env_file(render_site_facts(facts)) == facts


@settings(max_examples=scaled(0.3))
@given(site_facts())
def test_rendering_is_canonical_whatever_order_the_facts_come_in(facts: dict[str, str]) -> None:
    reordered = dict(reversed(list(facts.items())))
    text = render_site_facts(facts)
    assert render_site_facts(reordered) == text
    keys = [line.split("=", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    assert keys == sorted(facts)


@settings(max_examples=scaled(0.6))
@given(
    facts=site_facts(),
    drop=st.sets(st.sampled_from(sorted(REQUIRED_KEYS)), min_size=1),
    previous=st.one_of(st.none(), site_facts()),
)
def test_a_partial_set_is_refused_naming_every_missing_key_and_leaves_the_directory_as_it_was(
    facts: dict[str, str], drop: set[str], previous: dict[str, str] | None
) -> None:
    partial = {k: v for k, v in facts.items() if k not in drop}
    with scratch() as d:
        target = d / "site-facts.env"
        if previous is not None:
            write_site_facts(target, previous)
        before = snapshot(d)
        with pytest.raises(IncompleteSiteFacts) as caught:
            write_site_facts(target, partial)
        assert caught.value.missing == drop
        for key in drop:
            assert key in str(caught.value)
        assert snapshot(d) == before
    with pytest.raises(IncompleteSiteFacts):
        render_site_facts(partial)


REFUSED: list[tuple[dict[str, str], str]] = [
    ({**EXAMPLE, "VALIS_REPL_PORT": "4005"}, "development listener"),
    ({**EXAMPLE, "VALIS_SLYNK_PORT": "4005"}, "unknown key"),
    ({**EXAMPLE, "VALIS_EXTRA": "x"}, "unknown key"),
    ({**EXAMPLE, "VALIS_LOCATION": "fra\n1"}, "line break"),
    ({**EXAMPLE, "VALIS_LOCATION": "fra\r1"}, "line break"),
    ({**EXAMPLE, "VALIS_NODE_NAME": "origin\x001"}, "NUL"),
    ({**EXAMPLE, "VALIS_NODE_NAME": "origin\x1b1"}, "control character"),
    ({**EXAMPLE, "VALIS_NODE_NAME": ""}, "empty"),
    ({**EXAMPLE, "VALIS_SERVED_DOMAIN": ""}, "empty"),
    ({**EXAMPLE, "VALIS_ACME_DIRECTORY_URL": "acme.example.org/directory"}, "https URL"),
    ({**EXAMPLE, "VALIS_ACME_DIRECTORY_URL": "http://acme.example.org/dir"}, "https URL"),
    ({**EXAMPLE, "VALIS_ACME_DIRECTORY_URL": "https:///directory"}, "naming a host"),
    ({**EXAMPLE, "VALIS_SERVED_ZONES": "example.org.,,example.net."}, "VALIS_SERVED_ZONES"),
    ({**EXAMPLE, "VALIS_SERVED_ZONES": "example.org., example.net."}, "VALIS_SERVED_ZONES"),
    ({**EXAMPLE, "VALIS_LOG_LEVEL": "loud"}, "VALIS_LOG_LEVEL"),
    ({**EXAMPLE, "VALIS_EDGE_CERT": "later"}, "VALIS_EDGE_CERT"),
    ({**EXAMPLE, "VALIS_NODE_NAME": "\udc80"}, "UTF-8"),
]


@pytest.mark.parametrize(("facts", "reason"), REFUSED)
@pytest.mark.parametrize("previous", [None, EXAMPLE])
def test_a_refused_set_leaves_no_file_no_temporary_file_and_the_old_file_untouched(
    facts: dict[str, str], reason: str, previous: dict[str, str] | None
) -> None:
    with scratch() as d:
        target = d / "site-facts.env"
        if previous is not None:
            write_site_facts(target, previous)
        before = snapshot(d)
        with pytest.raises(SiteFactsError, match=reason):
            write_site_facts(target, facts)
        assert snapshot(d) == before


def test_the_development_listener_is_refused_on_parse_as_well() -> None:
    text = render_site_facts(EXAMPLE) + 'VALIS_REPL_PORT="4005"\n'
    with pytest.raises(SiteFactsError, match="never provisioned"):
        parse_site_facts(text)


def test_refusals_are_operator_errors() -> None:
    assert issubclass(SiteFactsError, ValisError)
    assert issubclass(IncompleteSiteFacts, SiteFactsError)


def test_the_file_is_written_0640_and_reads_back() -> None:
    with scratch() as d:
        target = d / "site-facts.env"
        write_site_facts(target, EXAMPLE)
        assert snapshot(d) == {"site-facts.env": (render_site_facts(EXAMPLE).encode(), 0o640)}
        assert SITE_FACTS_MODE == 0o640
        assert parse_site_facts(target.read_text()) == EXAMPLE


def test_a_hand_written_file_reads_as_systemd_reads_it() -> None:
    text = (
        "# written by hand\n"
        "; another comment\n"
        "\n"
        "  VALIS_NODE_NAME = origin-1  \n"
        "VALIS_LOCATION='fra 1 \"$x\"'\n"
        'VALIS_OPERATOR_STATE_DSN="postgresql://valis@/s?host=/run/pg \\q"\r\n'
        "VALIS_SERVED_ZONES=example.org.\n"
    )
    expected = {
        "VALIS_NODE_NAME": "origin-1",
        "VALIS_LOCATION": 'fra 1 "$x"',
        "VALIS_OPERATOR_STATE_DSN": "postgresql://valis@/s?host=/run/pg \\q",
        "VALIS_SERVED_ZONES": "example.org.",
    }
    assert parse_site_facts(text) == expected
    assert systemd_env_file(text) == expected


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("VALIS_LOG_LEVEL=in fo", "double-quote it"),
        ('VALIS_LOG_LEVEL="info', "unterminated"),
        ('VALIS_LOG_LEVEL="info"x', "after its closing quote"),
        ("VALIS_LOG_LEVEL='info", "unterminated"),
        ("VALIS_LOG_LEVEL", "expected KEY=value"),
        ('VALIS_NODE_NAME="again"', "given twice"),
        ("# a comment ending in a backslash \\", "backslash"),
    ],
)
def test_an_ambiguous_or_malformed_line_is_refused_naming_its_line(line: str, reason: str) -> None:
    text = render_site_facts(EXAMPLE) + line + "\n"
    with pytest.raises(SiteFactsError, match=reason) as caught:
        parse_site_facts(text)
    assert f"line {len(text.splitlines())}" in str(caught.value)


def test_served_zones_splits_the_comma_list_in_order() -> None:
    assert served_zones(EXAMPLE) == ("example.org.", "example.net.")


def test_optional_keys_may_be_given_or_left_out() -> None:
    full = {
        **EXAMPLE,
        "VALIS_SERVED_DOMAIN": "example.org",
        "VALIS_ACME_DIRECTORY_URL": "https://acme.example.org/directory",
        "VALIS_LOG_LEVEL": "info",
        "VALIS_LOG_FORMAT": "json",
        "VALIS_EDGE_CERT": "on-demand",
        "VALIS_DNS_WORKERS": "2",
    }
    assert set(full) == REQUIRED_KEYS | OPTIONAL_KEYS
    assert parse_site_facts(render_site_facts(full)) == full
    assert parse_site_facts(render_site_facts(EXAMPLE)) == EXAMPLE


@given(st.integers(1, MAX_DNS_WORKERS), st.integers(1, 4096))
def test_dns_workers_are_what_the_fact_says_else_the_cpus(workers: int, cpus: int) -> None:
    assert dns_workers(str(workers), cpus) == workers
    assert dns_workers(None, cpus) == min(cpus, MAX_DNS_WORKERS)
    facts = {**EXAMPLE, DNS_WORKERS_KEY: str(workers)}
    assert parse_site_facts(render_site_facts(facts)) == facts


@given(st.text(max_size=6).filter(
    lambda v: not (v.isascii() and v.isdigit() and 1 <= int(v) <= MAX_DNS_WORKERS)
))
def test_dns_workers_other_than_a_whole_number_in_range_are_refused(value: str) -> None:
    with pytest.raises(SiteFactsError, match=r"VALIS_DNS_WORKERS .* is not a whole number"):
        dns_workers(value, 2)


@given(st.integers(1, 2**31 - 1))
def test_the_transfer_signatures_bound_is_what_the_fact_says_else_the_default(
    bound: int,
) -> None:
    facts = {**EXAMPLE, TRANSFER_SIGNATURES_KEY: str(bound)}
    assert transfer_signatures(parse_site_facts(render_site_facts(facts))) == bound
    assert transfer_signatures(EXAMPLE) == 2_000_000


@given(st.text(max_size=12).filter(
    lambda v: not (v.isascii() and v.isdigit() and 1 <= int(v) < 2**31)
))
def test_a_transfer_signatures_bound_other_than_a_whole_number_in_range_is_refused(
    value: str,
) -> None:
    with pytest.raises(SiteFactsError, match=TRANSFER_SIGNATURES_KEY):
        render_site_facts({**EXAMPLE, TRANSFER_SIGNATURES_KEY: value})

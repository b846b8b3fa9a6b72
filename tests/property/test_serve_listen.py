"""Where ``valis serve`` answers unless told: loopback, on an unprivileged port that is not
multicast DNS's 5353, which a desktop's avahi or resolver already holds (the default would
fail to bind there, as ``valis demo`` already avoids it)."""

from __future__ import annotations

import argparse
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from valis_cli.commands.serve import (
    DEFAULT_LISTEN,
    ServeSetupError,
    parse_listen,
    parse_workers,
    register,
)
from valis_core.dns.serve.listen import PRIVILEGED_PORT_LIMIT
from valis_core.operator_state.site_facts import MAX_DNS_WORKERS

MULTICAST_DNS_PORT = 5353


def test_the_default_listen_address_is_loopback_unprivileged_and_not_multicast_dns() -> None:
    address = parse_listen(DEFAULT_LISTEN)
    assert address.family == socket.AF_INET
    assert address.host == "127.0.0.1"
    assert address.port >= PRIVILEGED_PORT_LIMIT
    assert address.port != MULTICAST_DNS_PORT


@pytest.mark.parametrize("text", ["localhost", "example.test:5310", "127.0.0.1:http"])
def test_a_malformed_listen_address_suggests_ports_that_are_not_multicast_dns(
    text: str,
) -> None:
    with pytest.raises(ServeSetupError) as refused:
        parse_listen(text)
    assert f":{MULTICAST_DNS_PORT}" not in str(refused.value)
    assert DEFAULT_LISTEN in str(refused.value)


@given(st.integers(1, MAX_DNS_WORKERS))
def test_workers_reads_a_whole_number_of_sockets(workers: int) -> None:
    assert parse_workers(str(workers)) == workers


def test_workers_absent_is_one_socket_as_before() -> None:
    assert parse_workers(None) == 1


@given(st.text(max_size=6).filter(
    lambda v: not (v.isascii() and v.isdigit() and 1 <= int(v) <= MAX_DNS_WORKERS)
))
def test_workers_other_than_1_to_1024_are_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(ServeSetupError, match=r"serve: --workers .* is not a whole number"):
        parse_workers(text)


def test_workers_parse_from_the_command_line() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--zone", "z", "--workers", "3"])
    assert parse_workers(args.workers) == 3
    assert parse_workers(parser.parse_args(["serve", "--zone", "z"]).workers) == 1

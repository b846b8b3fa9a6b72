"""Where ``valis serve`` answers unless told: loopback, on an unprivileged port that is not
multicast DNS's 5353, which a desktop's avahi or resolver already holds (the default would
fail to bind there, as ``valis demo`` already avoids it)."""

from __future__ import annotations

import socket

import pytest

from valis_cli.commands.serve import DEFAULT_LISTEN, ServeSetupError, parse_listen
from valis_core.dns.serve.listen import PRIVILEGED_PORT_LIMIT

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

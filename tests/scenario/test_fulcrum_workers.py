"""fulcrum binds ``VALIS_DNS_WORKERS`` UDP sockets on the unit's DNS address (one
``SO_REUSEPORT`` group, each with its forced receive queue) and hands every one down
(``--dns-udp-fds``); a malformed value is refused before anything is set up."""

from __future__ import annotations

from typing import Any

from tests.scenario.proving_ground import UNIT_IP, Ground, netns_names, udp_exchange
from tests.scenario.standin_launch import (  # noqa: F401 (fixtures)
    account,
    launch,
)
from valis_core.launch import parse_launch_argv

WORKERS = 3
#: Each exchange comes from a fresh process, so a fresh source port: the kernel's hash
#: spreads them over the group, and a socket the resident did not serve would leave its
#: share unanswered (the chance that 24 ports all miss one of 3 sockets is 3 * (2/3)^24).
EXCHANGES = 24


def test_the_dns_address_gets_one_udp_socket_per_worker_all_handed_down(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch(env={"VALIS_DNS_WORKERS": str(WORKERS)})
    report = unit.report()
    record = parse_launch_argv(report["argv"])
    assert "--dns-udp-fds" in report["argv"]
    assert "--dns-udp-fd" not in report["argv"]
    assert len(record.dns_udp_fds) == WORKERS
    for fd in record.dns_udp_fds:
        entry = report["fds"][str(fd)]
        assert (entry["type"], entry["sockname"]) == (2, [UNIT_IP, 53])
    for n in range(EXCHANGES):
        reply = udp_exchange(ground.client, UNIT_IP, 53, f"q{n}", timeout=5.0)
        assert reply.get("reply") == f"echo:q{n}", reply
    assert unit.fulcrum.stop() == 0


def test_a_malformed_worker_count_is_refused_before_anything_is_set_up(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch(env={"VALIS_DNS_WORKERS": "0"})
    assert unit.fulcrum.wait() == 1
    assert "VALIS_DNS_WORKERS '0' is not a whole number from 1 to 1024" in unit.fulcrum.stderr
    assert ground.unit_netns not in netns_names()

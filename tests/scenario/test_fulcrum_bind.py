"""The privileged binds land inside the unit's netns; the launcher never leaves the host's."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

from fulcrum.bind import DNS_RECEIVE_BUFFER, bind_unit_sockets, unprivileged_port_start
from fulcrum.errors import LauncherError
from tests.conftest import require_root
from tests.scenario.proving_ground import UNIT_IP, run, scratch_netns, tcp_exchange

ADDRESS = ipaddress.ip_address(UNIT_IP)


def address_the(netns: str) -> None:
    run(["ip", "-n", netns, "addr", "add", f"{UNIT_IP}/32", "dev", "lo"])


def test_sockets_are_bound_in_the_netns_and_inheritable_while_the_launcher_stays_home() -> None:
    require_root()
    home = os.readlink("/proc/thread-self/ns/net")
    with scratch_netns() as netns:
        address_the(netns)
        sockets = bind_unit_sockets(netns, ADDRESS, edge_port=443, owner_port=8853)
        try:
            assert os.readlink("/proc/thread-self/ns/net") == home
            assert [(s.type, s.getsockname()) for s in sockets.all()] == [
                (socket.SOCK_DGRAM, (UNIT_IP, 53)),
                (socket.SOCK_STREAM, (UNIT_IP, 53)),
                (socket.SOCK_STREAM, (UNIT_IP, 443)),
                (socket.SOCK_STREAM, (UNIT_IP, 8853)),
            ]
            assert all(os.get_inheritable(fd) for fd in sockets.fds())
            # Reachable from inside the netns: the listener lives there, not here.
            assert tcp_exchange(netns, UNIT_IP, 53)["ok"]
        finally:
            sockets.close()


def test_only_configured_ports_are_bound() -> None:
    require_root()
    with scratch_netns() as netns:
        address_the(netns)
        sockets = bind_unit_sockets(netns, ADDRESS)
        try:
            assert (sockets.edge_tcp, sockets.owner_tcp) == (None, None)
            assert len(sockets.fds()) == 2
        finally:
            sockets.close()


def test_the_dns_udp_queue_holds_what_waits_across_a_restart_past_rmem_max() -> None:
    require_root()
    with scratch_netns() as netns:
        address_the(netns)
        sockets = bind_unit_sockets(netns, ADDRESS)
        try:
            # The kernel books twice the size asked for its own overhead; a plain
            # SO_RCVBUF would be capped at net.core.rmem_max (208 KiB on a stock host).
            booked = sockets.dns_udp.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            assert booked == 2 * DNS_RECEIVE_BUFFER
        finally:
            sockets.close()


def test_dns_workers_get_one_udp_socket_each_in_one_reuseport_group() -> None:
    require_root()
    with scratch_netns() as netns:
        address_the(netns)
        sockets = bind_unit_sockets(netns, ADDRESS, dns_workers=3)
        try:
            assert len(sockets.dns_udps) == 3
            assert sockets.dns_udps[0] is sockets.dns_udp
            for udp in sockets.dns_udps:
                assert (udp.type, udp.getsockname()) == (socket.SOCK_DGRAM, (UNIT_IP, 53))
                assert udp.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
                assert udp.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == (
                    2 * DNS_RECEIVE_BUFFER)
                assert udp.fileno() in sockets.fds()
            assert all(os.get_inheritable(fd) for fd in sockets.fds())
            assert len(sockets.fds()) == 4  # and the one TCP listener
        finally:
            sockets.close()


def test_one_worker_binds_one_udp_socket_outside_any_reuseport_group() -> None:
    require_root()
    with scratch_netns() as netns:
        address_the(netns)
        sockets = bind_unit_sockets(netns, ADDRESS)
        try:
            assert sockets.dns_udps == (sockets.dns_udp,)
            assert sockets.dns_udp.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 0
        finally:
            sockets.close()


def test_a_netns_with_lowered_unprivileged_port_start_is_refused_and_nothing_bound() -> None:
    require_root()
    with scratch_netns() as netns:
        address_the(netns)
        run(["ip", "netns", "exec", netns, "sysctl", "-qw",
             "net.ipv4.ip_unprivileged_port_start=0"])
        assert unprivileged_port_start(netns) == 0
        with pytest.raises(LauncherError, match="ip_unprivileged_port_start=0, below 1024"):
            bind_unit_sockets(netns, ADDRESS)
        assert not tcp_exchange(netns, UNIT_IP, 53)["ok"]


def test_a_bind_that_fails_names_the_address_and_netns() -> None:
    require_root()
    with scratch_netns() as netns:  # no unit address assigned in it
        expected = rf"binding {UNIT_IP}:53/udp in netns {netns}: Cannot assign"
        with pytest.raises(LauncherError, match=expected):
            bind_unit_sockets(netns, ADDRESS)

"""fulcrum's control socket as shipped: its .socket unit, socket activation, and what a
pushed descriptor is checked against."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fulcrum.activation import LISTEN_FDS_START, activated_sockets
from fulcrum.control import CONTROL_FD_NAME, SOCKET_MODE
from fulcrum.errors import LauncherError
from fulcrum.exec_chain import CONTROL_SOCKET_DIR, RUN_ACCOUNT
from fulcrum.pushed import NamespaceId, PushedSocket, judge_push
from tests.script_module import load_script
from tests.unit_files import FULCRUM_UNIT, UNITS, only, parse_unit

SOCKET_UNIT = UNITS / "fulcrum-valis-control.socket"
UNIT_NETNS = NamespaceId(4, 4026532000)
GOOD = PushedSocket(True, socket.AF_INET, socket.SOCK_STREAM, True, UNIT_NETNS, "x")


def test_the_socket_unit_makes_the_control_socket_for_the_run_account_alone() -> None:
    unit = parse_unit(SOCKET_UNIT.read_text())
    path = Path(only(unit, "Socket", "ListenStream"))
    assert path.parent == Path(CONTROL_SOCKET_DIR)
    assert path.suffix == ".sock"
    assert only(unit, "Socket", "SocketUser") == RUN_ACCOUNT
    assert only(unit, "Socket", "SocketGroup") == RUN_ACCOUNT
    assert int(only(unit, "Socket", "SocketMode"), 8) == SOCKET_MODE
    assert only(unit, "Socket", "FileDescriptorName") == CONTROL_FD_NAME
    assert only(unit, "Socket", "Accept") == "no"
    assert only(unit, "Socket", "Service") == FULCRUM_UNIT.name


def test_the_delivery_ships_the_socket_unit_beside_the_service() -> None:
    dist = load_script(UNITS.parents[0] / "frozen" / "dist.py", "valis_packaging_dist")
    shipped = dist.unit_files()
    assert f"lib/systemd/system/{SOCKET_UNIT.name}" in shipped
    assert f"lib/systemd/system/{FULCRUM_UNIT.name}" in shipped


def test_sockets_passed_to_fulcrum_are_found_by_name() -> None:
    environ = {"LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "other:control"}
    assert activated_sockets(environ, 42) == {
        "other": (LISTEN_FDS_START,), "control": (LISTEN_FDS_START + 1,)
    }


def test_sockets_passed_to_another_process_are_not_taken() -> None:
    environ = {"LISTEN_PID": "41", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "control"}
    assert activated_sockets(environ, 42) == {}
    assert activated_sockets({}, 42) == {}


def test_unnamed_sockets_are_unknown() -> None:
    assert activated_sockets({"LISTEN_PID": "7", "LISTEN_FDS": "2"}, 7) == {
        "unknown": (LISTEN_FDS_START, LISTEN_FDS_START + 1)
    }


@given(st.dictionaries(st.sampled_from(["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"]),
                       st.text(max_size=12)))
def test_any_activation_environment_is_read_or_refused_as_a_launcher_error(
    environ: dict[str, str]
) -> None:
    try:
        found = activated_sockets(environ, 42)
    except LauncherError:
        return
    assert all(fd >= LISTEN_FDS_START for fds in found.values() for fd in fds)


def test_a_listening_tcp_socket_in_the_unit_netns_on_elected_ports_is_steered() -> None:
    assert judge_push(frozenset({443}), GOOD, unit_netns=UNIT_NETNS,
                      elected=frozenset({443})) is None


@pytest.mark.parametrize(("declared", "pushed", "elected", "reason"), [
    ({443}, GOOD, set(), "no edge-port is elected"),
    ({443, 8443}, GOOD, {443}, "8443 not elected"),
    ({443}, PushedSocket(False), {443}, "not a socket"),
    ({443}, PushedSocket(True, socket.AF_UNIX, socket.SOCK_STREAM, True, UNIT_NETNS),
     {443}, "not a TCP socket"),
    ({443}, PushedSocket(True, socket.AF_INET, socket.SOCK_DGRAM, False, UNIT_NETNS),
     {443}, "not a TCP socket"),
    ({443}, PushedSocket(True, socket.AF_INET6, socket.SOCK_STREAM, False, UNIT_NETNS),
     {443}, "not listening"),
    ({443}, PushedSocket(True, socket.AF_INET, socket.SOCK_STREAM, True,
                         NamespaceId(4, 4026531840)), {443}, "another network namespace"),
    ({443}, PushedSocket(True, socket.AF_INET, socket.SOCK_STREAM, True, None), {443},
     "cannot be read"),
])
def test_anything_else_is_refused_with_its_reason(
    declared: set[int], pushed: PushedSocket, elected: set[int], reason: str
) -> None:
    found = judge_push(frozenset(declared), pushed, unit_netns=UNIT_NETNS,
                       elected=frozenset(elected))
    assert found is not None
    assert reason in found


def test_the_service_takes_its_control_socket_from_the_socket_unit() -> None:
    service = parse_unit(FULCRUM_UNIT.read_text())
    assert only(service, "Service", "Sockets") == SOCKET_UNIT.name

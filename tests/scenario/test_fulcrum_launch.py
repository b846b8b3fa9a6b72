"""``fulcrum launch`` on the proving ground, with a stand-in resident at the end of the chain.

Each test stands up a ground (an internet with its gateway, the node's NIC in the host
namespace, a client), runs ``fulcrum launch`` as a subprocess the way systemd would, and
observes from outside: from the client namespace, from the unit's netns entered by the
resident's pid, and from the stand-in's own report of what it was handed.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from fulcrum.exec_chain import RESIDENT_PATH, control_socket_path
from fulcrum.launch import unit_lock_path
from tests.scenario.proving_ground import (
    FULCRUM,
    GATEWAY,
    PREFIX,
    UNIT_IP,
    Ground,
    host_has_link,
    ip_json,
    kernel_has_link_kind,
    listener_in_pid,
    netns_names,
    process_gone,
    run,
    run_in_pid,
    tcp_exchange,
    tcp_exchange_in_pid,
    udp_exchange,
    wait_for,
)
from tests.scenario.standin_launch import (  # noqa: F401 (fixtures)
    DSN,
    REPORT_TIMEOUT,
    accepted_ports,
    account,
    launch,
)
from tests.scenario.steer_object import steer_object_path
from valis_core.launch import parse_launch_argv, render_launch_argv
from valis_core.launcher_config import parse_launcher_config

ZERO_CAPS = "0000000000000000"


def assert_torn_down(ground: Ground, resident_pid: int) -> None:
    assert ground.unit_netns not in netns_names()
    assert process_gone(resident_pid)
    assert host_has_link(ground.nic), "the NIC did not come back to the host namespace"
    reply = udp_exchange(ground.client, UNIT_IP, 53, "anyone?", timeout=1.0)
    assert not reply["ok"], "something still answers on the unit address"


def test_dedicated_unit_has_its_address_route_and_only_the_accept_set_reachable(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch()
    report = unit.report()
    pid = report["pid"]

    assert not host_has_link(ground.nic), "the dedicated NIC should have left the host"
    addrs = ip_json(["-4", "addr", "show", "dev", ground.nic], pid=pid)
    assert [(a["local"], a["prefixlen"]) for a in addrs[0]["addr_info"]] == [(UNIT_IP, PREFIX)]
    routes = ip_json(["-4", "route", "show", "default"], pid=pid)
    assert [(r["gateway"], r["dev"]) for r in routes] == [(GATEWAY, ground.nic)]
    lo = ip_json(["link", "show", "dev", "lo"], pid=pid)
    assert "UP" in lo[0]["flags"]

    policy, ports, others = accepted_ports(pid)
    assert policy == "drop"
    assert ports == {("udp", 53), ("tcp", 53)}
    assert others[:2] == ['iif "lo" accept', "ct state established,related accept"]
    assert len(others) == 3
    assert others[2].startswith("icmpv6 type {")

    assert udp_exchange(ground.client, UNIT_IP, 53, "ping")["reply"] == "echo:ping"
    assert tcp_exchange(ground.client, UNIT_IP, 53, "hello")["reply"] == "echo:hello"
    with listener_in_pid(pid, 8080):
        assert tcp_exchange_in_pid(pid, UNIT_IP, 8080)["ok"], "the listener is up inside"
        from_client = tcp_exchange(ground.client, UNIT_IP, 8080, timeout=1.0)
        assert not from_client["ok"]
        assert from_client["error"] == "TimeoutError", "8080 must be dropped, not refused"

    assert unit.fulcrum.stop() == 0


def test_resident_runs_as_valis_without_capabilities_holding_only_the_bound_sockets(
    ground: Ground, launch: Any, account: tuple[int, int]  # noqa: F811
) -> None:
    uid, gid = account
    # An elected edge has fulcrum attach the sk_lookup steer, so the object must exist.
    unit = launch(edge_port=443, owner_port=8853, catchall_object_path=str(steer_object_path()))
    report = unit.report()

    status = report["status"]
    assert status["Uid"].split() == [str(uid)] * 4
    assert status["Gid"].split() == [str(gid)] * 4
    for caps in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
        assert status[caps] == ZERO_CAPS, caps
    assert status["NoNewPrivs"] == "1"
    assert report["bind_dns_udp"] == "EACCES"
    assert report["bind_dns_tcp"] == "EACCES"
    assert report["bind_any_low_port"] == "EACCES"
    assert report["netns"] != os.readlink("/proc/self/ns/net")

    record = parse_launch_argv(report["argv"])
    assert report["argv"] == render_launch_argv(record)
    cfg = parse_launcher_config(unit.config_path.read_text())
    assert record.resident
    assert record.control_socket == control_socket_path(cfg)
    assert record.ports == frozenset({53, 443, 8853})
    # The edge port is steered to the socket the resident pushes, never bound by fulcrum.
    assert record.edge_tcp_fd is None
    expected: dict[int | None, tuple[int, list[object], bool]] = {
        **{fd: (2, [UNIT_IP, 53], False) for fd in record.dns_udp_fds},
        record.dns_tcp_fd: (1, [UNIT_IP, 53], True),
        record.owner_fd: (1, [UNIT_IP, 8853], True),
    }
    fds = report["fds"]
    assert set(fds) == {"0", "1", "2"} | {str(fd) for fd in expected}
    for fd, (sock_type, sockname, listening) in expected.items():
        entry = fds[str(fd)]
        assert (entry["type"], entry["sockname"], entry["listening"]) == (
            sock_type, sockname, listening
        ), fd

    env = report["env"]
    assert env["VALIS_OPERATOR_STATE_DSN"] == DSN
    assert env["PATH"] == RESIDENT_PATH
    assert "NOT_FOR_THE_RESIDENT" not in env

    _, ports, _ = accepted_ports(report["pid"])
    assert ports == {("udp", 53), ("tcp", 53), ("tcp", 443), ("tcp", 8853)}
    # The stand-in pushes nothing: the steer has no socket, so 443 is refused.
    assert tcp_exchange(ground.client, UNIT_IP, 443)["error"] == "ConnectionRefusedError"
    assert tcp_exchange(ground.client, UNIT_IP, 8853, "owner")["reply"] == "echo:owner"
    assert unit.fulcrum.stop() == 0


def test_sigterm_to_fulcrum_stops_the_resident_and_tears_the_unit_down(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    index_before = ip_json(["link", "show", "dev", ground.nic])[0]["ifindex"]
    unit = launch()
    pid = unit.report()["pid"]

    unit.fulcrum.signal(signal.SIGTERM)
    assert unit.fulcrum.wait() == 0
    assert unit.stopped_marker() == {"signal": signal.SIGTERM}
    assert_torn_down(ground, pid)
    returned = ip_json(["link", "show", "dev", ground.nic])[0]
    assert returned["ifindex"] == index_before
    assert "resident stopped on SIGTERM" in unit.fulcrum.stderr
    assert f"unit {ground.unit_netns} torn down" in unit.fulcrum.stderr


def test_a_resident_crashing_at_every_start_is_restarted_five_times_then_reported(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch(env={"VALIS_STANDIN_EXIT": "3"})
    pid = unit.report()["pid"]

    assert unit.fulcrum.wait() == 3
    stderr = unit.fulcrum.stderr
    assert stderr.count("starting it again on the same sockets") == 5, stderr
    assert stderr.count("resident running as pid") == 6, stderr
    assert ("resident exited with status 3 without being asked to stop; not started again: "
            "it ended 6 times in a row") in stderr, stderr
    assert_torn_down(ground, pid)


def test_resident_ignoring_sigterm_is_killed_when_the_stop_bound_runs_out(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch(env={"VALIS_STANDIN_IGNORE_TERM": "1"}, extra_args=("--stop-timeout", "1"))
    pid = unit.report()["pid"]

    unit.fulcrum.signal(signal.SIGTERM)
    assert unit.fulcrum.wait() == 128 + signal.SIGKILL
    assert "ignored SIGTERM past the stop bound" in unit.fulcrum.stderr
    assert_torn_down(ground, pid)


def test_second_launch_after_a_killed_fulcrum_reclaims_the_stale_netns(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    first = launch()
    orphan = first.report()["pid"]
    first.fulcrum.signal(signal.SIGKILL)
    first.fulcrum.wait()
    assert ground.unit_netns in netns_names()
    assert not host_has_link(ground.nic), "the NIC is still inside the stale netns"
    lock = unit_lock_path(parse_launcher_config(first.config_path.read_text()))
    assert lock.exists(), "the killed fulcrum's lock file should be left (unheld)"

    second = launch()
    report = second.report()
    assert "reclaiming netns" in second.fulcrum.stderr
    assert process_gone(orphan), "the orphaned resident was left running"
    assert udp_exchange(ground.client, UNIT_IP, 53, "again")["reply"] == "echo:again"

    assert second.fulcrum.stop() == 0
    assert_torn_down(ground, report["pid"])


def test_of_two_launches_racing_for_one_netns_one_serves_and_the_other_touches_nothing(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    units = [launch(), launch()]
    wait_for(lambda: any(u.fulcrum.process.poll() is not None for u in units),
             REPORT_TIMEOUT, "one of the two launches to be refused")
    [loser] = [u for u in units if u.fulcrum.process.poll() is not None]
    [winner] = [u for u in units if u is not loser]
    assert loser.fulcrum.wait() == 1
    assert (
        f"netns {ground.unit_netns} is already run by fulcrum pid {winner.fulcrum.process.pid}"
        in loser.fulcrum.stderr
    ), loser.fulcrum.stderr
    assert not loser.report_path.exists()
    pid = winner.report()["pid"]
    assert udp_exchange(ground.client, UNIT_IP, 53, "one")["reply"] == "echo:one"
    assert winner.fulcrum.stop() == 0
    assert_torn_down(ground, pid)


def test_teardown_leaves_alone_a_netns_of_its_name_it_did_not_make(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch()
    pid = unit.report()["pid"]
    # By hand, while the unit runs: its netns's name deleted, and another netns made under
    # it with a process of someone else's inside.
    run(["ip", "netns", "del", ground.unit_netns])
    run(["ip", "netns", "add", ground.unit_netns])
    bystander = subprocess.Popen(["ip", "netns", "exec", ground.unit_netns, "sleep", "120"])
    try:
        wait_for(lambda: run_in_pid(bystander.pid, ["true"], check=False).returncode == 0,
                 REPORT_TIMEOUT, "the bystander in the other netns")
        assert unit.fulcrum.stop() == 0
        assert process_gone(pid)
        assert bystander.poll() is None, "teardown killed a process of a netns it never made"
        assert ground.unit_netns in netns_names(), "teardown deleted a netns it never made"
        # The NIC came back from the netns fulcrum made, reached through its descriptor.
        assert host_has_link(ground.nic)
        assert f"netns {ground.unit_netns} is no longer the one this fulcrum made" in (
            unit.fulcrum.stderr
        )
    finally:
        bystander.kill()
        bystander.wait()


def test_macvlan_unit_gets_a_child_of_the_parent_which_stays_on_the_host(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    run(["ip", "link", "set", ground.nic, "up"])
    unit = launch(mode="macvlan")
    report = unit.report()
    pid = report["pid"]

    child = ip_json(["-d", "link", "show", "dev", ground.nic], pid=pid)[0]
    assert child["linkinfo"]["info_kind"] == "macvlan"
    assert host_has_link(ground.nic), "the parent must stay in the host namespace"
    routes = ip_json(["-4", "route", "show", "default"], pid=pid)
    assert [r["gateway"] for r in routes] == [GATEWAY]
    assert udp_exchange(ground.client, UNIT_IP, 53, "mv")["reply"] == "echo:mv"

    assert unit.fulcrum.stop() == 0
    assert_torn_down(ground, pid)
    parent = ip_json(["-d", "link", "show", "dev", ground.nic])[0]
    assert parent["linkinfo"]["info_kind"] == "veth"


UNIT_IP6 = "2001:db8:5::10"
CLIENT_IP6 = "2001:db8:6::2"


def give_ground_an_ipv6_router(ground: Ground) -> None:
    """The ground's router speaks IPv6 too: fe80::1 and 2001:db8:5::1 on the unit's link,
    and the client alone on another link (2001:db8:6::/64), so a reply from the unit
    reaches the client only through the router."""
    inet, cli = ground.internet, ground.client
    run(["ip", "netns", "exec", inet, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
    run(["ip", "-n", inet, "addr", "add", "fe80::1/64", "dev", "br0", "nodad"])
    run(["ip", "-n", inet, "addr", "add", "2001:db8:5::1/64", "dev", "br0", "nodad"])
    run(["ip", "-n", inet, "link", "set", "cli-peer", "nomaster"])
    run(["ip", "-n", inet, "addr", "add", "2001:db8:6::1/64", "dev", "cli-peer", "nodad"])
    run(["ip", "-n", cli, "addr", "add", f"{CLIENT_IP6}/64", "dev", "eth0", "nodad"])
    run(["ip", "-n", cli, "-6", "route", "add", "default", "via", "2001:db8:6::1"])


def test_an_ipv6_unit_routes_through_its_routers_link_local_address(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    give_ground_an_ipv6_router(ground)
    unit = launch(unit_ip=UNIT_IP6, unit_cidr=64, public_gateway="fe80::1")
    report = unit.report()
    pid = report["pid"]

    routes = ip_json(["-6", "route", "show", "default"], pid=pid)
    assert [(r["gateway"], r["dev"]) for r in routes] == [("fe80::1", ground.nic)]
    reply = udp_exchange(ground.client, UNIT_IP6, 53, "six", timeout=5.0)
    assert reply.get("reply") == "echo:six", (reply, unit.fulcrum.stderr)

    assert unit.fulcrum.stop() == 0


def test_ipvlan_unit_comes_up_or_is_refused_naming_the_mode(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    run(["ip", "link", "set", ground.nic, "up"])
    if kernel_has_link_kind("ipvlan"):
        unit = launch(mode="ipvlan")
        report = unit.report()
        child = ip_json(["-d", "link", "show", "dev", ground.nic], pid=report["pid"])[0]
        assert child["linkinfo"]["info_kind"] == "ipvlan"
        assert udp_exchange(ground.client, UNIT_IP, 53, "iv")["reply"] == "echo:iv"
        assert unit.fulcrum.stop() == 0
        assert_torn_down(ground, report["pid"])
        return
    unit = launch(mode="ipvlan")
    assert unit.fulcrum.wait() == 1
    stderr = unit.fulcrum.stderr
    assert "fulcrum: mode ipvlan: this kernel has no ipvlan link support" in stderr
    assert "Traceback" not in stderr
    assert ground.unit_netns not in netns_names()
    assert host_has_link(ground.nic)
    assert not unit.report_path.exists()


def test_missing_public_interface_is_refused_and_leaves_no_netns(
    ground: Ground, launch: Any  # noqa: F811
) -> None:
    unit = launch(public_interface="vl-absent0")
    assert unit.fulcrum.wait() == 1
    assert "public interface vl-absent0 is not in the host namespace" in unit.fulcrum.stderr
    assert ground.unit_netns not in netns_names()


def test_missing_config_is_refused_naming_its_path(tmp_path: Path) -> None:
    path = tmp_path / "launcher.toml"
    result = run([FULCRUM, "launch", "--config", str(path)], check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"fulcrum: launcher config: no file at {path}; "
        "produce one with `fulcrum config produce`"
    )

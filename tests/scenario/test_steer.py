"""The sk_lookup steer on real BPF in real network namespaces.

A unit netns (203.0.113.10 and 2001:db8::10, with a second address 203.0.113.11 the steer
does not serve) is joined by a veth pair to a client netns (203.0.113.100,
2001:db8::100). The node's listening socket is made inside the unit netns on an
ephemeral port by a stock interpreter and handed to the test over SCM_RIGHTS, as the
resident's push hands it to fulcrum. The steer object is compiled from the repository's
source by the same script ``make build`` runs. ``bpftool link`` is the outside witness
that a link exists while attached and is gone after ``close`` or teardown.

The last tests run ``fulcrum launch`` on a proving ground with a stand-in resident: the
steer is attached only when ``edge-port`` is elected, detached before the netns goes,
and a wrong ``catchall-object-path`` stops bring-up naming the path.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulcrum.steer import Steer, SteerError
from tests.conftest import require_root
from tests.scenario.pg import RUN_USER, ensure_system_user, run_as
from tests.scenario.proving_ground import (
    PYTHON,
    Fulcrum,
    Ground,
    netns_names,
    tcp_exchange,
    unit_config_text,
    wait_for,
)
from tests.scenario.resident_harness import resident_runtime
from tests.scenario.steer_netns import (  # noqa: F401 (the fixture pair)
    EDGE,
    OTHER4,
    UNIT4,
    UNIT6,
    attached,
    netns_fd,
    netns_inode,
    pair,
    steer_links,
)
from tests.scenario.steer_object import steer_object_path

STANDIN = Path(__file__).with_name("standin_resident.py")
REPORT_TIMEOUT = 30.0
SWAPS = 40
SWAP_CONNECTIONS = 400

# Runs as root inside the unit netns: make a listening TCP socket on an ephemeral port
# and send it to the test over the inherited UNIX socket, then exit.
_MAKE_LISTENER = r"""
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.bind((sys.argv[1], 0))
s.listen(1024)
channel = socket.socket(fileno=int(sys.argv[2]))
socket.send_fds(channel, [b"x"], [s.fileno()])
"""

# Runs in the client netns: connect COUNT times in a row, report every outcome.
_CONNECT_LOOP = r"""
import json, socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("started", flush=True)
outcomes = {}
for _ in range(count):
    try:
        socket.create_connection((host, port), timeout=2).close()
        key = "ok"
    except OSError as exc:
        key = type(exc).__name__
    outcomes[key] = outcomes.get(key, 0) + 1
print(json.dumps(outcomes), flush=True)
"""


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def steer_object() -> Path:
    """The steer object compiled from packaging/bpf (once per session)."""
    require_root()
    return steer_object_path()


def listener_in(netns: str, address: str) -> socket.socket:
    """A listening TCP socket made inside ``netns`` on an ephemeral port, now ours."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        subprocess.run(
            ["ip", "netns", "exec", netns, PYTHON, "-I", "-c", _MAKE_LISTENER, address,
             str(theirs.fileno())],
            pass_fds=[theirs.fileno()], check=True, timeout=30, capture_output=True,
        )
        ours.settimeout(10)
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    sock = socket.socket(fileno=fds[0])
    assert sock.getsockname()[1] != EDGE
    return sock


def accepted_on(listener: socket.socket) -> tuple[Any, ...] | None:
    """The local address of a connection waiting on ``listener``, or None (no wait)."""
    listener.setblocking(False)
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return None
    with conn:
        return tuple(conn.getsockname()[:2])


def drain(listener: socket.socket) -> int:
    count = 0
    while accepted_on(listener) is not None:
        count += 1
    return count


def link_ids() -> set[int]:
    return {int(link["id"]) for link in steer_links()}


# -- the steer on its own ----------------------------------------------------------------


@pytest.mark.parametrize(("unit_address", "client"), [(UNIT4, "v4"), (UNIT6, "v6")])
def test_a_declared_port_on_the_unit_address_reaches_the_node_socket(
    steer_object: Path, pair: tuple[str, str], unit_address: str, client: str  # noqa: F811
) -> None:
    unit, client_ns = pair
    inode = netns_inode(f"/run/netns/{unit}")
    with listener_in(unit, unit_address) as listener, attached(
        steer_object, unit, (UNIT4, UNIT6)
    ) as steer:
        assert [link["netns_ino"] for link in steer_links(inode)] == [inode]
        steer.assign(listener.fileno())

        outcome = tcp_exchange(client_ns, unit_address, EDGE)

        assert outcome["ok"], outcome
        assert accepted_on(listener) == (unit_address, EDGE)


def test_an_undeclared_port_or_another_address_is_passed_over(
    steer_object: Path, pair: tuple[str, str]  # noqa: F811
) -> None:
    unit, client = pair
    with listener_in(unit, UNIT4) as listener, attached(steer_object, unit) as steer:
        steer.assign(listener.fileno())

        undeclared = tcp_exchange(client, UNIT4, EDGE + 1)
        other_address = tcp_exchange(client, OTHER4, EDGE)

        assert undeclared["error"] == "ConnectionRefusedError"
        assert other_address["error"] == "ConnectionRefusedError"
        assert accepted_on(listener) is None


def test_after_close_the_declared_port_is_refused_and_no_link_remains(
    steer_object: Path, pair: tuple[str, str]  # noqa: F811
) -> None:
    unit, client = pair
    inode = netns_inode(f"/run/netns/{unit}")
    with listener_in(unit, UNIT4) as listener:
        with attached(steer_object, unit) as steer:
            steer.assign(listener.fileno())
            assert tcp_exchange(client, UNIT4, EDGE)["ok"]
            assert steer_links(inode)
        steer.close()  # a second close is a no-op

        assert steer_links(inode) == []
        assert tcp_exchange(client, UNIT4, EDGE)["error"] == "ConnectionRefusedError"


def test_assigning_again_replaces_the_socket_in_place_without_refusing_anyone(
    steer_object: Path, pair: tuple[str, str]  # noqa: F811
) -> None:
    unit, client = pair
    with listener_in(unit, UNIT4) as old, listener_in(unit, UNIT4) as new, attached(
        steer_object, unit
    ) as steer:
        steer.assign(old.fileno())
        assert tcp_exchange(client, UNIT4, EDGE)["ok"]
        assert accepted_on(old) == (UNIT4, EDGE)

        steer.assign(new.fileno())
        assert tcp_exchange(client, UNIT4, EDGE)["ok"]
        assert accepted_on(new) == (UNIT4, EDGE)
        assert accepted_on(old) is None

        # A client connecting in a loop while the socket is swapped back and forth.
        loop = subprocess.Popen(
            ["ip", "netns", "exec", client, PYTHON, "-I", "-c", _CONNECT_LOOP, UNIT4,
             str(EDGE), str(SWAP_CONNECTIONS)],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert loop.stdout is not None
            assert loop.stdout.readline().strip() == "started"
            for n in range(SWAPS):
                steer.assign((old if n % 2 == 0 else new).fileno())
                drain(old)
                drain(new)
            outcome = json.loads(loop.stdout.readline())
        finally:
            loop.kill()
            loop.wait(timeout=30)
            if loop.stdout is not None:
                loop.stdout.close()
        assert outcome == {"ok": SWAP_CONNECTIONS}


def test_a_descriptor_that_is_not_a_listening_tcp_socket_is_refused(
    steer_object: Path, pair: tuple[str, str]  # noqa: F811
) -> None:
    unit, _ = pair
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, attached(
        steer_object, unit
    ) as steer, pytest.raises(SteerError, match="not a listening TCP socket"):
        steer.assign(udp.fileno())


def test_a_missing_object_fails_at_open_naming_the_path(pair: tuple[str, str]) -> None:  # noqa: F811
    unit, _ = pair
    before = link_ids()
    missing = "/nonexistent/valis/sk-lookup-catchall.bpf.o"
    with netns_fd(unit) as fd, pytest.raises(SteerError) as refused:
        Steer.attach(missing, fd, ipaddress.ip_address(UNIT4), frozenset({EDGE}))
    message = str(refused.value)
    assert missing in message
    assert "No such file or directory" in message
    assert "\n" not in message
    assert link_ids() <= before


def test_a_failed_attach_leaves_nothing_attached(
    steer_object: Path, tmp_path: Path
) -> None:
    before = link_ids()
    not_a_netns = tmp_path / "plain-file"
    not_a_netns.write_text("")
    with open(not_a_netns, "rb") as handle, pytest.raises(SteerError, match="attaching"):
        Steer.attach(str(steer_object), handle.fileno(), ipaddress.ip_address(UNIT4),
                     frozenset({EDGE}))
    assert link_ids() <= before


def test_a_killed_holder_leaves_no_link(steer_object: Path, pair: tuple[str, str]) -> None:  # noqa: F811
    unit, _ = pair
    inode = netns_inode(f"/run/netns/{unit}")
    script = (
        "import ipaddress, os, sys, time\n"
        "from fulcrum.steer import Steer\n"
        "fd = os.open(sys.argv[2], os.O_RDONLY)\n"
        "Steer.attach(sys.argv[1], fd, ipaddress.ip_address(sys.argv[3]), frozenset({443}))\n"
        "print('attached', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(steer_object), f"/run/netns/{unit}", UNIT4],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "attached"
        assert len(steer_links(inode)) == 1
    finally:
        holder.kill()
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()

    wait_for(lambda: not steer_links(inode), 10, "the killed holder's link to go")


def test_an_unprivileged_process_cannot_load_or_attach_the_steer(steer_object: Path) -> None:
    ensure_system_user(RUN_USER)
    python = str(Path(resident_runtime()).parent / "python")
    script = (
        "import ipaddress, os, sys\n"
        "from fulcrum.steer import Steer, SteerError\n"
        "fd = os.open(sys.argv[2], os.O_RDONLY)\n"
        "try:\n"
        "    Steer.attach(sys.argv[1], fd, ipaddress.ip_address(sys.argv[3]),"
        " frozenset({443}))\n"
        "except SteerError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    before = link_ids()
    # The run account cannot open the named netns either, so it tries its own.
    result = run_as(RUN_USER, [python, "-I", "-c", script, str(steer_object),
                               "/proc/self/ns/net", UNIT4])

    assert result.returncode == 3, result.stderr
    assert "loading" in result.stdout
    assert "Operation not permitted" in result.stdout
    assert link_ids() <= before


# -- the steer in fulcrum's bring-up and teardown ------------------------------------------


@pytest.fixture
def launch_unit(ground: Ground) -> Iterator[Any]:
    """Start ``fulcrum launch`` on the ground with a stand-in resident; stopped after."""
    account = ensure_system_user(RUN_USER)
    workdir = Path(tempfile.mkdtemp(prefix="vl-steer-"))
    os.chown(workdir, account.pw_uid, account.pw_gid)
    standin = workdir / STANDIN.name
    shutil.copyfile(STANDIN, standin)
    standin.chmod(0o644)
    started: list[Fulcrum] = []

    def start(**fields: Any) -> tuple[Fulcrum, Path]:
        config = workdir / f"launcher-{len(started)}.toml"
        config.write_text(unit_config_text(ground, (PYTHON, "-I", str(standin)), **fields))
        report = workdir / f"report-{len(started)}.json"
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "VALIS_STANDIN_REPORT": str(report)}
        fulcrum = Fulcrum.start(config, env, workdir)
        started.append(fulcrum)
        return fulcrum, report

    try:
        yield start
    finally:
        for fulcrum in started:
            if fulcrum.process.poll() is None:
                fulcrum.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def resident_pid(fulcrum: Fulcrum, report: Path) -> int:
    wait_for(lambda: report.exists() or fulcrum.process.poll() is not None, REPORT_TIMEOUT,
             "the stand-in resident's report")
    assert report.exists(), fulcrum.stderr
    return int(json.loads(report.read_text())["pid"])


def test_fulcrum_attaches_the_steer_for_an_elected_edge_and_removes_it_at_teardown(
    steer_object: Path, ground: Ground, launch_unit: Any
) -> None:
    fulcrum, report = launch_unit(edge_port=EDGE, catchall_object_path=str(steer_object))
    pid = resident_pid(fulcrum, report)
    inode = netns_inode(f"/proc/{pid}/ns/net")
    links = steer_links(inode)
    assert len(links) == 1, fulcrum.stderr

    assert fulcrum.stop() == 0

    assert int(links[0]["id"]) not in link_ids()
    assert ground.unit_netns not in netns_names()


def test_fulcrum_without_an_edge_attaches_no_steer(
    ground: Ground, launch_unit: Any
) -> None:
    missing = "/nonexistent/valis/sk-lookup-catchall.bpf.o"
    fulcrum, report = launch_unit(catchall_object_path=missing)
    pid = resident_pid(fulcrum, report)

    assert steer_links(netns_inode(f"/proc/{pid}/ns/net")) == []
    assert fulcrum.stop() == 0


def test_a_wrong_catchall_object_path_stops_bring_up_naming_it(
    ground: Ground, launch_unit: Any
) -> None:
    before = link_ids()
    missing = "/nonexistent/valis/sk-lookup-catchall.bpf.o"
    fulcrum, report = launch_unit(edge_port=EDGE, catchall_object_path=missing)

    assert fulcrum.wait() == 1
    assert not report.exists()
    errors = [line for line in fulcrum.stderr.splitlines() if missing in line]
    assert len(errors) == 1, fulcrum.stderr
    assert "No such file or directory" in errors[0]
    assert ground.unit_netns not in netns_names()
    assert link_ids() <= before


def test_assess_asks_the_kernel_to_load_the_steer_object_and_leaves_nothing(
    steer_object: Path,
) -> None:
    from valis_core.ops.local_probe import LocalHostProbe

    probe = LocalHostProbe()
    before = link_ids()

    assert probe.sk_lookup_supported().ok
    assert probe.bpf_object_loads(str(steer_object)).ok
    missing = probe.bpf_object_loads("/nonexistent/valis/sk-lookup-catchall.bpf.o")
    assert missing.ok is False
    assert "/nonexistent/valis/sk-lookup-catchall.bpf.o" in missing.reason
    assert link_ids() <= before
